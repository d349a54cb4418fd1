package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// Errors of Cancel (test with errors.Is).
var (
	// ErrNotCancellable: cancel asked of a SUCCEEDED, FAILED or DLQ
	// execution, which has already ended.
	ErrNotCancellable = errors.New("engine: execution has ended (SUCCEEDED, FAILED or DLQ) and cannot be cancelled")
	// ErrCancelled is the cancellation cause of a step whose execution an
	// operator cancelled (context.Cause of the step's context).
	ErrCancelled = errors.New("engine: execution cancelled")
)

// cancelTries bounds how often Cancel reads the row again after losing a
// race to a concurrent change (a commit, a claim).
const cancelTries = 5

// Cancel cancels an execution on an operator's request, recording reason.
//
//   - QUEUED, WAIT_RETRY, WAITING_EXTERNAL, REMOTE_OUTCOME_UNKNOWN: the row
//     becomes CANCELLED at once (one version-guarded write that also takes
//     it out of the sweep index, retention counted from now).
//   - RUNNING: the request is recorded on the row (CancelReason,
//     CancelRequestedAt, a new version; status, lease and sweep time
//     kept). The worker's next lease renewal fails on the version, so the
//     step's context is cancelled with cause ErrCancelled (at most a
//     third of a lease later) and the worker ends the row CANCELLED at
//     once, whether or not the step returns; its commit is refused. A
//     worker that dies instead leaves the row to whoever finds its lease
//     lapsed: a redelivered work item or the sweeper ends it CANCELLED.
//     A RUNNING row whose lease has already lapsed is ended at once.
//   - CANCELLED: nothing changes (changed is false), as for a RUNNING row
//     whose cancel is already requested.
//   - SUCCEEDED, FAILED, DLQ: an error wrapping ErrNotCancellable.
//
// An unknown execution (or another tenant's) is store.ErrNotFound. A
// concurrent change is met by reading the row again. A cancel costs
// nothing to executions that are not cancelled: no step writes or reads
// anything more for it.
func (r *Runtime) Cancel(ctx context.Context, key store.Key, reason string) (e store.Execution, changed bool, err error) {
	reason = store.Truncate(reason, store.MaxErrorMessage)
	for try := 1; ; try++ {
		e, err = r.deps.Store.Get(ctx, key)
		if err != nil {
			return e, false, err
		}
		var got store.Execution
		got, changed, err = r.cancelOnce(ctx, e, reason)
		if (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost)) && try < cancelTries {
			continue // the row moved meanwhile: decide again on what it is now
		}
		if err != nil {
			return e, false, err
		}
		return got, changed, nil
	}
}

// cancelOnce applies a cancel to the row as read.
func (r *Runtime) cancelOnce(ctx context.Context, e store.Execution, reason string) (store.Execution, bool, error) {
	now := r.deps.Clock.Now()
	switch e.Status {
	case store.Cancelled:
		return e, false, nil
	case store.Succeeded, store.Failed, store.DLQ:
		return e, false, fmt.Errorf("%w: status %s", ErrNotCancellable, e.Status)
	case store.Running:
		if !e.CancelRequestedAt.IsZero() {
			return e, false, nil // requested already: its worker, or the sweeper, ends it
		}
		e.CancelReason, e.CancelRequestedAt = reason, now
		if !e.Leased(now.Add(-r.cfg.ClockSkewTolerance)) {
			// Its worker is gone (the lease lapsed beyond the tolerance).
			got, err := r.finishCancel(ctx, e, "requester")
			return got, err == nil, err
		}
		next := e
		next.UpdatedAt = now
		got, err := r.deps.Store.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version, LeaseOwner: e.LeaseOwner, KeepSweep: true}, next)
		if err != nil {
			return e, false, err
		}
		r.execLogger(&got).LogAttrs(ctx, slog.LevelWarn, "execution_cancel_requested", slog.String("event", "execution_cancel_requested"),
			slog.String("reason", reason), slog.String("lease_owner", got.LeaseOwner), slog.Int64("version", got.Version))
		return got, true, nil
	case store.WaitingChildren:
		// The parent stays waiting until its children have ended: its
		// cancel is recorded and carried on to them (here, up to a look's
		// budget, then by its sweep looks); the last one's end wakes it,
		// and it ends CANCELLED then.
		if !e.CancelRequestedAt.IsZero() {
			return e, false, nil
		}
		next := e
		next.CancelReason, next.CancelRequestedAt, next.UpdatedAt = reason, now, now
		next.SweepAt, next.Sweeps = now, 0
		got, err := r.deps.Store.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
		if err != nil {
			return e, false, err
		}
		r.execLogger(&got).LogAttrs(ctx, slog.LevelWarn, "execution_cancel_requested", slog.String("event", "execution_cancel_requested"),
			slog.String("reason", reason), slog.Int("children", got.Children.Total))
		r.reschedule(ctx, &got, r.lookAtChildren(ctx, got), 0)
		return got, true, nil
	default: // QUEUED, WAIT_RETRY, PENDING and the parked statuses
		e.CancelReason, e.CancelRequestedAt = reason, now
		got, err := r.finishCancel(ctx, e, "requester")
		return got, err == nil, err
	}
}

// finishCancel ends e CANCELLED with one write guarded by e's version and
// lease owner (the lease's holder, or no one): out of the sweep index, no
// lease, nothing due, retention from now. by names who ended it, for the
// log: requester, worker, takeover or sweeper.
func (r *Runtime) finishCancel(ctx context.Context, e store.Execution, by string) (store.Execution, error) {
	now := r.deps.Clock.Now()
	next := e
	next.Status, next.DLQPending = store.Cancelled, false
	next.PausedFrom, next.PauseRequestedAt = "", time.Time{} // a pause ends with the execution
	next.LeaseOwner, next.LeaseExpiresAt, next.NextDueAt = "", time.Time{}, time.Time{}
	next.SweepAt, next.Sweeps = time.Time{}, 0
	next.UpdatedAt, next.ExpiresAt = now, now.Add(r.cfg.ExecutionTTL)
	if next.CancelRequestedAt.IsZero() {
		next.CancelRequestedAt = now
	}
	// The caller may be a step whose context is about to end, or a
	// shutting-down worker: the write must not be cut short by either.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DispatchTimeout+5*time.Second)
	defer cancel()
	got, err := r.update(wctx, store.Guard{Key: e.Key(), Version: e.Version, LeaseOwner: e.LeaseOwner}, next)
	if err != nil {
		return e, err
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelWarn, "execution_cancelled", slog.String("event", "execution_cancelled"),
		slog.String("reason", got.CancelReason), slog.String("from_status", string(e.Status)), slog.String("by", by),
		slog.Time("cancel_requested_at", got.CancelRequestedAt), slog.Duration("latency", now.Sub(got.CreatedAt)))
	r.notify(ctx, EventCancelled, got, SweepResult{})
	r.keyEnded(ctx, got)
	r.childEnded(ctx, got)
	return got, nil
}

// cancelRequested is a worker's check, after a renewal or a write of its
// transition was refused, whether the refusal was an operator's cancel:
// the row still RUNNING under this worker's lease with a cancel
// requested. If so it ends the row CANCELLED (the step's own outcome is
// dropped) and reports true.
func (t *transition) cancelRequested(ctx context.Context) bool {
	r := t.r
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	row, err := r.deps.Store.Get(rctx, t.row.Key())
	if err != nil || !cancelPending(&row) || row.LeaseOwner != r.cfg.WorkerID {
		return false
	}
	if _, err := r.finishCancel(ctx, row, "worker"); err != nil {
		// The sweeper ends it once the lease lapses.
		t.log.LogAttrs(ctx, slog.LevelWarn, "cancel_finish_failed", slog.String("event", "cancel_finish_failed"), slog.String("error", err.Error()))
	}
	return true
}

// cancelPending reports whether e is RUNNING with a cancel requested that
// no one has carried out yet.
func cancelPending(e *store.Execution) bool {
	return e.Status == store.Running && !e.CancelRequestedAt.IsZero()
}
