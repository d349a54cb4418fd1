package client_test

// The history a page at a time: HistoryPage against the real server,
// and History following the pages of a history longer than a page.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// TestHistoryPage: a retried execution's history read two events a page
// is History's events, each once, in order; the last page has no
// NextCursor and its EndCursor is History's, after which there is
// nothing; a bad limit is a 400 invalid-request, a cursor that names no
// event of the history a 400 invalid-cursor.
func TestHistoryPage(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	e := settle(t, c, clitest.PipelineRetry, store.Succeeded)
	whole := succeededHistory(t, c, e.ExecutionID)
	if len(whole.Events) < 5 || whole.NextCursor != "" || whole.EndCursor == "" {
		t.Fatalf("the whole history: %d events, next %q, end %q", len(whole.Events), whole.NextCursor, whole.EndCursor)
	}
	var got []client.Event
	o := client.HistoryPageOptions{Limit: 2}
	for range len(whole.Events) {
		p, err := c.HistoryPage(ctx, e.ExecutionID, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) > 2 || p.ExecutionID != e.ExecutionID {
			t.Fatalf("a page of limit 2: %+v", p)
		}
		got = append(got, p.Events...)
		if p.NextCursor == "" {
			if p.EndCursor != whole.EndCursor {
				t.Fatalf("the last page ends at %q, the whole history at %q", p.EndCursor, whole.EndCursor)
			}
			break
		}
		o.Cursor = p.NextCursor
	}
	if len(got) != len(whole.Events) {
		t.Fatalf("the pages gave %d events, the history has %d", len(got), len(whole.Events))
	}
	for i := range got {
		if w := whole.Events[i]; got[i].Seq != w.Seq || got[i].Type != w.Type || got[i].Attempt != w.Attempt || !got[i].At.Equal(w.At) {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], whole.Events[i])
		}
	}
	rest, err := c.HistoryAfter(ctx, e.ExecutionID, whole.EndCursor)
	if err != nil || len(rest.Events) != 0 || rest.EndCursor != whole.EndCursor {
		t.Fatalf("after the end: %+v, %v", rest, err)
	}
	for _, bad := range []struct {
		o    client.HistoryPageOptions
		kind string
	}{
		{client.HistoryPageOptions{Limit: client.MaxHistoryPage + 1}, "invalid-request"},
		{client.HistoryPageOptions{Limit: -1}, "invalid-request"},
		{client.HistoryPageOptions{Cursor: "not-a-cursor"}, "invalid-cursor"},
		{client.HistoryPageOptions{Cursor: "h1.999.0.999"}, "invalid-cursor"},
	} {
		_, err := c.HistoryPage(ctx, e.ExecutionID, bad.o)
		if p := problemOf(t, err); !client.IsBadRequest(err) || p.Problem.Kind() != bad.kind {
			t.Errorf("%+v: %v, want a 400 %s", bad.o, err, bad.kind)
		}
	}
}

// pagedServer serves the history route of one execution of n events the
// way the API pages it (history.PageOf, its cursors); repeat, when set,
// makes it hand out the first page's cursor on every page instead.
// requests counts the requests it answered.
func pagedServer(t *testing.T, n int, repeat bool, requests *atomic.Int64) *httptest.Server {
	t.Helper()
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var evs []history.Event
	for i := range n {
		evs = append(evs, history.Event{Type: history.StepStarted, At: at, Status: store.Running, Version: int64(i + 1)})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		after, err := history.ParseCursor(r.URL.Query().Get("cursor"))
		limit, lerr := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil || lerr != nil || !strings.HasSuffix(r.URL.Path, "/history") {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		p := history.PageOf(evs, after, limit)
		doc := client.History{ExecutionID: "e1", Events: []client.Event{}, EndCursor: p.End.String()}
		for _, ev := range p.Events {
			doc.Events = append(doc.Events, client.Event{Seq: ev.Seq, Type: ev.Type, At: ev.At, Status: ev.Status})
		}
		if p.Next != nil {
			doc.NextCursor = p.Next.String()
			if repeat {
				doc.NextCursor = history.PageOf(evs, history.Cursor{}, limit).Next.String()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHistoryFollowsEveryPage: History reads a history of 2,500 events
// in three requests of MaxHistoryPage, every event once; a server that
// hands out a cursor it gave before ends History with an error after a
// bounded number of requests, instead of looping.
func TestHistoryFollowsEveryPage(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	c, err := client.New(pagedServer(t, 2500, false, &requests).URL)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.History(ctxOf(t), "e1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Events) != 2500 || h.NextCursor != "" || h.EndCursor != "h1.2500.0.2500" || requests.Load() != 3 {
		t.Fatalf("History: %d events, next %q, end %q, in %d requests", len(h.Events), h.NextCursor, h.EndCursor, requests.Load())
	}
	for i, ev := range h.Events {
		if ev.Seq != i+1 {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	after, err := c.HistoryAfter(ctxOf(t), "e1", "h1.1800.0.1800")
	if err != nil || len(after.Events) != 700 || after.Events[0].Seq != 1801 {
		t.Fatalf("HistoryAfter 1800: %d events, %v", len(after.Events), err)
	}

	var loops atomic.Int64
	c, err = client.New(pagedServer(t, 2500, true, &loops).URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.History(ctxOf(t), "e1"); err == nil || !strings.Contains(err.Error(), "twice") || loops.Load() > 3 {
		t.Fatalf("History against a server repeating its cursor: %v after %d requests", err, loops.Load())
	}
}
