package backendtest

// The state store suite (Provider.State): idempotent creation, claims and
// leases, guarded commits, the sweep index and TTL expiry, through
// store.Store only. Each case gets a fresh store from the factory and its
// own tenant, so a factory may share one backend (one table) across cases.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// stateEpoch is the state suite's fake "now": milliseconds matter, so it has some.
// It is near the real time so that a backend that deletes expired items
// on its own (DynamoDB's TTL) does not remove the suite's rows.
var stateEpoch = time.Now().UTC().Truncate(time.Hour).Add(123 * time.Millisecond)

type stateEnv struct {
	t      *testing.T
	s      store.Store
	clock  *clock.Fake
	tenant string
	ctx    context.Context
}

var tenantSeq, tokenSeq atomic.Int64

func setupState(t *testing.T, f func(*testing.T, clock.Clock) store.Store) *stateEnv {
	t.Helper()
	c := clock.NewFake(stateEpoch)
	return &stateEnv{t: t, s: f(t, c), clock: c, ctx: context.Background(),
		tenant: fmt.Sprintf("tenant-%d-%d", time.Now().UnixNano(), tenantSeq.Add(1))}
}

// row returns a new QUEUED execution row due now.
func (e *stateEnv) row(id string) store.Execution {
	now := e.clock.Now()
	return store.Execution{
		TenantID: e.tenant, ExecutionID: id, PipelineID: "p1", PipelineVersion: "v1-abc", Status: store.Queued, Version: 1,
		StepName: "s0", Attempt: 1, NextDueAt: now, SweepAt: now.Add(time.Second), IdempotencyKey: "key-" + id,
		Fingerprint: "fp-" + id, CreateToken: fmt.Sprintf("ct-%s-%d", id, tokenSeq.Add(1)),
		Input:     payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 2, SHA256: payload.Digest([]byte("{}")), Inline: []byte("{}")},
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
	}
}

func (e *stateEnv) create(id string) store.Execution {
	e.t.Helper()
	r := e.row(id)
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: r})
	if err != nil || !created {
		e.t.Fatalf("CreateOrGet(%s) = created %v, err %v", id, created, err)
	}
	return got
}

func (e *stateEnv) claim(x store.Execution, owner string) (store.Execution, error) {
	now := e.clock.Now()
	return e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: x.Version, Owner: owner, Now: now,
		DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(10 * time.Second), Attempt: x.Attempt})
}

func (e *stateEnv) mustClaim(x store.Execution, owner string) store.Execution {
	e.t.Helper()
	got, err := e.claim(x, owner)
	if err != nil {
		e.t.Fatalf("Claim: %v", err)
	}
	return got
}

// runState runs the state store suite on stores from f.
func runState(t *testing.T, f func(*testing.T, clock.Clock) store.Store) {
	tests := []struct {
		name string
		fn   func(*stateEnv)
	}{
		{"CreateAndGet", testCreateAndGet},
		{"DuplicateKeyReturnsExisting", testDuplicateKey},
		{"KeyMismatchRefused", testKeyMismatch},
		{"ConcurrentDuplicatesOneExecution", testConcurrentDuplicates},
		{"KeysScopedToTenant", testKeysScopedToTenant},
		{"GetMissing", testGetMissing},
		{"ClaimMovesToRunning", testClaim},
		{"ClaimMovesTheSweepWhenAsked", testClaimSweep},
		{"ClaimRefusals", testClaimRefusals},
		{"ClaimAfterLeaseExpiry", testClaimAfterExpiry},
		{"ClaimClockSkewBounds", testClaimSkew},
		{"ConcurrentClaimOneWinner", testConcurrentClaim},
		{"RenewExtendsLease", testRenew},
		{"RenewRefusedAfterTakeover", testRenewAfterTakeover},
		{"UpdateGuardedByVersionAndOwner", testUpdateGuard},
		{"UpdateKeepsImmutableFields", testUpdateImmutable},
		{"UnleasedUpdate", testUnleasedUpdate},
		{"UpdateKeepSweepLeavesIndex", testKeepSweep},
		{"UpdateExtendsExpiry", testUpdateExpiry},
		{"RescheduleMovesOnlyTheSweep", testReschedule},
		{"GetBatch", testGetBatch},
		{"CreateRetriedAfterItLanded", testCreateRetried},
		{"DueIndexSparseAndOrdered", testDue},
		{"DuePagesEachRowOnce", testDueLimit},
		{"DuePagesRowsWithEqualTimes", testDueTies},
		{"ExpiredRowsAbsent", testExpired},
		{"RoundTripAllFields", testRoundTrip},
		{"IncarnationsOfASlotShareNothing", testIncarnations},
		{"ReadBySlotFindsTheLiveIncarnation", testReadBySlot},
	}
	tests = append(tests, listCases...)
	tests = append(tests, pauseCases...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(setupState(t, f))
		})
	}
	for _, tc := range childCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(setupState(t, f))
		})
	}
	for _, tc := range mapCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupState(t, f)
			ms, ok := e.s.(store.MapStore)
			if !ok {
				t.Skip("the state store keeps no map counts (store.MapStore)")
			}
			tc.fn(e, ms)
		})
	}
	for _, tc := range slotCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupState(t, f)
			ss, ok := e.s.(store.SlotStore)
			if !ok {
				// The engine refuses keyed pipelines on such a store.
				t.Skip("the state store keeps no concurrency keys (store.SlotStore)")
			}
			tc.fn(e, ss)
		})
	}
	for _, tc := range rateCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupState(t, f)
			rs, ok := e.s.(store.RateStore)
			if !ok {
				// The engine refuses rate-limited pipelines on such a store.
				t.Skip("the state store keeps no rate limits (store.RateStore)")
			}
			tc.fn(e, rs)
		})
	}
	for _, tc := range jobCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupState(t, f)
			js, ok := e.s.(store.JobStore)
			if !ok {
				t.Skip("the state store keeps no jobs (store.JobStore)")
			}
			tc.fn(e, js)
		})
	}
}

func testCreateAndGet(e *stateEnv) {
	want := e.create("a")
	got, err := e.s.Get(e.ctx, want.Key())
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	if got.Version != 1 || got.Status != store.Queued || got.PipelineID != "p1" || got.IdempotencyKey != "key-a" {
		e.t.Fatalf("Get = %+v", got)
	}
}

// testDuplicateKey: a second create of the same execution (the same
// idempotency key, hence the same id, and the same request) by another
// submit call returns the first row, unchanged.
func testDuplicateKey(e *stateEnv) {
	first := e.create("a")
	dup := e.row("a")
	dup.StepName = "written-by-the-duplicate"
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: dup})
	if err != nil || created || got.CreateToken != first.CreateToken || got.StepName != first.StepName {
		e.t.Fatalf("duplicate CreateOrGet = %+v created=%v err=%v, want the first row", got, created, err)
	}
	if stored, err := e.s.Get(e.ctx, first.Key()); err != nil || stored.StepName != first.StepName {
		e.t.Fatalf("the duplicate changed the row: %+v, %v", stored, err)
	}
}

// testKeyMismatch: the same key (id) for another request is refused.
func testKeyMismatch(e *stateEnv) {
	first := e.create("a")
	dup := e.row("a")
	dup.Fingerprint = "other"
	dup.StepName = "written-by-the-other-request"
	_, _, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: dup})
	if !errors.Is(err, store.ErrKeyMismatch) {
		e.t.Fatalf("CreateOrGet with other fingerprint err = %v, want ErrKeyMismatch", err)
	}
	if stored, err := e.s.Get(e.ctx, first.Key()); err != nil || stored.StepName != first.StepName || stored.Fingerprint != first.Fingerprint {
		e.t.Fatalf("the refused request changed the row: %+v, %v", stored, err)
	}
}

func testConcurrentDuplicates(e *stateEnv) {
	const n = 12
	tokens := make([]string, n)
	created := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := e.row("dup") // every call its own create token
			got, c, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: r})
			if err != nil {
				e.t.Errorf("CreateOrGet: %v", err)
				return
			}
			tokens[i], created[i] = got.CreateToken, c
		})
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if created[i] {
			winners++
		}
		if tokens[i] != tokens[0] {
			e.t.Fatalf("concurrent duplicates saw two rows: tokens %s and %s", tokens[0], tokens[i])
		}
	}
	if winners != 1 {
		e.t.Fatalf("%d creations for one key, want 1", winners)
	}
}

func testKeysScopedToTenant(e *stateEnv) {
	e.create("a")
	other := e.row("a")
	other.TenantID = e.tenant + "-other"
	other.Fingerprint = "different"
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: other})
	if err != nil || !created || got.TenantID != other.TenantID {
		e.t.Fatalf("same key, other tenant: created=%v err=%v", created, err)
	}
	if _, err := e.s.Get(e.ctx, store.Key{TenantID: e.tenant + "-third", ExecutionID: "a"}); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("execution visible to another tenant: %v", err)
	}
}

func testGetMissing(e *stateEnv) {
	if _, err := e.s.Get(e.ctx, store.Key{TenantID: e.tenant, ExecutionID: "nope"}); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Get missing err = %v", err)
	}
	_, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: store.Key{TenantID: e.tenant, ExecutionID: "nope"}, ExpectVersion: 1, Owner: "w", Now: e.clock.Now(), DueBy: e.clock.Now(), TakeoverBy: e.clock.Now(), LeaseUntil: e.clock.Now().Add(time.Second), Attempt: 1})
	if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("Claim missing err = %v", err)
	}
}

func testClaim(e *stateEnv) {
	x := e.create("a")
	got := e.mustClaim(x, "w1")
	if got.Status != store.Running || got.LeaseOwner != "w1" || got.Version != 2 {
		e.t.Fatalf("claimed row = %+v", got)
	}
	want := e.clock.Now().Add(10 * time.Second)
	if !got.LeaseExpiresAt.Equal(want) {
		e.t.Fatalf("lease %v, want %v", got.LeaseExpiresAt, want)
	}
	// A claim writes no index key: next-due and sweep stay as they were.
	if !got.NextDueAt.Equal(x.NextDueAt) || !got.SweepAt.Equal(x.SweepAt) {
		e.t.Fatalf("claim moved next due %v -> %v or sweep %v -> %v", x.NextDueAt, got.NextDueAt, x.SweepAt, got.SweepAt)
	}
	read, _ := e.s.Get(e.ctx, x.Key())
	if read.Version != 2 || read.LeaseOwner != "w1" {
		e.t.Fatalf("Get after claim = %+v", read)
	}
}

// testClaimSweep: a claim with SweepAt moves the sweep index entry and
// resets the re-dispatch count in the claim's own write.
func testClaimSweep(e *stateEnv) {
	x := e.create("a")
	spaced := x.SweepAt.Add(time.Hour)
	if err := e.s.Reschedule(e.ctx, x.Key(), x.SweepAt, spaced, 5); err != nil {
		e.t.Fatalf("Reschedule: %v", err)
	}
	now := e.clock.Now()
	look := now.Add(15 * time.Second)
	got, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: x.Version, Owner: "w1", Now: now,
		DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(10 * time.Second), Attempt: x.Attempt, SweepAt: look})
	if err != nil {
		e.t.Fatalf("Claim: %v", err)
	}
	if !got.SweepAt.Equal(look) || got.Sweeps != 0 || got.LeaseOwner != "w1" {
		e.t.Fatalf("claimed row: sweep %v with %d sweeps, owner %q; want %v, 0, w1", got.SweepAt, got.Sweeps, got.LeaseOwner, look)
	}
	if read, _ := e.s.Get(e.ctx, x.Key()); !read.SweepAt.Equal(look) || read.Sweeps != 0 {
		e.t.Fatalf("Get after the claim: sweep %v with %d sweeps, want %v, 0", read.SweepAt, read.Sweeps, look)
	}
	found := false
	q := store.DueQuery{By: look, Limit: 1000}
	for range 100 { // pages of the whole (shared) index, bounded
		due, err := e.s.Due(e.ctx, q)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ref := range due.Refs {
			if ref.Key.TenantID == e.tenant && store.Slot(ref.Key.ExecutionID) == store.Slot(x.ExecutionID) {
				found = found || ref.SweepAt.Equal(look)
			}
		}
		if q.Cursor = due.Cursor; found || q.Cursor == "" {
			break
		}
	}
	if !found {
		e.t.Fatalf("the sweep index does not hold the row at the claim's look %v", look)
	}
}

func testClaimRefusals(e *stateEnv) {
	x := e.create("a")
	// Stale version.
	stale := x
	stale.Version = 7
	if _, err := e.claim(stale, "w1"); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("claim with wrong version err = %v", err)
	}
	// Not yet due.
	notDue := x
	if _, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: notDue.Key(), ExpectVersion: 1, Owner: "w1", Now: e.clock.Now(),
		DueBy: e.clock.Now().Add(-time.Millisecond), TakeoverBy: e.clock.Now(), LeaseUntil: e.clock.Now().Add(time.Second), Attempt: 1}); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("claim before due err = %v", err)
	}
	// Leased by someone else.
	held := e.mustClaim(x, "w1")
	if _, err := e.claim(held, "w2"); !errors.Is(err, store.ErrConflict) {
		e.t.Errorf("claim of a live lease err = %v", err)
	}
	// Terminal and parked statuses.
	for _, st := range []store.Status{store.Succeeded, store.DLQ, store.Failed, store.WaitingExternal, store.RemoteOutcomeUnknown} {
		y := e.create("t-" + string(st))
		next := y
		next.Status = st // NextDueAt stays set: the store must refuse on status alone
		u, err := e.s.Update(e.ctx, store.Guard{Key: y.Key(), Version: y.Version}, next)
		if err != nil {
			e.t.Fatalf("Update to %s: %v", st, err)
		}
		if _, err := e.claim(u, "w1"); !errors.Is(err, store.ErrConflict) {
			e.t.Errorf("claim of %s row err = %v", st, err)
		}
	}
}

func testClaimAfterExpiry(e *stateEnv) {
	x := e.create("a")
	held := e.mustClaim(x, "w1")
	e.clock.Advance(10 * time.Second) // lease ends exactly now
	got, err := e.claim(held, "w2")
	if err != nil {
		e.t.Fatalf("takeover after expiry: %v", err)
	}
	if got.LeaseOwner != "w2" || got.Version != held.Version+1 {
		e.t.Fatalf("takeover row = %+v", got)
	}
}

// testClaimSkew: DueBy lets a worker whose clock runs behind claim a
// fresh row; TakeoverBy keeps a worker whose clock runs ahead off a lease
// until it expired by the tolerance.
func testClaimSkew(e *stateEnv) {
	x := e.create("a")
	now := e.clock.Now()
	behind := now.Add(-2 * time.Second) // this worker's clock
	if _, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: 1, Owner: "w1", Now: behind,
		DueBy: behind.Add(2 * time.Second), TakeoverBy: behind.Add(-2 * time.Second), LeaseUntil: now.Add(10 * time.Second), Attempt: 1}); err != nil {
		e.t.Fatalf("claim with DueBy covering the skew: %v", err)
	}
	held, _ := e.s.Get(e.ctx, x.Key())
	ahead := now.Add(11 * time.Second) // the lease expired at now+10s by this clock
	if _, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: held.Version, Owner: "w2", Now: ahead,
		DueBy: ahead.Add(2 * time.Second), TakeoverBy: ahead.Add(-2 * time.Second), LeaseUntil: ahead.Add(10 * time.Second), Attempt: 2}); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("takeover within the tolerance err = %v, want ErrConflict", err)
	}
	later := now.Add(12 * time.Second)
	got, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: held.Version, Owner: "w2", Now: later,
		DueBy: later.Add(2 * time.Second), TakeoverBy: later.Add(-2 * time.Second), LeaseUntil: later.Add(10 * time.Second), Attempt: 2, Releases: 0})
	if err != nil || got.LeaseOwner != "w2" || got.Attempt != 2 {
		e.t.Fatalf("takeover past expiry + tolerance = %+v, %v", got, err)
	}
}

func testConcurrentClaim(e *stateEnv) {
	x := e.create("a")
	const n = 16
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.claim(x, fmt.Sprintf("w%d", i))
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, store.ErrConflict):
				e.t.Errorf("claim err = %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		e.t.Fatalf("%d claims won, want exactly 1", wins.Load())
	}
}

func testRenew(e *stateEnv) {
	held := e.mustClaim(e.create("a"), "w1")
	until := e.clock.Advance(5 * time.Second).Add(10 * time.Second)
	if err := e.s.Renew(e.ctx, held.Key(), "w1", held.Version, until); err != nil {
		e.t.Fatalf("Renew: %v", err)
	}
	got, _ := e.s.Get(e.ctx, held.Key())
	if !got.LeaseExpiresAt.Equal(until) || got.Version != held.Version {
		e.t.Fatalf("after renew: lease %v version %d", got.LeaseExpiresAt, got.Version)
	}
	if !got.NextDueAt.Equal(held.NextDueAt) || !got.SweepAt.Equal(held.SweepAt) {
		e.t.Fatalf("renew moved next due or sweep: %v %v", got.NextDueAt, got.SweepAt)
	}
	// The renewed lease is not claimable at the old expiry.
	e.clock.Advance(6 * time.Second)
	if _, err := e.claim(got, "w2"); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("claim of a renewed lease err = %v", err)
	}
	if err := e.s.Renew(e.ctx, held.Key(), "w2", held.Version, until); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("Renew by non-owner err = %v", err)
	}
}

func testRenewAfterTakeover(e *stateEnv) {
	held := e.mustClaim(e.create("a"), "w1")
	e.clock.Advance(11 * time.Second)
	if _, err := e.claim(held, "w2"); err != nil {
		e.t.Fatalf("takeover: %v", err)
	}
	if err := e.s.Renew(e.ctx, held.Key(), "w1", held.Version, e.clock.Now().Add(time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("Renew after takeover err = %v", err)
	}
}

func testUpdateGuard(e *stateEnv) {
	held := e.mustClaim(e.create("a"), "w1")
	next := held
	next.Status, next.LeaseOwner, next.LeaseExpiresAt = store.Succeeded, "", time.Time{}
	next.NextDueAt, next.LastTransitionKey = time.Time{}, held.TransitionKey()
	if _, err := e.s.Update(e.ctx, store.Guard{Key: held.Key(), Version: held.Version, LeaseOwner: "w2"}, next); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Errorf("Update by non-owner err = %v", err)
	}
	if _, err := e.s.Update(e.ctx, store.Guard{Key: held.Key(), Version: held.Version - 1, LeaseOwner: "w1"}, next); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Errorf("Update with stale version err = %v", err)
	}
	got, err := e.s.Update(e.ctx, store.Guard{Key: held.Key(), Version: held.Version, LeaseOwner: "w1"}, next)
	if err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	if got.Version != held.Version+1 || got.Status != store.Succeeded || got.LeaseOwner != "" {
		e.t.Fatalf("Update = %+v", got)
	}
	// A second commit of the same transition loses.
	if _, err := e.s.Update(e.ctx, store.Guard{Key: held.Key(), Version: held.Version, LeaseOwner: "w1"}, next); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("repeated commit err = %v", err)
	}
}

func testUpdateImmutable(e *stateEnv) {
	x := e.create("a")
	next := x
	next.PipelineID, next.PipelineVersion, next.IdempotencyKey, next.Input = "other", "other", "other", payload.Ref{}
	next.CreatedAt, next.ExpiresAt = stateEpoch.Add(-time.Hour), time.Time{}
	next.Status = store.WaitRetry
	got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: 1}, next)
	if err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	if got.PipelineID != "p1" || got.PipelineVersion != "v1-abc" || got.IdempotencyKey != x.IdempotencyKey || got.Input.SHA256 != x.Input.SHA256 ||
		!got.CreatedAt.Equal(x.CreatedAt) || !got.ExpiresAt.Truncate(time.Second).Equal(x.ExpiresAt.Truncate(time.Second)) || got.Status != store.WaitRetry {
		e.t.Fatalf("immutable fields changed (or a zero expiry was written): %+v", got)
	}
}

// testUpdateExpiry: a commit moves the TTL (retention counts from the
// terminal time, a park extends it).
func testUpdateExpiry(e *stateEnv) {
	x := e.create("a")
	next := x
	next.ExpiresAt = x.ExpiresAt.Add(72 * time.Hour)
	got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: 1}, next)
	if err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	e.clock.Advance(48 * time.Hour) // past the old expiry
	read, err := e.s.Get(e.ctx, x.Key())
	if err != nil || !read.ExpiresAt.Truncate(time.Second).Equal(got.ExpiresAt.Truncate(time.Second)) {
		e.t.Fatalf("row with an extended expiry: %+v, %v", read.ExpiresAt, err)
	}
}

// testKeepSweep: an Update with KeepSweep leaves SweepAt and Sweeps as
// stored (a sweeper may have pushed them); without it they follow next.
func testKeepSweep(e *stateEnv) {
	x := e.create("a")
	pushed := e.clock.Now().Add(time.Minute)
	if err := e.s.Reschedule(e.ctx, x.Key(), x.SweepAt, pushed, 3); err != nil {
		e.t.Fatalf("Reschedule: %v", err)
	}
	held := e.mustClaim(x, "w1") // the worker read x before the push
	next := x
	next.StepIndex, next.Status, next.LeaseOwner, next.LeaseExpiresAt = 1, store.Queued, "", time.Time{}
	got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: held.Version, LeaseOwner: "w1", KeepSweep: true}, next)
	if err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	if !got.SweepAt.Equal(pushed) || got.Sweeps != 3 || got.StepIndex != 1 {
		e.t.Fatalf("KeepSweep update: sweep %v (want %v) sweeps %d step %d", got.SweepAt, pushed, got.Sweeps, got.StepIndex)
	}
	next = got
	next.Status, next.SweepAt, next.Sweeps = store.Succeeded, time.Time{}, 0
	got, err = e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: got.Version}, next)
	if err != nil || !got.SweepAt.IsZero() {
		e.t.Fatalf("Update clearing the sweep: %+v, %v", got.SweepAt, err)
	}
	page, err := e.s.Due(e.ctx, store.DueQuery{By: e.clock.Now().Add(time.Hour), Limit: 100})
	if err != nil {
		e.t.Fatalf("Due: %v", err)
	}
	for _, r := range page.Refs {
		if r.Key == x.Key() {
			e.t.Fatalf("a row without SweepAt is in the sweep index")
		}
	}
}

// testReschedule: Reschedule moves the sweep and nothing else, guarded by
// the SweepAt it expects.
func testReschedule(e *stateEnv) {
	x := e.create("a")
	if err := e.s.Reschedule(e.ctx, x.Key(), x.SweepAt.Add(time.Second), x.SweepAt.Add(time.Hour), 1); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("Reschedule from a stale SweepAt err = %v", err)
	}
	to := x.SweepAt.Add(time.Hour)
	if err := e.s.Reschedule(e.ctx, x.Key(), x.SweepAt, to, 2); err != nil {
		e.t.Fatalf("Reschedule: %v", err)
	}
	got, _ := e.s.Get(e.ctx, x.Key())
	if !got.SweepAt.Equal(to) || got.Sweeps != 2 || got.Version != x.Version || got.Status != x.Status {
		e.t.Fatalf("after Reschedule: %+v", got)
	}
	if err := e.s.Reschedule(e.ctx, x.Key(), to, time.Time{}, 0); err != nil {
		e.t.Fatalf("Reschedule out of the index: %v", err)
	}
	if err := e.s.Reschedule(e.ctx, x.Key(), time.Time{}, to, 0); err != nil {
		e.t.Fatalf("Reschedule back into the index: %v", err)
	}
	if err := e.s.Reschedule(e.ctx, store.Key{TenantID: e.tenant, ExecutionID: "nope"}, time.Time{}, to, 0); !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("Reschedule of a missing row err = %v", err)
	}
}

func testGetBatch(e *stateEnv) {
	a, b := e.create("a"), e.create("b")
	got, err := e.s.GetBatch(e.ctx, []store.Key{a.Key(), {TenantID: e.tenant, ExecutionID: "nope"}, b.Key()})
	if err != nil || len(got) != 2 {
		e.t.Fatalf("GetBatch = %d rows, %v", len(got), err)
	}
	ids := map[string]bool{got[0].ExecutionID: true, got[1].ExecutionID: true}
	if !ids["a"] || !ids["b"] {
		e.t.Fatalf("GetBatch ids = %v", ids)
	}
	if got, err := e.s.GetBatch(e.ctx, nil); err != nil || len(got) != 0 {
		e.t.Fatalf("GetBatch(nil) = %v, %v", got, err)
	}
}

// testCreateRetried: a create repeated after it had landed (its outcome
// was unknown to the caller) reports created, so the caller dispatches.
func testCreateRetried(e *stateEnv) {
	r := e.row("a")
	req := store.CreateRequest{Execution: r}
	if _, created, err := e.s.CreateOrGet(e.ctx, req); err != nil || !created {
		e.t.Fatalf("first create: %v %v", created, err)
	}
	got, created, err := e.s.CreateOrGet(e.ctx, req)
	if err != nil || !created || got.ExecutionID != "a" {
		e.t.Fatalf("repeated create = %v %v %v, want created", got.ExecutionID, created, err)
	}
	other := e.row("a") // the same request from another submit call
	if _, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: other}); err != nil || created {
		e.t.Fatalf("a duplicate submission (another create token) = created %v, %v", created, err)
	}
}

func testUnleasedUpdate(e *stateEnv) {
	x := e.create("a")
	held := e.mustClaim(x, "w1")
	next := held
	next.Status = store.Failed
	if _, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: held.Version}, next); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("unleased update of a leased row err = %v", err)
	}
}

func testDue(e *stateEnv) {
	now := e.clock.Now()
	mk := func(id string, sweep time.Time, st store.Status) {
		x := e.create(id)
		next := x
		next.Status, next.SweepAt = st, sweep
		if _, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: 1}, next); err != nil {
			e.t.Fatalf("Update %s: %v", id, err)
		}
	}
	mk("late", now.Add(-3*time.Second), store.WaitRetry)
	mk("early", now.Add(-5*time.Second), store.Queued)
	mk("dlq", now.Add(-1*time.Second), store.Failed)
	mk("edge", now, store.Running)
	mk("future", now.Add(time.Hour), store.WaitRetry)
	mk("done", time.Time{}, store.Succeeded)
	mk("parked", time.Time{}, store.WaitingExternal)
	page, err := e.s.Due(e.ctx, store.DueQuery{By: now, Limit: 1000})
	if err != nil {
		e.t.Fatalf("Due: %v", err)
	}
	var ids []string
	for _, r := range page.Refs {
		if r.Key.TenantID == e.tenant {
			ids = append(ids, r.Key.ExecutionID)
			if r.PipelineID != "p1" {
				e.t.Errorf("due ref %s lacks its pipeline id: %+v", r.Key.ExecutionID, r)
			}
		}
	}
	if fmt.Sprint(ids) != "[early late dlq edge]" {
		e.t.Fatalf("due ids = %v, want [early late dlq edge] oldest first", ids)
	}
}

// testDueLimit: paging with a small limit returns every due row exactly
// once, oldest first, and ends with an empty cursor.
func testDueLimit(e *stateEnv) {
	now := e.clock.Now()
	for i := range 7 {
		x := e.create(fmt.Sprintf("x%d", i))
		if err := e.s.Reschedule(e.ctx, x.Key(), x.SweepAt, now.Add(time.Duration(i-10)*time.Second), 0); err != nil {
			e.t.Fatalf("Reschedule: %v", err)
		}
	}
	seen := map[string]int{}
	var order []string
	q := store.DueQuery{By: now, Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 20 {
			e.t.Fatalf("paging did not end")
		}
		page, err := e.s.Due(e.ctx, q)
		if err != nil {
			e.t.Fatalf("Due: %v", err)
		}
		if len(page.Refs) > 2 {
			e.t.Fatalf("page of %d refs, limit 2", len(page.Refs))
		}
		for _, r := range page.Refs {
			if r.Key.TenantID == e.tenant {
				seen[r.Key.ExecutionID]++
				order = append(order, r.Key.ExecutionID)
			}
		}
		if page.Cursor == "" {
			break
		}
		q.Cursor = page.Cursor
	}
	if len(seen) != 7 {
		e.t.Fatalf("paging saw %d rows, want 7: %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			e.t.Errorf("row %s returned %d times", id, n)
		}
	}
	if fmt.Sprint(order) != "[x0 x1 x2 x3 x4 x5 x6]" {
		e.t.Errorf("paging order = %v, want oldest first", order)
	}
}

// testDueTies: many rows due at the same instant (a burst submitted in
// one millisecond), read a few per page: each is returned exactly once.
func testDueTies(e *stateEnv) {
	at := e.clock.Now().Add(-time.Minute)
	const rows = 40
	for i := range rows {
		x := e.create(fmt.Sprintf("tie%02d", i))
		if err := e.s.Reschedule(e.ctx, x.Key(), x.SweepAt, at, 0); err != nil {
			e.t.Fatalf("Reschedule: %v", err)
		}
	}
	seen := map[string]int{}
	q := store.DueQuery{By: e.clock.Now(), Limit: 3}
	for pages := 0; ; pages++ {
		if pages > 4*rows {
			e.t.Fatalf("paging did not end")
		}
		page, err := e.s.Due(e.ctx, q)
		if err != nil {
			e.t.Fatalf("Due: %v", err)
		}
		for _, r := range page.Refs {
			if r.Key.TenantID == e.tenant {
				seen[r.Key.ExecutionID]++
			}
		}
		if page.Cursor == "" {
			break
		}
		q.Cursor = page.Cursor
	}
	if len(seen) != rows {
		e.t.Fatalf("paging saw %d of %d rows due at the same time", len(seen), rows)
	}
	for id, n := range seen {
		if n != 1 {
			e.t.Errorf("row %s returned %d times", id, n)
		}
	}
}

func testExpired(e *stateEnv) {
	x := e.create("a")
	e.clock.Advance(25 * time.Hour)
	if _, err := e.s.Get(e.ctx, x.Key()); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Get of expired row err = %v", err)
	}
	rows, err := e.s.GetBatch(e.ctx, []store.Key{x.Key()})
	if err != nil || len(rows) != 0 {
		e.t.Fatalf("GetBatch of an expired row = %d rows, %v", len(rows), err)
	}
	// An expired key no longer binds: the same key creates a new execution.
	y := e.row("a")
	y.Fingerprint = "new"
	y.ExpiresAt = e.clock.Now().Add(time.Hour)
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: y})
	if err != nil || !created || got.Fingerprint != "new" {
		e.t.Fatalf("CreateOrGet after key expiry: created=%v err=%v", created, err)
	}
}

func testRoundTrip(e *stateEnv) {
	x := e.create("a")
	held := e.mustClaim(x, "w1")
	next := held
	next.Status, next.StepIndex, next.StepName, next.Attempt, next.MaxAttempt = store.Failed, 3, "s3", 4, 5
	next.LeaseOwner, next.LeaseExpiresAt = "", time.Time{}
	next.NextDueAt = e.clock.Now().Add(1500 * time.Millisecond)
	next.SweepAt, next.Sweeps, next.Releases = e.clock.Now().Add(2500*time.Millisecond), 4, 2
	next.VersionWaitSince = e.clock.Now().Add(-700 * time.Millisecond)
	next.ExpiresAt = e.clock.Now().Add(48 * time.Hour)
	next.RecordsExpireAt = e.clock.Now().Add(96 * time.Hour)
	next.LastTransitionKey = "a:3:4"
	next.Result = payload.Ref{Encoding: payload.EncodingProtobuf, ContentType: payload.ContentTypeProtobuf, Message: "pkg.Msg", Length: 1 << 20, SHA256: payload.Digest([]byte("x")), ManifestID: "m1"}
	next.Error = &store.Failure{Code: "c", Message: "m", TerminalReason: store.ReasonRetryExhausted}
	next.DLQPending, next.Note, next.RedriveCount = true, "audit", 2
	next.CancelReason, next.CancelRequestedAt = "operator asked", e.clock.Now().Truncate(time.Millisecond)
	next.UpdatedAt = e.clock.Now().Add(time.Second)
	next.Await = &store.Await{ID: "aw-1", Status: store.AwaitTimedOut, StepIndex: 3,
		TimeoutAt: e.clock.Now().Add(2 * time.Second), CompletedAt: e.clock.Now().Add(3 * time.Second),
		Digest: payload.Digest([]byte("done")), Late: true,
		LatePayload: payload.Ref{Encoding: payload.EncodingJSON, ContentType: "application/json", Length: 4, SHA256: payload.Digest([]byte("done")), Inline: []byte("done")}}
	next.Children = &store.Children{StepIndex: 3, Total: 250, MaxInFlight: 7, Done: true}
	if _, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: held.Version, LeaseOwner: "w1"}, next); err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	got, err := e.s.Get(e.ctx, x.Key())
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	next.Version = held.Version + 1
	if got.Error == nil || *got.Error != *next.Error {
		e.t.Fatalf("error round trip: got %+v, want %+v", got.Error, next.Error)
	}
	if g, w := normalizeExecution(got), normalizeExecution(next); !reflect.DeepEqual(g, w) {
		e.t.Fatalf("round trip:\n got  %+v\n want %+v", g, w)
	}
	// The store hands out copies: changing what Get returned changes nothing.
	got.Error.Message = "mutated"
	again, _ := e.s.Get(e.ctx, x.Key())
	if again.Error.Message != "m" {
		e.t.Fatalf("store shares memory with callers")
	}
	got.Await.ID = "mutated"
	if again, _ := e.s.Get(e.ctx, x.Key()); again.Await == nil || again.Await.ID != "aw-1" {
		e.t.Fatalf("store shares await memory with callers")
	}
	// Clearing the await removes it.
	cur, _ := e.s.Get(e.ctx, x.Key())
	cleared := cur
	cleared.Await = nil
	if _, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: cur.Version}, cleared); err != nil {
		e.t.Fatalf("Update clearing await: %v", err)
	}
	if got, _ := e.s.Get(e.ctx, x.Key()); got.Await != nil {
		e.t.Fatalf("await not cleared: %+v", got.Await)
	}
}

// normalizeExecution drops what a backend may legitimately represent differently:
// the Error pointer (compared separately), time zones, monotonic readings,
// precision below the store's (milliseconds; seconds for ExpiresAt), and
// nil versus empty inline bytes.
func normalizeExecution(x store.Execution) store.Execution {
	x.Error = nil
	if x.Await != nil {
		a := *x.Await
		for _, t := range []*time.Time{&a.TimeoutAt, &a.CompletedAt} {
			if !t.IsZero() {
				*t = t.UTC().Round(0).Truncate(time.Millisecond)
			}
		}
		if len(a.LatePayload.Inline) == 0 && a.LatePayload.Inline != nil {
			a.LatePayload.Inline = []byte{}
		}
		x.Await = &a
	}
	for _, t := range []*time.Time{&x.LeaseExpiresAt, &x.NextDueAt, &x.SweepAt, &x.VersionWaitSince, &x.CreatedAt, &x.UpdatedAt, &x.ExpiresAt} {
		if !t.IsZero() {
			*t = t.UTC().Round(0).Truncate(time.Millisecond)
		}
	}
	x.ExpiresAt = x.ExpiresAt.Truncate(time.Second)
	x.RecordsExpireAt = x.RecordsExpireAt.UTC().Round(0).Truncate(time.Second)
	for _, r := range []*payload.Ref{&x.Input, &x.Result} {
		if len(r.Inline) == 0 && r.Inline != nil {
			r.Inline = []byte{}
		}
	}
	return x
}

// testIncarnations: one slot, two incarnations (store.IncarnationSep).
// While the first lives, a create of the second resolves to it (a
// duplicate) and no call with the second's id reads or changes anything;
// once the first expired, the second is created in the slot, and from
// then on no call with the first's id reads or changes the second, even
// where a version would match (a stale writer), and the sweep index and
// the list name the second.
func testIncarnations(e *stateEnv) {
	first := e.row("s1" + store.IncarnationSep + "aaaa")
	first.Fingerprint = "fp-s1"
	if _, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: first}); err != nil || !created {
		e.t.Fatalf("create the first incarnation: created %v, %v", created, err)
	}
	second := e.row("s1" + store.IncarnationSep + "bbbb")
	second.Fingerprint = "fp-s1"
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: second})
	if err != nil || created || got.ExecutionID != first.ExecutionID {
		e.t.Fatalf("create of a second incarnation while the first lives = %s created %v, %v; want the first (a duplicate)", got.ExecutionID, created, err)
	}
	e.refusedAs(second.Key(), "while the first incarnation lives")

	// The first expires; the key creates the second incarnation.
	e.clock.Advance(25 * time.Hour)
	second.ExpiresAt = e.clock.Now().Add(24 * time.Hour)
	second.NextDueAt, second.SweepAt = e.clock.Now(), e.clock.Now().Add(time.Second)
	second.CreatedAt, second.UpdatedAt = e.clock.Now(), e.clock.Now()
	got, created, err = e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: second})
	if err != nil || !created || got.ExecutionID != second.ExecutionID {
		e.t.Fatalf("create of the second incarnation after the first expired = %s created %v, %v", got.ExecutionID, created, err)
	}
	// Both start at version 1: only the id tells them apart.
	e.refusedAs(first.Key(), "after the second incarnation replaced it")
	if read, err := e.s.Get(e.ctx, second.Key()); err != nil || read.ExecutionID != second.ExecutionID || read.Version != 1 {
		e.t.Fatalf("Get of the second incarnation = %+v, %v", read, err)
	}
	page, err := e.s.Due(e.ctx, store.DueQuery{By: e.clock.Now().Add(time.Hour), Limit: 10})
	// An index entry may name the bare slot (the DynamoDB index does not
	// project the incarnation): it must then read as the second.
	if err != nil || len(page.Refs) != 1 || page.Refs[0].Key.TenantID != second.TenantID || !store.Answers(page.Refs[0].Key.ExecutionID, second.ExecutionID) {
		e.t.Fatalf("the sweep index = %+v, %v; want the second incarnation only", page.Refs, err)
	}
	if rows, err := e.s.GetBatch(e.ctx, []store.Key{page.Refs[0].Key}); err != nil || len(rows) != 1 || rows[0].ExecutionID != second.ExecutionID {
		e.t.Fatalf("GetBatch of the sweep index's entry = %+v, %v; want the second incarnation", rows, err)
	}
	list, err := e.s.List(e.ctx, store.ListQuery{TenantID: e.tenant})
	if err != nil || len(list.Executions) != 1 || list.Executions[0].ExecutionID != second.ExecutionID {
		e.t.Fatalf("the list = %d rows, %v; want the second incarnation only", len(list.Executions), err)
	}
}

// refusedAs checks that no call with key's id, an incarnation the slot
// does not hold, reads or changes the slot's row.
func (e *stateEnv) refusedAs(key store.Key, when string) {
	e.t.Helper()
	now := e.clock.Now()
	if _, err := e.s.Get(e.ctx, key); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Get of an incarnation the slot does not hold (%s) err = %v, want ErrNotFound", when, err)
	}
	if rows, err := e.s.GetBatch(e.ctx, []store.Key{key}); err != nil || len(rows) != 0 {
		e.t.Fatalf("GetBatch of an incarnation the slot does not hold (%s) = %d rows, %v", when, len(rows), err)
	}
	_, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: key, ExpectVersion: 1, Owner: "stale", Now: now, DueBy: now.Add(time.Hour), TakeoverBy: now,
		LeaseUntil: now.Add(time.Second), Attempt: 1})
	if !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Claim of an incarnation the slot does not hold (%s) err = %v, want ErrNotFound", when, err)
	}
	if err := e.s.Renew(e.ctx, key, "stale", 1, now.Add(time.Hour)); !errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Renew of an incarnation the slot does not hold (%s) err = %v", when, err)
	}
	next := e.row(key.ExecutionID)
	next.StepName = "written-by-a-stale-writer"
	if _, err := e.s.Update(e.ctx, store.Guard{Key: key, Version: 1}, next); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Update of an incarnation the slot does not hold (%s) err = %v, want ErrNotFound", when, err)
	}
	if err := e.s.Reschedule(e.ctx, key, next.SweepAt, time.Time{}, 0); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Reschedule of an incarnation the slot does not hold (%s) err = %v, want ErrNotFound", when, err)
	}
	live, err := e.s.Get(e.ctx, store.Key{TenantID: key.TenantID, ExecutionID: store.Slot(key.ExecutionID)})
	if err != nil || live.StepName == "written-by-a-stale-writer" || live.Status != store.Queued || live.Version != 1 {
		e.t.Fatalf("the slot's row after the refused calls (%s) = %+v, %v", when, live, err)
	}
}

// testReadBySlot: a read with a bare slot (an id without an incarnation)
// finds whichever incarnation lives in it; writes need the very id.
func testReadBySlot(e *stateEnv) {
	x := e.create("s2" + store.IncarnationSep + "cccc")
	got, err := e.s.Get(e.ctx, store.Key{TenantID: e.tenant, ExecutionID: "s2"})
	if err != nil || got.ExecutionID != x.ExecutionID {
		e.t.Fatalf("Get by slot = %q, %v; want %q", got.ExecutionID, err, x.ExecutionID)
	}
	_, err = e.claim(store.Execution{TenantID: e.tenant, ExecutionID: "s2", Version: 1, Attempt: 1}, "w")
	if !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Claim by slot err = %v, want ErrNotFound (a write names the incarnation)", err)
	}
}
