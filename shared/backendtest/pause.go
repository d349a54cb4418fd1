package backendtest

// The state store's part of an operator pause (engine.Runtime.Pause): a
// PAUSED row keeps its pause fields and its due time, is neither due nor
// claimable, and a resume's write clears what the pause set.

import (
	"errors"
	"time"

	"github.com/qasync/qasync/shared/store"
)

var pauseCases = []struct {
	name string
	fn   func(*stateEnv)
}{
	{"PausedRowKeepsItsFieldsAndIsNotClaimable", testPausedRow},
	{"PauseRequestOnARunningRowKeepsTheLease", testPauseRequested},
}

// testPausedRow pauses a WAIT_RETRY row in one unleased, version-guarded
// write that also takes it out of the sweep index (as the engine does),
// then checks every store's view of it, and resumes it.
func testPausedRow(e *stateEnv) {
	x := e.create("a")
	now := e.clock.Now()
	waiting := x
	waiting.Status, waiting.Attempt, waiting.NextDueAt = store.WaitRetry, 2, now.Add(time.Minute)
	waiting.SweepAt = now.Add(time.Minute + 10*time.Second)
	w, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: x.Version}, waiting)
	if err != nil {
		e.t.Fatalf("Update to WAIT_RETRY: %v", err)
	}
	paused := w
	paused.Status, paused.PausedFrom = store.Paused, store.WaitRetry
	paused.PauseReason, paused.PauseRequestedAt = "hold for the migration", now.Add(1500*time.Millisecond)
	paused.SweepAt, paused.Sweeps, paused.UpdatedAt = time.Time{}, 0, now
	p, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: w.Version}, paused)
	if err != nil {
		e.t.Fatalf("Update to PAUSED: %v", err)
	}
	got, err := e.s.Get(e.ctx, x.Key())
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	if got.Status != store.Paused || got.PausedFrom != store.WaitRetry || got.PauseReason != "hold for the migration" ||
		got.PauseRequestedAt.UnixMilli() != paused.PauseRequestedAt.UnixMilli() || got.NextDueAt.UnixMilli() != waiting.NextDueAt.UnixMilli() ||
		!got.SweepAt.IsZero() || got.Version != p.Version {
		e.t.Fatalf("paused row read back as %+v", got)
	}
	// Not in the sweep index, however late.
	page, err := e.s.Due(e.ctx, store.DueQuery{By: now.Add(time.Hour), Limit: 10})
	if err != nil {
		e.t.Fatalf("Due: %v", err)
	}
	for _, ref := range page.Refs {
		if ref.Key.TenantID == e.tenant {
			e.t.Fatalf("a PAUSED row is in the sweep index: %+v", ref)
		}
	}
	// Not claimable, however late (a late work item finds it so).
	late := now.Add(time.Hour)
	if _, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: got.Version, Owner: "w1", Now: late,
		DueBy: late, TakeoverBy: late, LeaseUntil: late.Add(10 * time.Second), Attempt: got.Attempt}); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("Claim of a PAUSED row = %v, want ErrConflict", err)
	}
	// Listed under its status.
	lp, err := e.s.List(e.ctx, store.ListQuery{TenantID: e.tenant, Statuses: []store.Status{store.Paused}, Limit: 10})
	if err != nil || len(lp.Executions) != 1 || lp.Executions[0].ExecutionID != x.ExecutionID {
		e.t.Fatalf("List PAUSED = %+v, %v", lp.Executions, err)
	}
	// A resume: back to WAIT_RETRY, due time kept, in the sweep index;
	// PausedFrom and PauseRequestedAt cleared, the reason kept for the audit.
	resumed := got
	resumed.Status, resumed.PausedFrom, resumed.PauseRequestedAt = store.WaitRetry, "", time.Time{}
	resumed.SweepAt = got.NextDueAt.Add(10 * time.Second)
	if _, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: got.Version}, resumed); err != nil {
		e.t.Fatalf("Update (resume): %v", err)
	}
	back, err := e.s.Get(e.ctx, x.Key())
	if err != nil || back.Status != store.WaitRetry || back.PausedFrom != "" || !back.PauseRequestedAt.IsZero() ||
		back.PauseReason != "hold for the migration" || back.SweepAt.IsZero() {
		e.t.Fatalf("resumed row read back as %+v, %v", back, err)
	}
	if _, err := e.s.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: back.Version, Owner: "w1", Now: late,
		DueBy: late, TakeoverBy: late, LeaseUntil: late.Add(10 * time.Second), Attempt: back.Attempt}); err != nil {
		e.t.Fatalf("Claim after resume: %v", err)
	}
}

// testPauseRequested records a pause request on a RUNNING row under its
// lease (a new version; lease and sweep kept): the holder's renewal at
// the old version is refused, at the new one accepted.
func testPauseRequested(e *stateEnv) {
	x := e.create("a")
	held := e.mustClaim(x, "w1")
	req := held
	req.PauseReason, req.PauseRequestedAt = "look first", e.clock.Now()
	got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: held.Version, LeaseOwner: "w1", KeepSweep: true}, req)
	if err != nil {
		e.t.Fatalf("Update (pause request): %v", err)
	}
	if got.Status != store.Running || got.LeaseOwner != "w1" || got.PauseRequestedAt.IsZero() || got.SweepAt.UnixMilli() != held.SweepAt.UnixMilli() {
		e.t.Fatalf("pause-requested row = %+v", got)
	}
	until := e.clock.Now().Add(20 * time.Second)
	if err := e.s.Renew(e.ctx, x.Key(), "w1", held.Version, until); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("Renew at the old version = %v, want ErrLeaseLost", err)
	}
	if err := e.s.Renew(e.ctx, x.Key(), "w1", got.Version, until); err != nil {
		e.t.Fatalf("Renew at the pause request's version: %v", err)
	}
}
