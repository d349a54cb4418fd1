package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/store"
)

// The fan-out fixtures of tenant acme: fanWaitingID waits for its 100
// children (WAITING_CHILDREN), three of which are stored; fanDoneID's map
// of three children ended (one failed, tolerated) and it succeeded.
const (
	fanWaitingID = "0195a1c2-0000-8000-8000-00000000fan1"
	fanDoneID    = "0195a1c2-0000-8000-8000-00000000fan2"
)

// fanChildID is the id of a fixture parent's child, shaped as the
// runtime's (engine.ChildID): the parent's id, the map step, the index,
// then the incarnation.
func fanChildID(parentID string, step, index int) string {
	return fmt.Sprintf("%s-%d-%d.%016x", parentID, step, index, 0xc0ffee00+index)
}

// The counts of fanWaitingID's map.
var fanWaitingCounts = engine.ChildCounts{Total: 100, Succeeded: 12, Failed: 1, Running: 25, Pending: 62}

// fanOut adds the fan-out fixtures (newFakeBackend calls it).
func (f *fakeBackend) fanOut() {
	steps := []string{"validate", "render-each", "join"}
	for _, fx := range []struct {
		id     string
		status store.Status
		total  int
		counts engine.ChildCounts
		kids   map[int]store.Status
	}{
		{fanWaitingID, store.WaitingChildren, 100, fanWaitingCounts,
			map[int]store.Status{0: store.Succeeded, 7: store.Running, 40: store.Pending}},
		{fanDoneID, store.Succeeded, 3, engine.ChildCounts{Total: 3, Succeeded: 2, Failed: 1},
			map[int]store.Status{0: store.Succeeded, 1: store.Succeeded, 2: store.Failed}},
	} {
		created := epoch.Add(-25 * time.Second)
		if fx.status.Terminal() {
			created = epoch.Add(-28 * time.Second)
		}
		p := f.add(tenantAcme, fx.id, "invoices.render", fx.status, created)
		p.StepIndex, p.StepName = 1, steps[1]
		p.Children = &store.Children{StepIndex: 1, Total: fx.total, MaxInFlight: 25, Done: fx.status.Terminal()}
		f.counts[p.Key()] = fx.counts
		at := func(ms int) time.Time { return created.Add(time.Duration(ms) * time.Millisecond) }
		ev := []history.Event{
			{Type: history.Submitted, At: at(0), Status: store.Queued},
			{Type: history.StepStarted, At: at(100), StepName: steps[0], Attempt: 1, Status: store.Running, Worker: "worker-1"},
			{Type: history.StepSucceeded, At: at(300), StepName: steps[0], Attempt: 1, Status: store.Queued},
			{Type: history.StepStarted, At: at(400), StepIndex: 1, StepName: steps[1], Attempt: 1, Status: store.Running, Worker: "worker-1"},
			{Type: history.ChildrenStarted, At: at(900), StepIndex: 1, StepName: steps[1], Attempt: 1, Status: store.WaitingChildren,
				Reason: fmt.Sprintf("%d children, at most 25 at a time", fx.total)},
		}
		if fx.status.Terminal() {
			p.StepIndex, p.StepName, p.UpdatedAt = 2, steps[2], at(2600)
			ev = append(ev,
				history.Event{Type: history.ChildrenFinished, At: at(2000), StepIndex: 1, StepName: steps[1], Attempt: 1, Status: store.Queued,
					Reason: "3 children ended"},
				history.Event{Type: history.StepStarted, At: at(2100), StepIndex: 1, StepName: steps[1], Attempt: 1, Status: store.Running, Worker: "worker-2"},
				history.Event{Type: history.StepSucceeded, At: at(2200), StepIndex: 1, StepName: steps[1], Attempt: 1, Status: store.Queued},
				history.Event{Type: history.StepStarted, At: at(2300), StepIndex: 2, StepName: steps[2], Attempt: 1, Status: store.Running, Worker: "worker-2"},
				history.Event{Type: history.StepSucceeded, At: at(2600), StepIndex: 2, StepName: steps[2], Attempt: 1, Status: store.Succeeded},
				history.Event{Type: history.Succeeded, At: at(2600), StepIndex: 2, StepName: steps[2], Attempt: 1, Status: store.Succeeded},
			)
		}
		f.setEvents(p.Key(), ev)
		for i, st := range fx.kids {
			c := f.add(tenantAcme, fanChildID(fx.id, 1, i), "invoices.render", st, created.Add(time.Second+time.Duration(i)*time.Millisecond))
			c.StepName = "render"
			c.Parent = &store.ParentRef{ExecutionID: fx.id, CreateToken: "c0ffee", StepIndex: 1, Index: i, Total: fx.total, MaxInFlight: 25}
			f.simpleHistory(c)
		}
	}
}

// countCells are the cells of an execution page's children counts.
var countCells = regexp.MustCompile(`data-count="([a-z]+)">(\d+)</td>`)

// shownCounts returns the counts an execution page shows, by name.
func shownCounts(body string) map[string]string {
	got := map[string]string{}
	for _, m := range countCells.FindAllStringSubmatch(body, -1) {
		got[m[1]] = m[2]
	}
	return got
}

// TestParentPageShowsItsChildrenCounts: the page of a parent that waits
// for its children shows every count (total, succeeded, failed, running,
// pending) and how many have ended, and its timeline the wait; once the
// map has ended the counts stay on the page.
func TestParentPageShowsItsChildrenCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/executions/"+fanWaitingID, http.StatusOK)
	wantContains(t, body, `id="exec-status">WAITING_CHILDREN</span>`, `<section class="children" id="children"`,
		`Waiting for its 100 children <span class="muted">(map step 1, at most 25 running at once)</span>`,
		`<progress id="children-progress" max="100" value="13"></progress> 13 of 100 ended`,
		`id="auto-refresh"`, `<span class="etype">CHILDREN_STARTED</span>`, `render-each children`)
	want := map[string]string{"total": "100", "succeeded": "12", "failed": "1", "running": "25", "pending": "62"}
	if got := shownCounts(body); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waiting parent: counts %v, want %v", got, want)
	}
	if strings.Contains(body, `id="parent"`) {
		t.Error("a parent submitted on its own shows a parent")
	}

	done := e.get("/console/executions/"+fanDoneID, http.StatusOK)
	wantContains(t, done, `id="exec-status">SUCCEEDED</span>`, `Its last map fanned out to 3 children`, `3 of 3 ended`,
		`<span class="etype">CHILDREN_FINISHED</span>`)
	want = map[string]string{"total": "3", "succeeded": "2", "failed": "1", "running": "0", "pending": "0"}
	if got := shownCounts(done); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parent after its map: counts %v, want %v", got, want)
	}

	// An execution without a map has no children section.
	if plain := e.get("/console/executions/"+showcaseID, http.StatusOK); strings.Contains(plain, `id="children"`) {
		t.Error("an execution without a map shows children")
	}
}

// TestChildPageLinksItsParent: a child's page names its parent, linked,
// with its place in the map, in the summary and in the crumbs.
func TestChildPageLinksItsParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	child := fanChildID(fanWaitingID, 1, 7)
	body := e.get("/console/executions/"+child, http.StatusOK)
	parentURL := "/console/executions/" + fanWaitingID
	wantContains(t, body,
		`<dt>Parent</dt><dd id="parent"><a class="id" href="`+parentURL+`" id="parent-link" rel="up">`+fanWaitingID+`</a>`+
			` <span class="muted">child #7 of 100, from its map step 1</span></dd>`,
		`<p class="crumbs"><a href="/console">Executions</a> › <a class="id" href="`+parentURL+`" rel="up">`+fanWaitingID+`</a> › `)
	if strings.Contains(body, `id="children"`) {
		t.Error("a child without a map of its own shows children")
	}
	// The link opens the parent's page.
	wantContains(t, e.get(parentURL, http.StatusOK), "Waiting for its 100 children")
}

// TestListMarksParentsAndChildren: the list's fan-out column shows a
// parent's number of children (all the list carries: the link opens its
// counts) and a child's parent, linked.
func TestListMarksParentsAndChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console?pipeline=invoices.render&limit=200", http.StatusOK)
	wantContains(t, body, `<th scope="col">Fan-out</th>`)
	cell := func(id string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<a href="/console/executions/` + regexp.QuoteMeta(id) + `">.*?<td class="fanout">(.*?)</td>`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("the list has no row of %s:\n%s", id, body)
		}
		return m[1]
	}
	if got, want := cell(fanWaitingID), `<a class="children" href="/console/executions/`+fanWaitingID+
		`#children" title="the counts are on the execution's page">100 children</a>`; got != want {
		t.Errorf("waiting parent's cell %q, want %q", got, want)
	}
	if got := cell(fanDoneID); !strings.HasSuffix(got, `>3 children</a> <span class="muted">all ended</span>`) {
		t.Errorf("ended parent's cell %q", got)
	}
	if got, want := cell(fanChildID(fanWaitingID, 1, 40)), `<span class="child">child #40 of <a href="/console/executions/`+
		fanWaitingID+`" title="`+fanWaitingID+`" rel="up">its parent</a></span>`; got != want {
		t.Errorf("child's cell %q, want %q", got, want)
	}
	if got := cell(succeededID); got != "" {
		t.Errorf("an execution without fan-out has the cell %q", got)
	}
	if !strings.Contains(body, `<span class="badge s-pending">PENDING</span>`) {
		t.Error("the list does not show the PENDING child's status")
	}
}

// countsBackend is the fake whose ChildCounts fails with err, or answers
// nil (a deployment that keeps no counts) when err is nil.
type countsBackend struct {
	*fakeBackend
	err error
}

func (b countsBackend) ChildCounts(context.Context, store.Execution) (*engine.ChildCounts, error) {
	return nil, b.err
}

// TestParentPageWithoutCounts: when the counts cannot be read the page is
// still shown, with the map's total and why the counts are missing, and
// the failure is logged; a deployment without counts says so.
func TestParentPageWithoutCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		notice string
		logged bool
	}{
		{errors.New("dynamo: throttled"), "The children&#39;s counts could not be read. Reload the page.", true},
		{nil, "This deployment keeps no counts of a map&#39;s children.", false},
		{console.ErrNotSupported, "This deployment keeps no counts of a map&#39;s children.", false},
	} {
		logs, log := logtest.New()
		e := &env{t: t, h: console.New(countsBackend{newFakeBackend(), tc.err}, console.Options{TenantCookie: true, Logger: log}), logs: logs,
			jar: map[string]string{console.TenantCookieName: tenantAcme}}
		body := e.get("/console/executions/"+fanWaitingID, http.StatusOK)
		wantContains(t, body, "Waiting for its 100 children", `<p class="notice" id="children-notice">`+tc.notice+`</p>`, `id="events"`)
		if got := shownCounts(body); len(got) != 0 {
			t.Errorf("%v: counts %v shown", tc.err, got)
		}
		if logged := strings.Contains(logs.String(), `"event":"console_child_counts_failed"`); logged != tc.logged {
			t.Errorf("%v: console_child_counts_failed logged %v, want %v\n%s", tc.err, logged, tc.logged, logs)
		}
	}
}

// TestHistoryCursorMustNameAnEvent: a well-formed history cursor that
// names no event of the execution's history (a position between events,
// one past its end, another execution's) is refused with 400, as the
// HTTP API's history route refuses it, and never read as the first page.
func TestHistoryCursorMustNameAnEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.f.long()
	long := "/console/executions/" + longID
	next := matches(nextLink, e.get(long, http.StatusOK))
	if len(next) != 1 {
		t.Fatal("the long history's first page links no next page")
	}
	cur := regexp.MustCompile(`cursor=([^&]+)`).FindStringSubmatch(unescape(next[0]))[1]
	// The cursor of its page works on it; the same position on a shorter
	// history, and positions no event has, do not.
	e.get(long+"?cursor="+cur, http.StatusOK)
	for _, c := range []struct{ target, cursor string }{
		{"/console/executions/" + showcaseID, cur},
		{long, "h1.5.0.7"},
		{long, "h1.9999.0.9999"},
		{long, "h1.3.1.3"},
	} {
		body := e.get(c.target+"?cursor="+c.cursor, http.StatusBadRequest)
		wantContains(t, body, `<h1>Bad page link</h1>`,
			`id="problem">This history page link names no event of this execution&#39;s history (it is another execution&#39;s, or an earlier incarnation&#39;s).`,
			`<a href="`+c.target+`" id="back">`)
		if strings.Contains(body, `id="events"`) {
			t.Errorf("%s?cursor=%s shows a timeline", c.target, c.cursor)
		}
	}
}
