package engine

// Pause and resume: an operator holds an execution where it is and lets
// it go on later.
//
// Semantics (docs/operations.md, "Pause and resume"). A PAUSED execution
// holds no lease, is not in the sweep index and is never claimed: a late
// work item finds it not claimable and is dropped. What a pause does
// depends on what the execution is doing:
//
//   - QUEUED (also a sleep's next step, due later), WAIT_RETRY,
//     WAITING_EXTERNAL: PAUSED at once, in one version-guarded write that
//     also takes it out of the sweep index. Its due time (a retry's, a
//     sleep's wake-up) and its await are kept.
//   - WAITING_KEY: PAUSED at once too, which takes it out of the key's
//     waiting index (the others' turn comes meanwhile); a paused waiter
//     holds no slot (concurrency_keys.go: waiterPaused). Resume queues
//     it: it takes a free slot, or waits again in its rank order.
//     An execution that holds its key's slot (started, not ended) keeps
//     it while paused: its steps so far ran under the key, and a limit of
//     1 is a promise that no other execution of the key runs in between.
//     An operator who wants the slot freed cancels it.
//   - RUNNING: a request (PauseRequestedAt, a new version; status, lease
//     and sweep kept). The worker adopts the new version at its next lease
//     renewal (or at its commit) and lets the step finish; the step's
//     commit then parks the execution PAUSED where it would have handed
//     over (the next step, a retry, an await) instead of dispatching or
//     chaining. A commit that ends the execution (SUCCEEDED, FAILED, DLQ)
//     ends it: there is nothing left to pause. A worker that dies leaves
//     the row to the next work item or the sweeper, which parks it PAUSED
//     at the same step and attempt (the lost run counts as a release).
//   - WAITING_CHILDREN: a request too. The children go on (pause them by
//     filter to hold them); when the last one ends, the parent collects
//     and the step after the map parks it (see pauseOnCommit).
//   - QUEUED or WAIT_RETRY where it needs its map's children (a map step
//     whose fan-out may have run, the step after a map: holdsChildren),
//     and RUNNING there with its worker gone: a request too, for the
//     same reason (a PAUSED row keeps none of its children alive).
//   - PAUSED, or a request already recorded: nothing changes.
//   - PENDING (a map's child not released yet), REMOTE_OUTCOME_UNKNOWN
//     (parked for an operator already) and the terminal statuses:
//     ErrNotPausable.
//
// While paused, the world goes on (as a Temporal workflow pause buffers
// signals and timers): an await completion is accepted and recorded (the
// row stays PAUSED, to resume QUEUED with the completion), a retry or
// sleep due time passes, an await timeout passes. Resume puts the row
// back as it would be now: QUEUED or WAIT_RETRY with its original due
// time (run at once when it has passed), or WAITING_EXTERNAL with its
// await (its timeout, passed while paused, is enforced by the sweeper's
// next look), in one version-guarded write plus a dispatch; the sweeper
// covers a lost dispatch. Cancel takes a PAUSED execution as it takes a
// queued one.
//
// Retention: a paused execution does not expire while paused. The pause
// moves its expiry to PausedRetention past the pause (records with it),
// and the resume sets it back to a retention past the resume (or past its
// due time). Paused executions are listed under PAUSED.
//
// Cost: the pause and the resume are one conditional write each (plus the
// resume's work item); nothing is read or written on the path of an
// execution that is not paused.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Errors of Pause and Resume (test with errors.Is).
var (
	// ErrNotPausable: pause asked of an execution that has ended, or is
	// PENDING or REMOTE_OUTCOME_UNKNOWN.
	ErrNotPausable = errors.New("engine: execution cannot be paused (it has ended, or is PENDING or REMOTE_OUTCOME_UNKNOWN)")
	// ErrNotPaused: resume asked of an execution that is not PAUSED and
	// has no pause request to withdraw.
	ErrNotPaused = errors.New("engine: execution is not paused")
)

// PausedRetention is how long past its pause a PAUSED execution is kept:
// long enough to mean "until an operator resumes or cancels it".
const PausedRetention = 10 * 365 * 24 * time.Hour

// PauseOptions are the inputs of Pause and Resume.
type PauseOptions struct {
	// Reason is the operator's audit note (kept as PauseReason by a
	// pause, logged by both).
	Reason string
	// ExpectedVersion, when set, must equal the current version
	// (ErrVersionMismatch otherwise).
	ExpectedVersion *int64
	// JobID names the bulk pause or resume this call is part of ("" for
	// a single one); the audit log carries it.
	JobID string
}

// Pause pauses an execution on an operator's request (see the package
// notes above for what it does in each status). changed is false when
// nothing changed (already paused, or already requested). Errors:
// store.ErrNotFound, ErrNotPausable, ErrVersionMismatch, store.ErrConflict
// (the row kept changing).
func (r *Runtime) Pause(ctx context.Context, key store.Key, opts PauseOptions) (e store.Execution, changed bool, err error) {
	reason := store.Truncate(opts.Reason, store.MaxErrorMessage)
	for try := 1; ; try++ {
		e, err = r.deps.Store.Get(ctx, key)
		if err != nil {
			return e, false, err
		}
		if opts.ExpectedVersion != nil && *opts.ExpectedVersion != e.Version {
			return e, false, fmt.Errorf("%w: expected %d, current %d", ErrVersionMismatch, *opts.ExpectedVersion, e.Version)
		}
		var got store.Execution
		got, changed, err = r.pauseOnce(ctx, e, reason, opts.JobID)
		if (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost)) && try < cancelTries && opts.ExpectedVersion == nil {
			continue // the row moved meanwhile: decide again on what it is now
		}
		if err != nil {
			return e, false, err
		}
		return got, changed, nil
	}
}

func (r *Runtime) pauseOnce(ctx context.Context, e store.Execution, reason, jobID string) (store.Execution, bool, error) {
	now := r.deps.Clock.Now()
	held := r.holdsChildren(&e)
	switch e.Status {
	case store.Paused:
		return e, false, nil
	case store.Queued, store.WaitRetry, store.WaitingExternal, store.WaitingKey:
		if !e.PauseRequestedAt.IsZero() {
			return e, false, nil // requested already (see holdsChildren): a later hand-over parks it
		}
		if held {
			return r.requestPause(ctx, e, reason, jobID, now)
		}
		next := e
		next.PauseReason, next.PauseRequestedAt = reason, now
		got, err := r.parkPaused(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next, e.Status, "requester", jobID)
		if err == nil && e.Status == store.WaitingKey {
			r.waiterPaused(ctx, got)
		}
		return got, err == nil, err
	case store.Running, store.WaitingChildren:
		if !e.PauseRequestedAt.IsZero() {
			return e, false, nil // requested already: the hand-over parks it
		}
		if e.Status == store.Running && !held && !e.Leased(now.Add(-r.cfg.ClockSkewTolerance)) {
			// Its worker is gone (the lease lapsed beyond the tolerance).
			next := e
			next.PauseReason, next.PauseRequestedAt = reason, now
			got, err := r.pauseLapsed(ctx, next, "requester", jobID)
			return got, err == nil, err
		}
		return r.requestPause(ctx, e, reason, jobID, now)
	default: // PENDING, REMOTE_OUTCOME_UNKNOWN, terminal
		return e, false, fmt.Errorf("%w: status %s", ErrNotPausable, e.Status)
	}
}

// requestPause records a pause request on e (PauseRequestedAt, a new
// version; status, lease and sweep kept): a RUNNING or WAITING_CHILDREN
// row, or one that holds its children (holdsChildren). The row's next
// hand-over that may park parks it PAUSED (pauseOnCommit).
func (r *Runtime) requestPause(ctx context.Context, e store.Execution, reason, jobID string, now time.Time) (store.Execution, bool, error) {
	next := e
	next.PauseReason, next.PauseRequestedAt, next.UpdatedAt = reason, now, now
	got, err := r.deps.Store.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version, LeaseOwner: e.LeaseOwner, KeepSweep: true}, next)
	if err != nil {
		return e, false, err
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelWarn, "execution_pause_requested", slog.String("event", "execution_pause_requested"),
		slog.String("reason", reason), slog.String("status", string(got.Status)), slog.String("lease_owner", got.LeaseOwner),
		slog.Int64("version", got.Version), slog.String("job_id", jobID))
	return got, true, nil
}

// holdsChildren reports whether e stands where it needs its map's
// children: at a map step whose fan-out may have run (claimed there
// before: a takeover's or a retry's attempt, a hand-back, a RUNNING row;
// or parked and woken there: its collect reads their rows), or at the
// step after a map step (its input holds their outputs, by reference). A
// PAUSED row keeps none of its children's rows and payloads alive (they
// expire a retention after they ended, a count row a retention later),
// so such an execution is not parked PAUSED where it stands: the pause is
// a request, honoured at its first hand-over past them (pauseOnCommit).
// Parked at once, a parent handed back mid-fan-out and paused past the
// retention created its ended children again at the resume and ran them
// a second time (the simulation, seed 3 on DynamoDB).
func (r *Runtime) holdsChildren(e *store.Execution) bool {
	p, ok := r.deps.Registry.Version(e.PipelineID, e.PipelineVersion)
	if !ok {
		return false
	}
	return readsChildren(p, e.StepIndex, e)
}

// readsChildren is holdsChildren for e's definition p at step i.
func readsChildren(p *pipeline.Pipeline, i int, e *store.Execution) bool {
	if i < 0 || i >= len(p.Steps) {
		return false
	}
	if p.Steps[i].Map == nil {
		return i > 0 && p.Steps[i-1].Map != nil
	}
	if c := e.Children; c != nil && c.StepIndex == i && !c.Retry {
		return true // parked there, or woken to collect
	}
	return e.Status == store.Running || e.Attempt > 1 || e.Releases > 0
}

// pausedRow turns next (the row a write would leave, with the pause's
// reason and time set) into its PAUSED form resuming to from: no lease,
// out of the sweep index, kept PausedRetention past now.
func (r *Runtime) pausedRow(next store.Execution, from store.Status, now time.Time) store.Execution {
	if from == store.Running { // a chained claim the pause stops: the next step waits QUEUED
		from = store.Queued
	}
	next.Status, next.PausedFrom = store.Paused, from
	next.LeaseOwner, next.LeaseExpiresAt = "", time.Time{}
	next.SweepAt, next.Sweeps = time.Time{}, 0
	next.UpdatedAt = now
	next.ExpiresAt = maxTime(next.ExpiresAt, now.Add(PausedRetention))
	return next
}

// parkPaused writes next as PAUSED resuming to from, under guard, and
// logs and reports it. by names who parked it (requester, worker,
// takeover, parent, sweeper).
func (r *Runtime) parkPaused(ctx context.Context, guard store.Guard, next store.Execution, from store.Status, by, jobID string) (store.Execution, error) {
	now := r.deps.Clock.Now()
	guard.KeepSweep = false
	got, err := r.update(ctx, guard, r.pausedRow(next, from, now))
	if err != nil {
		return next, err
	}
	r.logPaused(ctx, got, by, jobID)
	return got, nil
}

func (r *Runtime) logPaused(ctx context.Context, got store.Execution, by, jobID string) {
	r.execLogger(&got).LogAttrs(ctx, slog.LevelWarn, "execution_paused", slog.String("event", "execution_paused"),
		slog.String("reason", got.PauseReason), slog.String("paused_from", string(got.PausedFrom)), slog.String("by", by),
		slog.Int64("version", got.Version), slog.Time("next_due_at", got.NextDueAt), slog.String("job_id", jobID))
	r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
}

// pauseLapsed parks a RUNNING row whose worker is gone (its lease lapsed
// beyond the tolerance) and whose pause is requested: PAUSED to resume
// QUEUED at the same step and attempt, the lost run counted as a release.
func (r *Runtime) pauseLapsed(ctx context.Context, e store.Execution, by, jobID string) (store.Execution, error) {
	now := r.deps.Clock.Now()
	next := e
	next.NextDueAt, next.Releases = now, e.Releases+1
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DispatchTimeout+5*time.Second)
	defer cancel()
	return r.parkPaused(wctx, store.Guard{Key: e.Key(), Version: e.Version, LeaseOwner: e.LeaseOwner}, next, store.Queued, by, jobID)
}

// pausePending reports whether e is RUNNING with a pause requested.
func pausePending(e *store.Execution) bool {
	return e.Status == store.Running && !e.PauseRequestedAt.IsZero()
}

// Resume lets a PAUSED execution go on where it was (see the package
// notes), or withdraws a pause request that has not taken effect yet (a
// RUNNING or WAITING_CHILDREN row). Errors: store.ErrNotFound,
// ErrNotPaused (any other status), ErrVersionMismatch, store.ErrConflict.
func (r *Runtime) Resume(ctx context.Context, key store.Key, opts PauseOptions) (store.Execution, error) {
	reason := store.Truncate(opts.Reason, store.MaxErrorMessage)
	for try := 1; ; try++ {
		e, err := r.deps.Store.Get(ctx, key)
		if err != nil {
			return e, err
		}
		if opts.ExpectedVersion != nil && *opts.ExpectedVersion != e.Version {
			return e, fmt.Errorf("%w: expected %d, current %d", ErrVersionMismatch, *opts.ExpectedVersion, e.Version)
		}
		got, err := r.resumeOnce(ctx, e, reason, opts.JobID)
		if (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost)) && try < cancelTries && opts.ExpectedVersion == nil {
			continue
		}
		if err != nil {
			return e, err
		}
		return got, nil
	}
}

func (r *Runtime) resumeOnce(ctx context.Context, e store.Execution, reason, jobID string) (store.Execution, error) {
	now := r.deps.Clock.Now()
	log := func(got *store.Execution, withdrawn bool) {
		r.execLogger(got).LogAttrs(ctx, slog.LevelWarn, "execution_resumed", slog.String("event", "execution_resumed"),
			slog.String("reason", reason), slog.String("status", string(got.Status)), slog.Bool("request_withdrawn", withdrawn),
			slog.Int64("version", got.Version), slog.Time("next_due_at", got.NextDueAt), slog.String("job_id", jobID))
	}
	if e.Status != store.Paused {
		if e.PauseRequestedAt.IsZero() || (e.Status != store.Running && e.Status != store.WaitingChildren &&
			e.Status != store.Queued && e.Status != store.WaitRetry) {
			return e, fmt.Errorf("%w: status %s", ErrNotPaused, e.Status)
		}
		next := e
		next.PauseRequestedAt, next.UpdatedAt = time.Time{}, now
		got, err := r.deps.Store.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version, LeaseOwner: e.LeaseOwner, KeepSweep: true}, next)
		if err != nil {
			return e, err
		}
		log(&got, true)
		return got, nil
	}
	next := e
	from := e.PausedFrom
	if from == "" {
		from = store.Queued
	}
	next.Status, next.PausedFrom, next.PauseRequestedAt, next.UpdatedAt = from, "", time.Time{}, now
	if from == store.WaitingKey {
		// Paused while waiting for its key: queued now, its claim takes a
		// free slot or waits again (in its rank order).
		next.Status, next.NextDueAt = store.Queued, now
	}
	next.Sweeps = 0
	live := now // what the row waits for: its expiry is a retention past it
	delay := time.Duration(-1)
	switch from {
	case store.WaitingExternal:
		next.SweepAt = time.Time{}
		if a := e.Await; a != nil && a.Status == store.AwaitWaiting && !a.TimeoutAt.IsZero() {
			next.SweepAt = a.TimeoutAt // a timeout passed while paused is enforced at the next sweep
			live = maxTime(live, a.TimeoutAt)
		}
	default: // QUEUED, WAIT_RETRY: due at its own time, or now
		if next.NextDueAt.IsZero() {
			next.NextDueAt = now
		}
		due := maxTime(next.NextDueAt, now)
		next.SweepAt, live, delay = r.firstLook(due), due, due.Sub(now)
	}
	next.ExpiresAt = live.Add(r.cfg.ExecutionTTL)
	if e.SlotHeld {
		kept, err := r.slotKept(ctx, e)
		if err != nil {
			return e, err
		}
		next.SlotHeld = kept
	}
	got, err := r.update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
	if err != nil {
		return e, err
	}
	log(&got, false)
	r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
	if delay >= 0 {
		r.dispatch(ctx, &got, delay) // a lost one: the sweeper's look at SweepAt re-sends it
	}
	return got, nil
}

// pauseOnCommit turns a commit's next row into its PAUSED form when a
// pause was requested of the running attempt (t.row, as adopted): a
// hand-over (the next step, a chained claim, a sleep), a retry or an
// await park is parked PAUSED; an end (SUCCEEDED, FAILED, DLQ,
// REMOTE_OUTCOME_UNKNOWN) drops the request; a map step's park, and the
// hand-over from a map step to the step after it (which reads the
// children's outputs), keep it: the children run on, the parent collects
// their outcomes, the next step consumes them, and that step's commit
// parks it. A paused parent does not keep its children's rows and
// payloads alive, so it never pauses between its children and the step
// that reads them. It reports whether next is now PAUSED.
func (t *transition) pauseOnCommit(next *store.Execution) bool {
	if t.row.PauseRequestedAt.IsZero() {
		return false
	}
	if i := t.row.StepIndex; i < len(t.p.Steps) && t.p.Steps[i].Map != nil && next.Status != store.WaitingChildren && !next.Status.Terminal() {
		// The map step's collect hands over to the step reading its
		// children's outputs: the request waits for that step's commit.
		next.PauseReason, next.PauseRequestedAt = t.row.PauseReason, t.row.PauseRequestedAt
		return false
	}
	if i := t.row.StepIndex; i > 0 && i < len(t.p.Steps) && t.p.Steps[i-1].Map != nil && next.StepIndex == i && !next.Status.Terminal() {
		// The step reading the children's outputs retries or is handed
		// back: it still needs them (holdsChildren).
		next.PauseReason, next.PauseRequestedAt = t.row.PauseReason, t.row.PauseRequestedAt
		return false
	}
	next.PauseReason, next.PauseRequestedAt = t.row.PauseReason, t.row.PauseRequestedAt
	switch next.Status {
	case store.Queued, store.WaitRetry, store.WaitingExternal, store.Running:
		*next = t.r.pausedRow(*next, next.Status, t.r.deps.Clock.Now())
		return true
	case store.WaitingChildren:
		return false
	default:
		next.PauseRequestedAt = time.Time{}
		return false
	}
}

// keptWritten is what keepRecords may leave alone of the payload this
// transition wrote: it was written with the horizon of a live row, which
// a row parked PAUSED outlives by far (PausedRetention), so a paused
// commit extends it like the row's other payloads (one write per part,
// on a pause only).
func (t *transition) keptWritten(next *store.Execution) []payload.Ref {
	if next.Status == store.Paused {
		return nil
	}
	return []payload.Ref{t.written}
}

// adoptPause is a worker's check, after a renewal or a write under its
// lease was refused, whether the refusal was an operator's pause request
// (or its withdrawal): the row still RUNNING under this worker's lease, at
// the same step, attempt and release, with no cancel requested. If so it
// takes the row's version and pause request as its own and reports true:
// the step goes on, and its commit parks the execution PAUSED.
func (t *transition) adoptPause(ctx context.Context) bool {
	r := t.r
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	row, err := r.deps.Store.Get(rctx, t.row.Key())
	if err != nil || !adoptable(&row, &t.row, r.cfg.WorkerID) {
		return false
	}
	t.row.Version, t.row.PauseReason, t.row.PauseRequestedAt = row.Version, row.PauseReason, row.PauseRequestedAt
	t.log.LogAttrs(ctx, slog.LevelInfo, "pause_request_seen", slog.String("event", "pause_request_seen"),
		slog.Int64("version", row.Version), slog.Bool("requested", !row.PauseRequestedAt.IsZero()))
	return true
}

// adoptable reports whether row differs from held (a worker's claimed
// row) only by an operator's pause request or its withdrawal.
func adoptable(row, held *store.Execution, worker string) bool {
	return row.Status == store.Running && row.LeaseOwner == worker && row.Version > held.Version &&
		row.StepIndex == held.StepIndex && row.Attempt == held.Attempt && row.Releases == held.Releases &&
		row.CancelRequestedAt.IsZero() && !row.PauseRequestedAt.Equal(held.PauseRequestedAt)
}

// completePausedAwait records an await completion that arrives while the
// execution is PAUSED (resuming to WAITING_EXTERNAL): the completion is
// stored as the Result, the await COMPLETED, and the row stays PAUSED, now
// to resume QUEUED at the await step (whose next run commits the
// completion as its output). Nothing is dispatched.
func (r *Runtime) completePausedAwait(ctx context.Context, e store.Execution, a store.Await, in payload.Payload, slot string) (store.Execution, bool, error) {
	now := r.deps.Clock.Now()
	digest := payload.Digest(in.Data)
	ref, err := payload.Write(ctx, r.deps.Payloads, in, slot, r.cfg.InlineBudget, r.horizon(e.RecordsExpireAt, e.ExpiresAt))
	if err != nil {
		return e, false, fmt.Errorf("engine: store completion: %w", err)
	}
	a.Status, a.Digest, a.CompletedAt = store.AwaitCompleted, digest, now
	next := e
	next.Await, next.Result, next.Error, next.DLQPending = &a, ref, nil, false
	next.PausedFrom, next.NextDueAt, next.UpdatedAt = store.Queued, now, now
	got, err := r.update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next, ref)
	if err != nil {
		return e, false, err
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelInfo, "await_completed", slog.String("event", "await_completed"),
		slog.String("await_id", a.ID), slog.String("status", string(got.Status)), slog.Bool("paused", true),
		slog.Int64("version", got.Version), slog.Int64("completion_bytes", ref.Length))
	r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
	return got, false, nil
}

// BulkAction is what a bulk job (StartRedrivesWith) does to each
// execution its filter matched: the bulk pause and resume are bulk
// re-drive's jobs (the same durable record, scan, rate, progress,
// idempotency key and driver) with another action.
type BulkAction string

// Bulk actions.
const (
	// BulkRedrive re-drives (RedriveWith): the default.
	BulkRedrive BulkAction = ""
	// BulkPause pauses (Pause): statuses QUEUED, WAIT_RETRY,
	// WAITING_EXTERNAL, RUNNING, WAITING_CHILDREN and WAITING_KEY (empty:
	// all six).
	BulkPause BulkAction = "pause"
	// BulkResume resumes (Resume): status PAUSED.
	BulkResume BulkAction = "resume"
)

// String names the action for logs.
func (a BulkAction) String() string {
	if a == BulkRedrive {
		return "redrive"
	}
	return string(a)
}

// pausable are the statuses a pause takes.
var pausable = []store.Status{store.Queued, store.WaitRetry, store.WaitingExternal, store.Running, store.WaitingChildren, store.WaitingKey}

// statuses checks a bulk job's status filter against what the action
// takes and returns it sorted (defaulted when empty).
func (a BulkAction) statuses(asked []store.Status) ([]store.Status, error) {
	var allowed []store.Status
	switch a {
	case BulkRedrive:
		allowed = []store.Status{store.DLQ, store.Failed}
	case BulkPause:
		allowed = pausable
	case BulkResume:
		allowed = []store.Status{store.Paused}
	default:
		return nil, fmt.Errorf("%w: unknown action %q", ErrInvalidRedrive, string(a))
	}
	out := slices.Clone(asked)
	if len(out) == 0 {
		out = slices.Clone(allowed)
	}
	for _, s := range out {
		if !slices.Contains(allowed, s) {
			return nil, fmt.Errorf("%w: status %q: a bulk %s takes %v executions", ErrInvalidRedrive, s, a, allowed)
		}
	}
	slices.Sort(out)
	return out, nil
}

// jobID is the id of the bulk job tenant starts under an idempotency
// key: re-drive's, and apart from it one per other action.
func (a BulkAction) jobID(tenant, key string) string {
	if a == BulkRedrive {
		return redriveJobID(tenant, key)
	}
	return hashParts("qasync-"+string(a), tenant, key)[:32]
}

// pauseOne pauses or resumes one execution of a bulk job, as the single
// call does, its audit log naming the job: done when it is paused (or its
// pause requested) or resumed now, skipped when it no longer matches or
// the action does not apply to it any more.
func (r *Runtime) pauseOne(ctx context.Context, job *redriveJob, id string) redriveOutcome {
	key := store.Key{TenantID: job.rec.Key.TenantID, ExecutionID: id}
	opts := PauseOptions{Reason: "bulk " + job.st.Action.String() + " " + job.rec.Key.ID + ": " + job.st.Reason, JobID: job.rec.Key.ID}
	filter := job.st.filter()
	for try := 1; ; try++ {
		e, err := r.deps.Store.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return redriveSkipped
		case err != nil && try < redriveTries:
			continue
		case err != nil:
			return redriveFailed
		case job.st.Action == BulkPause && (e.Status == store.Paused || !e.PauseRequestedAt.IsZero()) &&
			e.PauseReason == store.Truncate(opts.Reason, store.MaxErrorMessage):
			return redriveDone // paused by this job before a restart
		case !filter.matches(&e):
			return redriveSkipped
		}
		version := e.Version
		opts.ExpectedVersion = &version
		if job.st.Action == BulkPause {
			_, _, err = r.Pause(ctx, key, opts)
		} else {
			_, err = r.Resume(ctx, key, opts)
		}
		switch {
		case err == nil:
			return redriveDone
		case errors.Is(err, ErrNotPausable), errors.Is(err, ErrNotPaused), errors.Is(err, store.ErrNotFound):
			return redriveSkipped
		case try >= redriveTries:
			r.jobLogger(job).LogAttrs(ctx, slog.LevelWarn, "bulk_pause_execution_failed", slog.String("event", "bulk_pause_execution_failed"),
				slog.String("execution_id", id), slog.String("error", err.Error()))
			return redriveFailed
		}
	}
}
