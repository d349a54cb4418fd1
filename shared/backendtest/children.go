package backendtest

// The map cases of the state store suite: a map's child rows (their
// parent reference, the PENDING status outside the sweep index, their
// release, create-or-get of a derived id), a parent's map attribute, and,
// on stores that keep them (store.MapStore), a map's counts: sets, so that
// a count repeated counts once, and exactly one write completes a group.

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// childCases are the child-row cases, run by runState on every store.
var childCases = []struct {
	name string
	fn   func(*stateEnv)
}{
	{"ChildRowPendingOutsideTheSweep", testChildPending},
	{"ChildCreateOrGet", testChildCreateOrGet},
	{"ParentChildrenAttribute", testParentChildren},
	{"ChildOfALaterRound", testChildOfALaterRound},
}

// mapCases are the count cases, run by runState on stores that keep them.
var mapCases = []struct {
	name string
	fn   func(*stateEnv, store.MapStore)
}{
	{"MapCountsAreSets", testMapCountsSets},
	{"MapOneWriteCompletesAGroup", testMapGroupCompletedOnce},
	{"MapCountsScoped", testMapCountsScoped},
	{"MapCountsExpire", testMapCountsExpire},
}

// child returns a PENDING child row of parent "p.1", element index i.
func (e *stateEnv) child(i int) store.Execution {
	r := e.row(fmt.Sprintf("p-1-%d.c%d", i, i))
	r.Status, r.NextDueAt, r.SweepAt = store.Pending, time.Time{}, time.Time{}
	r.Parent = &store.ParentRef{ExecutionID: "p.1", CreateToken: "1", StepIndex: 2, Index: i, Element: i, Total: 250, MaxInFlight: 3}
	return r
}

func testChildPending(e *stateEnv) {
	c := e.child(7)
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: c})
	if err != nil || !created {
		e.t.Fatalf("CreateOrGet(child) = created %v, err %v", created, err)
	}
	if got.Status != store.Pending || got.Parent == nil || *got.Parent != *c.Parent {
		e.t.Fatalf("child created as %s with parent %+v, want PENDING with %+v", got.Status, got.Parent, c.Parent)
	}
	read, err := e.s.Get(e.ctx, c.Key())
	if err != nil || read.Parent == nil || *read.Parent != *c.Parent {
		e.t.Fatalf("Get(child) = parent %+v, %v; want %+v", read.Parent, err, c.Parent)
	}
	// PENDING: not claimable, not in the sweep index, in the list.
	if _, err := e.claim(read, "w1"); err == nil {
		e.t.Fatalf("a PENDING child was claimed")
	}
	if e.inSweep(c.ExecutionID) {
		e.t.Fatalf("a PENDING child is in the sweep index")
	}
	page, err := e.s.List(e.ctx, store.ListQuery{TenantID: e.tenant, Statuses: []store.Status{store.Pending}})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].ExecutionID != c.ExecutionID {
		e.t.Fatalf("List(PENDING) = %d rows, %v; want the child", len(page.Executions), err)
	}
	// The release: an unleased update to QUEUED, guarded by the version;
	// the parent reference stays whatever the update carries.
	next := read
	next.Status, next.NextDueAt, next.SweepAt, next.Parent = store.Queued, e.clock.Now(), e.clock.Now().Add(time.Second), nil
	rel, err := e.s.Update(e.ctx, store.Guard{Key: c.Key(), Version: read.Version}, next)
	if err != nil {
		e.t.Fatalf("release: %v", err)
	}
	if _, err := e.s.Update(e.ctx, store.Guard{Key: c.Key(), Version: read.Version}, next); err != store.ErrConflict {
		e.t.Fatalf("second release = %v, want ErrConflict", err)
	}
	if rel.Parent == nil || *rel.Parent != *c.Parent {
		e.t.Fatalf("the release dropped the parent reference: %+v", rel.Parent)
	}
	if !e.inSweep(c.ExecutionID) {
		e.t.Fatalf("a released child is not in the sweep index")
	}
	if _, err := e.claim(rel, "w1"); err != nil {
		e.t.Fatalf("claim of the released child: %v", err)
	}
}

// inSweep reports whether the sweep index holds the row of id (its ref
// may name the bare slot: store.Answers).
func (e *stateEnv) inSweep(id string) bool {
	e.t.Helper()
	q := store.DueQuery{By: e.clock.Now().Add(time.Hour), Limit: 100}
	for {
		page, err := e.s.Due(e.ctx, q)
		if err != nil {
			e.t.Fatalf("Due: %v", err)
		}
		for _, r := range page.Refs {
			if r.Key.TenantID == e.tenant && store.Answers(r.Key.ExecutionID, id) {
				return true
			}
		}
		if page.Cursor == "" {
			return false
		}
		q.Cursor = page.Cursor
	}
}

func testChildCreateOrGet(e *stateEnv) {
	c := e.child(3)
	first, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: c})
	if err != nil || !created {
		e.t.Fatalf("first create = %v, %v", created, err)
	}
	// The same create again (a re-run of the fan-out with the same derived
	// token) is this very create; another token finds the row.
	again, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: c})
	if err != nil || !created || again.Version != first.Version {
		e.t.Fatalf("the same create again = created %v, version %d, %v", created, again.Version, err)
	}
	other := c
	other.CreateToken = "another"
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: other})
	if err != nil || created || got.Parent == nil || got.Parent.Index != 3 {
		e.t.Fatalf("create with another token = created %v, parent %+v, %v", created, got.Parent, err)
	}
}

func testParentChildren(e *stateEnv) {
	x := e.create("par")
	held := e.mustClaim(x, "w1")
	next := held
	next.Status, next.LeaseOwner, next.LeaseExpiresAt = store.WaitingChildren, "", time.Time{}
	next.Children = &store.Children{StepIndex: 1, Total: 10000, MaxInFlight: 1000}
	parked, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: held.Version, LeaseOwner: "w1"}, next)
	if err != nil || parked.Children == nil || *parked.Children != *next.Children || parked.Status != store.WaitingChildren {
		e.t.Fatalf("park = %s %+v, %v", parked.Status, parked.Children, err)
	}
	if _, err := e.claim(parked, "w2"); err == nil {
		e.t.Fatalf("a WAITING_CHILDREN row was claimed")
	}
	woken := parked
	woken.Status, woken.NextDueAt = store.Queued, e.clock.Now()
	woken.Children = &store.Children{StepIndex: 1, Total: 10000, MaxInFlight: 1000, Done: true}
	if got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: parked.Version}, woken); err != nil || !got.Children.Done {
		e.t.Fatalf("wake = %+v, %v", got.Children, err)
	}
	got, _ := e.s.Get(e.ctx, x.Key())
	cleared := got
	cleared.Children = nil
	if got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: got.Version}, cleared); err != nil || got.Children != nil {
		e.t.Fatalf("an update without children kept %+v, %v", got.Children, err)
	}
}

// A child of a later round (a re-drive of a map's failed children) keeps
// its round and its element beside its index in the round; a parent's map
// keeps its round, its retry mark, the earlier outcomes' reference and
// the kept counts.
func testChildOfALaterRound(e *stateEnv) {
	c := e.child(1)
	c.Parent.Round, c.Parent.Element, c.Parent.Total = 2, 40, 7
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: c})
	if err != nil || !created || got.Parent == nil || *got.Parent != *c.Parent {
		e.t.Fatalf("create = %+v, %v, %v; want %+v", got.Parent, created, err, c.Parent)
	}
	if read, err := e.s.Get(e.ctx, c.Key()); err != nil || read.Parent == nil || *read.Parent != *c.Parent {
		e.t.Fatalf("Get = %+v, %v; want %+v", read.Parent, err, c.Parent)
	}
	x := e.create("par-round")
	held := e.mustClaim(x, "w1")
	next := held
	next.Status, next.LeaseOwner, next.LeaseExpiresAt = store.WaitingChildren, "", time.Time{}
	prior := payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 1 << 20,
		SHA256: payload.Digest([]byte("x")), ManifestID: "m-prior"}
	next.Children = &store.Children{StepIndex: 1, Total: 12, MaxInFlight: 5, Round: 3, Retry: true, Prior: &prior,
		KeptSucceeded: 80, KeptOther: 8}
	parked, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: held.Version, LeaseOwner: "w1"}, next)
	if err != nil || !reflect.DeepEqual(parked.Children, next.Children) {
		e.t.Fatalf("park = %+v, %v; want %+v", parked.Children, err, next.Children)
	}
	if read, err := e.s.Get(e.ctx, x.Key()); err != nil || !reflect.DeepEqual(read.Children, next.Children) {
		e.t.Fatalf("Get = %+v, %v; want %+v", read.Children, err, next.Children)
	}
}

func (e *stateEnv) mapKey(step int) store.MapKey {
	return store.MapKey{TenantID: e.tenant, ParentID: "par.1", StepIndex: step}
}

func testMapCountsSets(e *stateEnv, ms store.MapStore) {
	m, exp := e.mapKey(1), e.clock.Now().Add(24*time.Hour)
	if c, err := ms.MapCounts(e.ctx, m, 250); err != nil || len(c.Ended)+len(c.Failed)+len(c.Finished) != 0 {
		e.e(err, "MapCounts of an empty map = %+v", c)
	}
	for _, step := range []struct {
		index  int
		failed bool
		want   int
	}{{5, false, 1}, {5, false, 1}, {7, true, 2}, {7, true, 2}, {99, false, 3}, {100, true, 1}, {249, false, 1}, {0, false, 4}} {
		n, err := ms.CountChild(e.ctx, m, step.index, step.failed, exp)
		if err != nil || n != step.want {
			e.t.Fatalf("CountChild(%d) = %d, %v; want %d", step.index, n, err, step.want)
		}
	}
	for _, g := range []struct{ group, want int }{{1, 1}, {1, 1}, {0, 2}} {
		n, err := ms.FinishGroup(e.ctx, m, g.group, exp)
		if err != nil || n != g.want {
			e.t.Fatalf("FinishGroup(%d) = %d, %v; want %d", g.group, n, err, g.want)
		}
	}
	c, err := ms.MapCounts(e.ctx, m, 250)
	want := store.MapCounts{Ended: []int{0, 5, 7, 99, 100, 249}, Failed: []int{7, 100}, Finished: []int{0, 1}}
	if err != nil || !reflect.DeepEqual(c, want) {
		e.t.Fatalf("MapCounts = %+v, %v; want %+v", c, err, want)
	}
}

// e fails the case on a non-nil err or a false check (err nil).
func (e *stateEnv) e(err error, format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf(format+" (err %v)", append(args, err)...)
}

func testMapGroupCompletedOnce(e *stateEnv, ms store.MapStore) {
	m, exp := e.mapKey(0), e.clock.Now().Add(24*time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	full, errs := 0, 0
	for i := range store.GroupSize {
		for range 2 { // every count sent twice, as a retried count would be
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := ms.CountChild(e.ctx, m, 100+i, i%10 == 0, exp)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs++
				}
				if n == store.GroupSize {
					full++
				}
			}()
		}
	}
	wg.Wait()
	c, err := ms.MapCounts(e.ctx, m, 200)
	if errs > 0 || err != nil || len(c.Ended) != store.GroupSize || len(c.Failed) != 10 {
		e.t.Fatalf("%d errors; MapCounts = %d ended, %d failed, %v", errs, len(c.Ended), len(c.Failed), err)
	}
	// Each index was counted twice: the writes answering GroupSize are the
	// one that completed the group and the repeats that came after it.
	if full < 1 || full > store.GroupSize+1 {
		e.t.Fatalf("%d writes saw the group full", full)
	}
	// A repeat after the group is full answers full again: a repair that
	// counts a lost count sees the group complete and finishes it.
	if n, err := ms.CountChild(e.ctx, m, 150, false, exp); err != nil || n != store.GroupSize {
		e.t.Fatalf("repeat count = %d, %v", n, err)
	}
}

func testMapCountsScoped(e *stateEnv, ms store.MapStore) {
	exp := e.clock.Now().Add(24 * time.Hour)
	a, b := e.mapKey(1), e.mapKey(2)
	other, later := a, a
	other.TenantID = e.tenant + "-other"
	later.Round = 1
	if _, err := ms.CountChild(e.ctx, a, 1, false, exp); err != nil {
		e.t.Fatal(err)
	}
	if _, err := ms.FinishGroup(e.ctx, a, 0, exp); err != nil {
		e.t.Fatal(err)
	}
	for _, k := range []store.MapKey{b, other, later} {
		if c, err := ms.MapCounts(e.ctx, k, 100); err != nil || len(c.Ended)+len(c.Finished) != 0 {
			e.t.Fatalf("map %+v sees another map's counts: %+v, %v", k, c, err)
		}
	}
}

func testMapCountsExpire(e *stateEnv, ms store.MapStore) {
	m := e.mapKey(3)
	exp := e.clock.Now().Add(time.Hour)
	if _, err := ms.CountChild(e.ctx, m, 1, true, exp); err != nil {
		e.t.Fatal(err)
	}
	if _, err := ms.FinishGroup(e.ctx, m, 0, exp); err != nil {
		e.t.Fatal(err)
	}
	// A later count with a later expiry keeps the set alive with it.
	if n, err := ms.CountChild(e.ctx, m, 2, false, exp.Add(2*time.Hour)); err != nil || n != 2 {
		e.t.Fatalf("count = %d, %v", n, err)
	}
	e.clock.Advance(90 * time.Minute)
	if c, err := ms.MapCounts(e.ctx, m, 100); err != nil || len(c.Ended) != 2 || len(c.Finished) != 0 {
		e.t.Fatalf("after the first expiry: %+v, %v; want the group alive, the finished set gone", c, err)
	}
	e.clock.Advance(2 * time.Hour)
	if c, err := ms.MapCounts(e.ctx, m, 100); err != nil || len(c.Ended)+len(c.Failed)+len(c.Finished) != 0 {
		e.t.Fatalf("expired counts read %+v, %v", c, err)
	}
	if n, err := ms.CountChild(e.ctx, m, 9, false, e.clock.Now().Add(time.Hour)); err != nil || n != 1 {
		e.t.Fatalf("count after expiry = %d, %v; want a fresh set", n, err)
	}
}
