package console_test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// longID has a history of longEvents events: more than two pages.
const (
	longID     = "0195a1c2-0000-8000-8000-00000000long"
	longEvents = 450
)

// long adds the execution with the long history: a step that failed
// and ran again many times, each event's reason numbering it.
func (f *fakeBackend) long() {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.add(tenantAcme, longID, "diag.drill", store.Running, epoch.Add(-time.Hour))
	e.StepName, e.LeaseOwner = "poll", "worker-9"
	ev := make([]history.Event, longEvents)
	for i := range ev {
		ev[i] = history.Event{Type: history.StepStarted, At: e.CreatedAt.Add(time.Duration(i) * time.Second), StepName: "poll",
			Attempt: i/2 + 1, Status: store.Running, Worker: "worker-9", Reason: fmt.Sprintf("n%04d", i)}
		if i%2 == 1 {
			ev[i].Type, ev[i].Status, ev[i].RetryAt = history.StepFailed, store.WaitRetry, ev[i].At.Add(time.Second)
		}
	}
	ev[0] = history.Event{Type: history.Submitted, At: e.CreatedAt, Status: store.Queued, Reason: "n0000"}
	f.setEvents(e.Key(), ev)
}

var (
	// eventRow is an event's row: its Seq.
	eventSeq = regexp.MustCompile(`<tr class="e-[a-z]+" data-type="[A-Z_]+">\s*<td class="num">(\d+)</td>`)
	// eventReason is the reason that numbers a long history's event.
	eventReason = regexp.MustCompile(`reason: (n\d{4})`)
)

// eachPage calls fn with each page of an execution's history, from the
// page at first on, following the next page links; it returns how many
// there were.
func eachPage(e *env, first string, fn func(page int, body string)) int {
	e.t.Helper()
	target, n := first, 0
	for target != "" {
		n++
		if n > 50 {
			e.t.Fatal("the next page links do not end")
		}
		body := e.get(target, http.StatusOK)
		fn(n, body)
		target = ""
		if next := matches(nextLink, body); len(next) > 0 {
			target = unescape(next[0])
		}
	}
	return n
}

// TestLongHistoryIsPaged: an execution's page shows at most one page of
// its history, with a link to the next; following the links shows every
// event once, in order, numbered on; the first page's link returns to the
// start, and a cursor the console did not give is refused with 400.
func TestLongHistoryIsPaged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.f.long()
	first := "/console/executions/" + longID
	var seqs []int
	var reasons []string
	pages := eachPage(e, first, func(page int, body string) {
		rows := matches(eventSeq, body)
		if len(rows) == 0 || len(rows) > 200 {
			t.Fatalf("page %d shows %d events, want 1 to 200", page, len(rows))
		}
		for _, s := range rows {
			n, _ := strconv.Atoi(s)
			seqs = append(seqs, n)
		}
		reasons = append(reasons, matches(eventReason, body)...)
		if page > 1 {
			if links := matches(firstLink, body); len(links) != 1 || unescape(links[0]) != first {
				t.Errorf("page %d: first page link %v, want %s", page, links, first)
			}
			wantContains(t, body, fmt.Sprintf("page %d, events %d to %d", page, seqs[len(seqs)-len(rows)], seqs[len(seqs)-1]))
		} else if strings.Contains(body, `id="first-page"`) {
			t.Error("the first page links to the first page")
		}
	})
	if pages != 3 {
		t.Errorf("%d pages of %d events, want 3 of at most 200", pages, longEvents)
	}
	wantSeq := make([]int, longEvents)
	wantReasons := make([]string, longEvents)
	for i := range wantSeq {
		wantSeq[i], wantReasons[i] = i+1, fmt.Sprintf("n%04d", i)
	}
	if !slices.Equal(seqs, wantSeq) || !slices.Equal(reasons, wantReasons) {
		t.Errorf("the pages show events %v\nwith reasons %v;\nwant each of the %d once, in order", seqs, reasons, longEvents)
	}

	for _, bad := range []string{"nope", "h1.x.0.0", "h1.-1.0.0"} {
		body := e.get(first+"?cursor="+bad, http.StatusBadRequest)
		wantContains(t, body, `id="problem">This history page link is not one the console gave.`, `<a href="`+first+`" id="back">`)
	}
}

// TestShortHistoryIsNotPaged: a history of one page has no paging links
// and its captions say nothing of pages.
func TestShortHistoryIsNotPaged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/executions/"+showcaseID, http.StatusOK)
	if strings.Contains(body, `class="pager"`) || strings.Contains(body, "from this page's events") ||
		!strings.Contains(body, "<caption>Events, in commit order</caption>") {
		t.Errorf("a one-page history is shown as paged:\n%s", body)
	}
}
