package httpapi_test

// The history route a page at a time: limit and cursor, the cursors of
// the last page, bad inputs, and the size of the largest answer.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/store"
)

// longHistory answers the tenant "default"'s executions with a history
// of events[id] events (store.ErrNotFound for other keys), made by event.
// Execution "pairs" has two events per row version (as a commit that
// also starts the next step gives), every other one event per version,
// so a cursor of one is no position of the other.
type longHistory struct {
	events map[string]int
	event  func(i int) history.Event
}

func (h longHistory) History(_ context.Context, key store.Key) ([]history.Event, error) {
	n, ok := h.events[key.ExecutionID]
	if key.TenantID != "default" || !ok {
		return nil, store.ErrNotFound
	}
	evs := make([]history.Event, n)
	for i := range evs {
		evs[i] = h.event(i)
		evs[i].Version, evs[i].Index = int64(i+1), 0
		if key.ExecutionID == "pairs" {
			evs[i].Version, evs[i].Index = int64(i/2+1), i%2
		}
	}
	// A provider's order need not be commit order (history.Number sorts).
	for i, j := 0, len(evs)-1; i < j; i, j = i+1, j-1 {
		evs[i], evs[j] = evs[j], evs[i]
	}
	return evs, nil
}

// ordinaryEvent is an event of a step that retries against a partner
// that is down: the sizes of names, workers and errors a deployment sees.
func ordinaryEvent(i int) history.Event {
	at := epoch.Add(time.Duration(i) * time.Second)
	ev := history.Event{At: at, StepIndex: 2, StepName: "reserve-inventory", Attempt: i/3 + 1, Worker: "qasync-worker-7f3a9c2e-ip-10-0-1-23"}
	switch i % 3 {
	case 0:
		ev.Type, ev.Status = history.StepStarted, store.Running
	case 1:
		ev.Type, ev.Status, ev.RetryAt = history.StepFailed, store.WaitRetry, at.Add(30*time.Second)
		ev.Error = &store.Failure{Code: "partner_unavailable", Message: "POST https://inventory.partner.example/v2/reservations: 503 Service Unavailable"}
	default:
		ev.Type, ev.Status, ev.Worker = history.LeaseTakenOver, store.Running, "qasync-worker-0b1d44aa-ip-10-0-2-57"
		ev.Reason = "the lease of qasync-worker-7f3a9c2e-ip-10-0-1-23 lapsed"
	}
	return ev
}

// largestEvent is an event at the bounds a row allows: an error message
// and a reason of store.MaxErrorMessage bytes, every one a character JSON
// writes as six ("<" becomes \u003c, a control byte \u0001).
func largestEvent(i int) history.Event {
	ev := ordinaryEvent(1)
	ev.At = epoch.Add(time.Duration(i) * time.Second)
	ev.Error = &store.Failure{Code: "html_error_page", Message: strings.Repeat("<", store.MaxErrorMessage)}
	ev.Reason = strings.Repeat("\x01", store.MaxErrorMessage)
	return ev
}

func withHistory(h history.Reader) envOption { return withOperator(nil, nil, h) }

// readPages follows the history of id from its first page with the given
// query (limit) and returns the pages, failing on any answer but 200.
func readPages(t *testing.T, e *env, id, query string) []client.History {
	t.Helper()
	var pages []client.History
	cursor := ""
	for range 10_000 {
		path := "/v1/executions/" + id + "/history?" + query
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		w := get(e, path)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		p := decode[client.History](t, w)
		pages = append(pages, p)
		if p.NextCursor == "" {
			return pages
		}
		if p.NextCursor == cursor {
			t.Fatalf("GET %s answered its own cursor %s", path, cursor)
		}
		cursor = p.NextCursor
	}
	t.Fatal("the pages did not end")
	return nil
}

// checkChain fails unless the pages hold events 1..n once each, in
// order, each page but the last with a nextCursor equal to its
// endCursor, the last with none.
func checkChain(t *testing.T, pages []client.History, n int) {
	t.Helper()
	seq := 0
	for i, p := range pages {
		last := i == len(pages)-1
		if (p.NextCursor == "") != last || (!last && p.NextCursor != p.EndCursor) || p.EndCursor == "" {
			t.Fatalf("page %d of %d: nextCursor %q endCursor %q", i+1, len(pages), p.NextCursor, p.EndCursor)
		}
		for _, ev := range p.Events {
			if seq++; ev.Seq != seq {
				t.Fatalf("page %d: event seq %d, want %d", i+1, ev.Seq, seq)
			}
		}
	}
	if seq != n {
		t.Fatalf("the pages hold %d events, the history %d", seq, n)
	}
}

// TestHistoryRoutePages: the history route answers a page of at most
// limit events (100 when absent); following nextCursor gives every
// event once, in order, numbered as in the whole history; the last page
// has no nextCursor, and its endCursor, read after later, gives nothing
// until the execution moves on.
func TestHistoryRoutePages(t *testing.T) {
	t.Parallel()
	h := longHistory{events: map[string]int{"long": 250, "pairs": 250}, event: ordinaryEvent}
	e := newEnv(t, withHistory(h))

	first := decode[client.History](t, get(e, "/v1/executions/long/history"))
	if len(first.Events) != client.DefaultHistoryPage || first.NextCursor == "" || first.Events[99].Seq != 100 {
		t.Fatalf("a page without limit: %d events, next %q", len(first.Events), first.NextCursor)
	}
	for _, id := range []string{"long", "pairs"} {
		for _, limit := range []int{1, 7, 100, 249, 250, 1000} {
			pages := readPages(t, e, id, fmt.Sprintf("limit=%d", limit))
			if want := (250 + limit - 1) / limit; len(pages) != want {
				t.Errorf("%s, limit %d: %d pages, want %d", id, limit, len(pages), want)
			}
			for _, p := range pages {
				if len(p.Events) > limit {
					t.Fatalf("%s, limit %d: a page of %d events", id, limit, len(p.Events))
				}
			}
			checkChain(t, pages, 250)
		}
	}

	// At the end: an empty page that keeps its cursor; once the history
	// has grown, only the new events.
	pages := readPages(t, e, "long", "limit=1000")
	end := pages[len(pages)-1].EndCursor
	at := decode[client.History](t, get(e, "/v1/executions/long/history?cursor="+url.QueryEscape(end)))
	if len(at.Events) != 0 || at.NextCursor != "" || at.EndCursor != end || !strings.Contains(get(e, "/v1/executions/long/history?cursor="+url.QueryEscape(end)).Body.String(), `"events":[]`) {
		t.Fatalf("read after the end: %+v", at)
	}
	h.events["long"] = 253
	more := decode[client.History](t, get(e, "/v1/executions/long/history?cursor="+url.QueryEscape(end)))
	if len(more.Events) != 3 || more.Events[0].Seq != 251 || more.NextCursor != "" || more.EndCursor == end {
		t.Fatalf("read after the end once 3 events joined: %+v", more)
	}
}

// TestHistoryRouteRefusesBadPages: a limit that is not an integer from 1
// to 1000 is a 400 invalid-request; a malformed cursor, or one that
// names no event of this execution's history (another execution's, one
// past its end), a 400 invalid-cursor; the tenant check comes first for
// a cursor that would be valid.
func TestHistoryRouteRefusesBadPages(t *testing.T) {
	t.Parallel()
	h := longHistory{events: map[string]int{"long": 30, "pairs": 30}, event: ordinaryEvent}
	e := newEnv(t, withHistory(h))
	pairs := decode[client.History](t, get(e, "/v1/executions/pairs/history?limit=3"))
	long := decode[client.History](t, get(e, "/v1/executions/long/history?limit=3"))
	for q, kind := range map[string]string{
		"limit=0":                             "invalid-request",
		"limit=-1":                            "invalid-request",
		"limit=1001":                          "invalid-request",
		"limit=ten":                           "invalid-request",
		"limit=1.5":                           "invalid-request",
		"limit=":                              "invalid-request",
		"limit=1&limit=2":                     "invalid-request",
		"cursor=":                             "invalid-cursor",
		"cursor=garbage":                      "invalid-cursor",
		"cursor=h2.1.0.1":                     "invalid-cursor",
		"cursor=h1.1.0":                       "invalid-cursor",
		"cursor=h1.-1.0.1":                    "invalid-cursor",
		"cursor=a&cursor=b":                   "invalid-cursor",
		"cursor=" + strings.Repeat("h", 9000): "invalid-cursor",
		"cursor=h1.999.0.999":                 "invalid-cursor", // past the end
		"cursor=" + url.QueryEscape(pairs.NextCursor):        "invalid-cursor", // another execution's
		"limit=2&cursor=" + url.QueryEscape(pairs.EndCursor): "invalid-cursor",
	} {
		p := wantProblem(t, get(e, "/v1/executions/long/history?"+q), http.StatusBadRequest, kind)
		if p.Detail == "" || strings.Contains(p.Detail, "garbage") {
			t.Errorf("%s: detail %q", q, p.Detail)
		}
	}
	// The other way round too: "long"'s cursor is no position of "pairs".
	wantProblem(t, get(e, "/v1/executions/pairs/history?cursor="+url.QueryEscape(long.NextCursor)), http.StatusBadRequest, "invalid-cursor")
	// Another tenant: not found, whatever the cursor.
	wantProblem(t, get(e, "/v1/executions/long/history?cursor="+url.QueryEscape(long.NextCursor), "X-Tenant-Id", "other"), http.StatusNotFound, "execution-not-found")
}

// TestHistoryRoutePagesARealExecution: the history of executions the
// runtime ran (the memory store's, written with each row write: a
// success, a dead letter and its re-drive) read in pages of 1 and 2 is
// the history read whole, event for event.
func TestHistoryRoutePagesARealExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) { d.History = d.Store.(history.Reader) })
	ok := e.mustSubmit("echo", "k1", `{"n":1}`).ExecutionID
	dead := e.mustSubmit("fail", "k2", `{}`).ExecutionID
	e.drive()
	if w := post(e, "/v1/executions/"+dead+"/redrive", `{"reason":"try again"}`); w.Code != http.StatusAccepted {
		t.Fatalf("redrive: %d %s", w.Code, w.Body)
	}
	e.drive()
	for _, id := range []string{ok, dead} {
		whole, err := e.rt.History(context.Background(), store.Key{TenantID: "default", ExecutionID: id})
		if err != nil || len(whole) < 4 {
			t.Fatalf("history of %s: %d events, %v", id, len(whole), err)
		}
		for _, limit := range []int{1, 2} {
			pages := readPages(t, e, id, fmt.Sprintf("limit=%d", limit))
			checkChain(t, pages, len(whole))
			i := 0
			for _, p := range pages {
				for _, ev := range p.Events {
					if w := whole[i]; ev.Type != w.Type || ev.Attempt != w.Attempt || ev.Status != w.Status || !ev.At.Equal(w.At) {
						t.Fatalf("%s, limit %d: event %d is %+v, the whole history's %+v", id, limit, i+1, ev, w)
					}
					i++
				}
			}
		}
	}
}

// TestHistoryAnswerSizeIsBounded: a page of history.MaxPage ordinary
// events is one answer well within the byte budget; a thousand events at
// the bounds a row allows (2 KB messages and reasons JSON writes six
// times over) would be about 25 MB, over API Gateway's 6 MB: the route
// answers at most 1 MiB of events a page instead, with a nextCursor, and
// the pages still give every event once. Sizes are counted in bytes and
// events; nothing is timed.
func TestHistoryAnswerSizeIsBounded(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	e := newEnv(t, withHistory(longHistory{events: map[string]int{"ordinary": 2500}, event: ordinaryEvent}))
	w := get(e, "/v1/executions/ordinary/history?limit=1000")
	page := decode[client.History](t, w)
	if len(page.Events) != history.MaxPage || page.NextCursor == "" {
		t.Fatalf("a page of limit 1000: %d events, next %q", len(page.Events), page.NextCursor)
	}
	if n := w.Body.Len(); n > budget/2 {
		t.Errorf("a page of %d ordinary events is %d bytes, more than half the budget", len(page.Events), n)
	}
	t.Logf("a page of %d ordinary events: %d bytes of JSON (%d B an event)", len(page.Events), w.Body.Len(), w.Body.Len()/len(page.Events))

	large := newEnv(t, withHistory(longHistory{events: map[string]int{"large": history.MaxPage}, event: largestEvent}))
	w = get(large, "/v1/executions/large/history?limit=1000")
	first := decode[client.History](t, w)
	if w.Body.Len() > budget+1024 || len(first.Events) == 0 || len(first.Events) == history.MaxPage || first.NextCursor == "" {
		t.Fatalf("a page of the largest events: %d bytes, %d events, next %q", w.Body.Len(), len(first.Events), first.NextCursor)
	}
	one := get(large, "/v1/executions/large/history?limit=1").Body.Len()
	t.Logf("the largest events: %d bytes an event; a page of limit 1000 holds %d of them in %d bytes (a thousand would be %d)",
		one, len(first.Events), w.Body.Len(), one*history.MaxPage)
	pages := readPages(t, large, "large", "limit=1000")
	checkChain(t, pages, history.MaxPage)
	for i := range pages {
		if b := get(large, "/v1/executions/large/history?limit=1000"+cursorParam(pages, i)).Body.Len(); b > budget+1024 {
			t.Fatalf("page %d of the largest events is %d bytes", i+1, b)
		}
	}
}

// cursorParam is the cursor parameter that reads pages[i] again.
func cursorParam(pages []client.History, i int) string {
	if i == 0 {
		return ""
	}
	return "&cursor=" + url.QueryEscape(pages[i-1].NextCursor)
}
