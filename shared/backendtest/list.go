package backendtest

// The list cases of the state store suite (store.Lister): a tenant's rows
// newest first, no other tenant's, every matching row exactly once across
// the pages of a query (also rows created in the same millisecond, also
// under filters that leave pages short), the filters, the limit's bounds,
// and a cursor of another query refused.

import (
	"errors"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// listCases are the list cases, run by runState.
var listCases = []struct {
	name string
	fn   func(*stateEnv)
}{
	{"ListNewestFirst", testListNewestFirst},
	{"ListOnlyTheTenantsRows", testListTenantIsolation},
	{"ListPagesEachRowOnce", testListPagesEachRowOnce},
	{"ListFilters", testListFilters},
	{"ListFilteredPagesEachRowOnce", testListFilteredPages},
	{"ListLimitBounds", testListLimitBounds},
	{"ListRefusesAnotherQuerysCursor", testListForeignCursor},
	{"ListLeavesExpiredRowsOut", testListExpired},
}

// createAt creates row id with CreatedAt at (and the given pipeline and
// status, written by an unleased update when not QUEUED).
func (e *stateEnv) createAt(id string, at time.Time, pipelineID string, status store.Status) store.Execution {
	e.t.Helper()
	r := e.row(id)
	r.CreatedAt, r.PipelineID = at, pipelineID
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: r})
	if err != nil || !created {
		e.t.Fatalf("CreateOrGet(%s) = created %v, err %v", id, created, err)
	}
	if status == store.Queued {
		return got
	}
	next := got
	next.Status = status
	got, err = e.s.Update(e.ctx, store.Guard{Key: got.Key(), Version: got.Version}, next)
	if err != nil {
		e.t.Fatalf("Update(%s) to %s: %v", id, status, err)
	}
	return got
}

// listAll pages through q to the end and returns the rows in page order,
// failing on an error or when paging does not end within maxPages.
func (e *stateEnv) listAll(q store.ListQuery, maxPages int) []store.Execution {
	e.t.Helper()
	var out []store.Execution
	for pages := 0; ; pages++ {
		if pages >= maxPages {
			e.t.Fatalf("paging %+v did not end within %d pages", q, maxPages)
		}
		page, err := e.s.List(e.ctx, q)
		if err != nil {
			e.t.Fatalf("List(%+v): %v", q, err)
		}
		if limit := q.PageSize(); len(page.Executions) > limit {
			e.t.Fatalf("List returned %d rows, over the limit %d", len(page.Executions), limit)
		}
		out = append(out, page.Executions...)
		if page.Cursor == "" {
			return out
		}
		q.Cursor = page.Cursor
	}
}

// checkListed fails unless got holds each id of want exactly once and
// nothing else, newest first.
func (e *stateEnv) checkListed(got []store.Execution, want map[string]bool) {
	e.t.Helper()
	seen := map[string]int{}
	for i, x := range got {
		if x.TenantID != e.tenant {
			e.t.Fatalf("listed another tenant's row %s/%s", x.TenantID, x.ExecutionID)
		}
		seen[x.ExecutionID]++
		if !want[x.ExecutionID] {
			e.t.Errorf("listed %s, which does not match", x.ExecutionID)
		}
		if i > 0 && x.CreatedAt.After(got[i-1].CreatedAt) {
			e.t.Errorf("row %d (%s, created %s) is newer than row %d (%s, created %s): not newest first",
				i, x.ExecutionID, x.CreatedAt, i-1, got[i-1].ExecutionID, got[i-1].CreatedAt)
		}
	}
	for id := range want {
		if seen[id] != 1 {
			e.t.Errorf("row %s listed %d times, want once", id, seen[id])
		}
	}
}

func testListNewestFirst(e *stateEnv) {
	base := e.clock.Now().Add(-time.Hour)
	want := map[string]bool{}
	for i, off := range []int{5, 1, 9, 3, 7, 2, 8} { // created out of order
		id := fmt.Sprintf("n%02d", i)
		e.createAt(id, base.Add(time.Duration(off)*time.Second), "p1", store.Queued)
		want[id] = true
	}
	page, err := e.s.List(e.ctx, store.ListQuery{TenantID: e.tenant, Limit: store.MaxListLimit})
	if err != nil {
		e.t.Fatal(err)
	}
	if page.Cursor != "" {
		e.t.Errorf("one page holds every row, yet a cursor %q", page.Cursor)
	}
	e.checkListed(page.Executions, want)
	if got := page.Executions[0]; got.ExecutionID != "n02" || got.Version != 1 || got.Status != store.Queued || got.PipelineID != "p1" {
		e.t.Errorf("first row %+v, want n02 (the newest) as stored", got)
	}
}

func testListTenantIsolation(e *stateEnv) {
	at := e.clock.Now().Add(-time.Minute)
	e.createAt("mine", at, "p1", store.Queued)
	other := e.row("theirs")
	other.TenantID, other.CreatedAt = e.tenant+"-other", at
	if _, _, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: other}); err != nil {
		e.t.Fatal(err)
	}
	e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant}, 10), map[string]bool{"mine": true})
	theirs := e.listAll(store.ListQuery{TenantID: other.TenantID}, 10)
	if len(theirs) != 1 || theirs[0].ExecutionID != "theirs" {
		e.t.Fatalf("the other tenant lists %d rows, want its one", len(theirs))
	}
}

// testListPagesEachRowOnce: 30 rows created in the same millisecond and
// 12 around them, paged 7 at a time: each exactly once, newest first.
func testListPagesEachRowOnce(e *stateEnv) {
	same := e.clock.Now().Add(-time.Minute)
	want := map[string]bool{}
	for i := range 30 {
		id := fmt.Sprintf("same%02d", i)
		e.createAt(id, same, "p1", store.Queued)
		want[id] = true
	}
	for i := range 12 {
		id := fmt.Sprintf("around%02d", i)
		e.createAt(id, same.Add(time.Duration(i-6)*time.Millisecond), "p1", store.Queued)
		want[id] = true
	}
	e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant, Limit: 7}, 100), want)
	e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant, Limit: 1}, 200), want)
}

func testListFilters(e *stateEnv) {
	base := e.clock.Now().Add(-time.Hour)
	type spec struct {
		id       string
		off      time.Duration
		pipeline string
		status   store.Status
	}
	specs := []spec{
		{"a", 1 * time.Second, "p1", store.Queued},
		{"b", 2 * time.Second, "p2", store.DLQ},
		{"c", 3 * time.Second, "p1", store.DLQ},
		{"d", 4 * time.Second, "p1", store.Succeeded},
		{"e", 5 * time.Second, "p2", store.Cancelled},
		{"f", 6 * time.Second, "p1", store.Failed},
	}
	for _, s := range specs {
		e.createAt(s.id, base.Add(s.off), s.pipeline, s.status)
	}
	ids := func(keep func(spec) bool) map[string]bool {
		m := map[string]bool{}
		for _, s := range specs {
			if keep(s) {
				m[s.id] = true
			}
		}
		return m
	}
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	for _, tc := range []struct {
		name string
		q    store.ListQuery
		want map[string]bool
	}{
		{"pipeline", store.ListQuery{PipelineID: "p1"}, ids(func(s spec) bool { return s.pipeline == "p1" })},
		{"status", store.ListQuery{Statuses: []store.Status{store.DLQ}}, ids(func(s spec) bool { return s.status == store.DLQ })},
		{"statuses", store.ListQuery{Statuses: []store.Status{store.Cancelled, store.Failed}},
			ids(func(s spec) bool { return s.status == store.Cancelled || s.status == store.Failed })},
		{"pipeline and status", store.ListQuery{PipelineID: "p1", Statuses: []store.Status{store.DLQ, store.Succeeded}},
			ids(func(s spec) bool { return s.id == "c" || s.id == "d" })},
		{"created after (exclusive)", store.ListQuery{CreatedAfter: at(3)}, ids(func(s spec) bool { return s.off > 3*time.Second })},
		{"created before (exclusive)", store.ListQuery{CreatedBefore: at(3)}, ids(func(s spec) bool { return s.off < 3*time.Second })},
		{"created between", store.ListQuery{CreatedAfter: at(1), CreatedBefore: at(5)},
			ids(func(s spec) bool { return s.off > time.Second && s.off < 5*time.Second })},
		{"empty range", store.ListQuery{CreatedAfter: at(4), CreatedBefore: at(4)}, map[string]bool{}},
		{"no match", store.ListQuery{PipelineID: "p3"}, map[string]bool{}},
	} {
		tc.q.TenantID = e.tenant
		got := e.listAll(tc.q, 20)
		before := e.t.Failed()
		e.checkListed(got, tc.want)
		if !before && e.t.Failed() {
			e.t.Logf("filter %s: listed %d rows", tc.name, len(got))
		}
	}
}

// testListFilteredPages: a status and a pipeline that few rows have,
// paged 1 and 2 at a time: pages may come back short (a list call reads
// a bounded number of rows), but paging ends and lists each matching row
// exactly once, newest first.
func testListFilteredPages(e *stateEnv) {
	base := e.clock.Now().Add(-time.Minute)
	want := map[string]bool{}
	for i := range 60 {
		id := fmt.Sprintf("r%02d", i)
		pipeline, status := "p2", store.Succeeded
		if i%3 == 0 {
			pipeline, status = "p1", store.DLQ
			want[id] = true
		}
		at := base.Add(time.Duration(i) * time.Millisecond)
		if i%5 == 1 {
			at = base // some in one millisecond
		}
		e.createAt(id, at, pipeline, status)
	}
	e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant, Statuses: []store.Status{store.DLQ}, Limit: 2}, 100), want)
	for _, limit := range []int{1, 2, 3} {
		e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant, PipelineID: "p1", Limit: limit}, 200), want)
	}
	e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant, PipelineID: "p1", Statuses: []store.Status{store.DLQ}, Limit: 1}, 200), want)
}

func testListLimitBounds(e *stateEnv) {
	at := e.clock.Now().Add(-time.Minute)
	for i := range store.DefaultListLimit + 3 {
		e.createAt(fmt.Sprintf("l%02d", i), at.Add(time.Duration(i)*time.Millisecond), "p1", store.Queued)
	}
	page, err := e.s.List(e.ctx, store.ListQuery{TenantID: e.tenant})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(page.Executions) != store.DefaultListLimit || page.Cursor == "" {
		e.t.Fatalf("limit 0 listed %d rows (cursor %q), want the default %d and a cursor", len(page.Executions), page.Cursor, store.DefaultListLimit)
	}
	page, err = e.s.List(e.ctx, store.ListQuery{TenantID: e.tenant, Limit: 1})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].ExecutionID != fmt.Sprintf("l%02d", store.DefaultListLimit+2) {
		e.t.Fatalf("limit 1 = %d rows, %v; want the newest row", len(page.Executions), err)
	}
	for _, q := range []store.ListQuery{
		{TenantID: e.tenant, Limit: store.MaxListLimit + 1},
		{TenantID: e.tenant, Limit: -1},
		{Limit: 10},
		{TenantID: e.tenant, Statuses: []store.Status{"NOT_A_STATUS"}},
	} {
		if _, err := e.s.List(e.ctx, q); !errors.Is(err, store.ErrInvalidListQuery) {
			e.t.Errorf("List(%+v) err = %v, want ErrInvalidListQuery", q, err)
		}
	}
}

func testListForeignCursor(e *stateEnv) {
	at := e.clock.Now().Add(-time.Minute)
	for i := range 4 {
		e.createAt(fmt.Sprintf("c%d", i), at.Add(time.Duration(i)*time.Millisecond), "p1", store.Queued)
	}
	q := store.ListQuery{TenantID: e.tenant, PipelineID: "p1", Limit: 1}
	page, err := e.s.List(e.ctx, q)
	if err != nil || page.Cursor == "" {
		e.t.Fatalf("first page: %v, cursor %q", err, page.Cursor)
	}
	// The same query with another page size continues.
	more := q
	more.Limit, more.Cursor = 10, page.Cursor
	if rest, err := e.s.List(e.ctx, more); err != nil || len(rest.Executions) != 3 {
		t := len(rest.Executions)
		e.t.Fatalf("the cursor with another limit: %d rows, %v; want the 3 others", t, err)
	}
	for name, other := range map[string]store.ListQuery{
		"another tenant":   {TenantID: e.tenant + "-other", PipelineID: "p1"},
		"another pipeline": {TenantID: e.tenant, PipelineID: "p2"},
		"a status filter":  {TenantID: e.tenant, PipelineID: "p1", Statuses: []store.Status{store.Queued}},
		"a created bound":  {TenantID: e.tenant, PipelineID: "p1", CreatedAfter: at.Add(-time.Hour)},
	} {
		other.Cursor = page.Cursor
		if _, err := e.s.List(e.ctx, other); !errors.Is(err, store.ErrInvalidCursor) {
			e.t.Errorf("the cursor with %s: err = %v, want ErrInvalidCursor", name, err)
		}
	}
	for _, c := range []string{"not-a-cursor", "e30", "%%%"} {
		bad := q
		bad.Cursor = c
		if _, err := e.s.List(e.ctx, bad); !errors.Is(err, store.ErrInvalidCursor) {
			e.t.Errorf("cursor %q: err = %v, want ErrInvalidCursor", c, err)
		}
	}
}

func testListExpired(e *stateEnv) {
	at := e.clock.Now().Add(-time.Minute)
	short := e.row("short")
	short.CreatedAt, short.ExpiresAt = at, e.clock.Now().Add(time.Hour)
	if _, _, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: short}); err != nil {
		e.t.Fatal(err)
	}
	long := e.row("long")
	long.CreatedAt, long.ExpiresAt = at, e.clock.Now().Add(48*time.Hour)
	if _, _, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: long}); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	e.checkListed(e.listAll(store.ListQuery{TenantID: e.tenant}, 10), map[string]bool{"long": true})
}
