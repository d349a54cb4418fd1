package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Error codes the runtime itself assigns (see package execution).
const (
	// CodeWorkerLost: the previous attempt's worker lost its lease (crash,
	// timeout) and no attempt was left for a takeover.
	CodeWorkerLost = store.CodeWorkerLost
	// CodePipelineVersionUnavailable: no worker served the execution's
	// pipeline definition within the version wait.
	CodePipelineVersionUnavailable = store.CodePipelineVersionUnavailable
	// CodePayloadUnreadable: the step's input could not be read or verified.
	CodePayloadUnreadable = store.CodePayloadUnreadable
	// CodeOutputUnstorable: the step's output cannot be stored.
	CodeOutputUnstorable = store.CodeOutputUnstorable
	// CodeReleaseLimit: the attempt was handed back too often.
	CodeReleaseLimit = store.CodeReleaseLimit
)

// Process runs one transition for a delivered work item: read the row,
// check that this worker serves the execution's pipeline definition, claim
// its lease, run the current step while renewing the lease, and commit the
// outcome. It is the dispatch.Handler of every transport.
//
// A nil return means the work item is done with: the transition was
// committed, or there was nothing to do (duplicate delivery, lost claim,
// finished or parked execution, lease held by a live worker, lost lease).
// A dispatch.RetryAfterError asks the transport to keep the item and
// deliver it again later: the execution is not due yet (a retry time, or
// a clock behind the submitter's), or this worker does not serve its
// pipeline definition. Any other error means a backend failed before the
// outcome was recorded; the transport should deliver the item again.
func (r *Runtime) Process(ctx context.Context, item dispatch.WorkItem) error {
	if r.tracer != nil {
		return r.tracedProcess(ctx, item)
	}
	return r.process(ctx, item)
}

func (r *Runtime) process(ctx context.Context, item dispatch.WorkItem) error {
	key := store.Key{TenantID: item.TenantID, ExecutionID: item.ExecutionID}
	row, err := r.deps.Store.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "work_item_orphaned", slog.String("event", "work_item_orphaned"),
			slog.String("execution_id", key.ExecutionID), slog.String("tenant", key.TenantID))
		return nil
	}
	if err != nil {
		return err
	}
	now := r.deps.Clock.Now()
	tol := r.cfg.ClockSkewTolerance
	switch row.Status {
	case store.Queued, store.WaitRetry:
		if !row.Due(now.Add(tol)) {
			// Not yet: leave the item in the queue until it is (a retry time
			// beyond the queue's delay limit, or this clock runs behind).
			return dispatch.RetryAfter(row.NextDueAt.Sub(now), "not_due")
		}
	case store.Running:
		if row.Leased(now) {
			return nil // a live worker holds it (a duplicate delivery)
		}
		if row.Leased(now.Add(-tol)) {
			// Expired by this clock, not by the tolerance: it may still be
			// live by the holder's. Keep the item until a takeover is safe
			// (the holder may be dead: this item is how it is retried).
			return dispatch.RetryAfter(row.LeaseExpiresAt.Add(tol).Sub(now), "lease_not_lapsed")
		}
		if cancelPending(&row) {
			// Its worker died after an operator cancelled it: end it here
			// instead of taking the step over.
			if _, err := r.finishCancel(ctx, row, "takeover"); err != nil && !errors.Is(err, store.ErrConflict) &&
				!errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		}
		if pausePending(&row) && !r.holdsChildren(&row) {
			// Its worker died after an operator asked to pause it: park it
			// here instead of taking the step over (not where it needs its
			// map's children: the takeover runs on, the request with it).
			if _, err := r.pauseLapsed(ctx, row, "takeover", ""); err != nil && !errors.Is(err, store.ErrConflict) &&
				!errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		}
	default:
		return nil // finished, failed, parked, paused
	}
	p, ok := r.deps.Registry.Version(row.PipelineID, row.PipelineVersion)
	if !ok {
		return r.versionUnavailable(ctx, row, now)
	}
	slotOK, acquired, err := r.takeSlot(ctx, &row, p)
	if err != nil || !slotOK {
		return err // the key is full: the row waits (WAITING_KEY)
	}
	takeover := row.Status == store.Running
	attempt, releases := row.Attempt, row.Releases
	if takeover {
		attempt, releases = attempt+1, 0 // the vanished worker's attempt counts
	}
	lease := now.Add(r.cfg.Lease)
	claimed, err := r.deps.Store.Claim(ctx, store.ClaimRequest{
		Key: key, ExpectVersion: row.Version, Owner: r.cfg.WorkerID,
		Now: now, DueBy: now.Add(tol), TakeoverBy: now.Add(-tol),
		LeaseUntil: lease, Attempt: attempt, Releases: releases,
		SweepAt: r.claimLook(&row, lease),
	})
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil // another worker won the race
	}
	if err != nil {
		return err
	}
	r.lookAfterClaim(ctx, &claimed)
	if acquired {
		claimed.SlotHeld = true // recorded by the step's commit
	}
	log := r.execLogger(&claimed).With(slog.String("transition_key", claimed.TransitionKey()))
	log.LogAttrs(ctx, slog.LevelInfo, "lease_claimed", slog.String("event", "lease_claimed"),
		slog.Int64("version", claimed.Version), slog.Bool("takeover", takeover))
	if takeover {
		r.notify(ctx, EventLeaseTakeover, claimed, SweepResult{})
	}
	t := &transition{r: r, row: claimed, log: log, p: p}
	for chained := 0; ; chained++ {
		t.chained = chained
		err := t.runTraced(ctx, takeover)
		if t.next == nil {
			return err
		}
		// The step's commit claimed the next step for this worker: run it
		// here, no work item and no claim write in between.
		next := *t.next
		log = r.execLogger(&next).With(slog.String("transition_key", next.TransitionKey()))
		log.LogAttrs(ctx, slog.LevelInfo, "lease_claimed", slog.String("event", "lease_claimed"),
			slog.Int64("version", next.Version), slog.Bool("takeover", false), slog.Bool("chained", true))
		t, takeover = &transition{r: r, row: next, log: log, p: p}, false
	}
}

// claimLook is the sweeper's next look a claim of row (its lease ending
// at lease) writes with itself: the lease's lapse, the tolerance and the
// grace, when the sweeper had re-dispatched the row (its looks spaced out
// for lost or queued work items, up to maxSweepSpacing) or will look
// later than that. The work item got through, so a worker dying right
// after the claim, or whose claim's answer was lost, is taken over as
// promptly as after a first claim. Zero on the happy path: the claim then
// writes no index key.
func (r *Runtime) claimLook(row *store.Execution, lease time.Time) time.Time {
	look := lease.Add(r.cfg.ClockSkewTolerance + r.cfg.SweepGrace)
	if row.SweepAt.IsZero() || (row.Sweeps == 0 && !row.SweepAt.After(look)) {
		return time.Time{}
	}
	return look
}

// lookAfterClaim pulls the sweeper's look in after a claim whose row the
// sweeper re-dispatched between this worker's read and its claim (the
// claim then moved nothing, see claimLook). One Reschedule, off the happy
// path; a failed one leaves the spaced look.
func (r *Runtime) lookAfterClaim(ctx context.Context, e *store.Execution) {
	look := r.claimLook(e, e.LeaseExpiresAt)
	if look.IsZero() {
		return
	}
	if err := r.deps.Store.Reschedule(ctx, e.Key(), e.SweepAt, look, 0); err == nil {
		e.SweepAt, e.Sweeps = look, 0
	}
}

// versionUnavailable handles a work item whose execution is bound to a
// pipeline definition this worker does not serve (an older or newer worker
// in a rolling deploy): it never runs the execution under another
// definition. The first time, it records the wait on the row (visible in
// status); it leaves the item to come back, maybe to a worker that serves
// the definition; once the version wait has passed it fails the execution
// with pipeline_version_unavailable (it dead-letters).
func (r *Runtime) versionUnavailable(ctx context.Context, row store.Execution, now time.Time) error {
	log := r.execLogger(&row).With(slog.String("pipeline_version", row.PipelineVersion))
	served := r.deps.Registry.Versions(row.PipelineID)
	msg := fmt.Sprintf("pipeline %s version %s is not served by worker %s (it serves %s)",
		row.PipelineID, row.PipelineVersion, r.cfg.WorkerID, describeVersions(served))
	since := row.VersionWaitSince
	waited := time.Duration(0)
	if !since.IsZero() {
		waited = now.Sub(since)
	}
	log.LogAttrs(ctx, slog.LevelWarn, "pipeline_version_unavailable", slog.String("event", "pipeline_version_unavailable"),
		slog.Any("served_versions", served), slog.Duration("waited", waited))
	r.notify(ctx, EventVersionUnavailable, row, SweepResult{})
	if !since.IsZero() && waited >= r.cfg.PipelineVersionWait {
		t := &transition{r: r, row: row, log: log, unleased: true}
		err := t.fail(ctx, pipeline.NonRetryable(CodePipelineVersionUnavailable,
			fmt.Errorf("%s; no worker served it within the version wait %s", msg, r.cfg.PipelineVersionWait)), pipeline.RetryPolicy{})
		return err
	}
	if since.IsZero() {
		next := row
		next.VersionWaitSince, next.UpdatedAt = now, now
		next.Error = &store.Failure{Code: CodePipelineVersionUnavailable, Message: store.Truncate(msg, store.MaxErrorMessage)}
		if _, err := r.deps.Store.Update(ctx, store.Guard{Key: row.Key(), Version: row.Version, LeaseOwner: row.LeaseOwner, KeepSweep: true}, next); err != nil &&
			!errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	// Come back soon while the wait is young, less often as it ages.
	delay := min(max(waited/4, time.Second), 30*time.Second)
	return dispatch.RetryAfter(delay, CodePipelineVersionUnavailable)
}

func describeVersions(vs []string) string {
	if len(vs) == 0 {
		return "no version of it"
	}
	return "versions " + strings.Join(vs, ", ")
}

// transition is one claimed step run.
type transition struct {
	r   *Runtime
	row store.Execution // as claimed: the commit guard's version
	log *slog.Logger
	p   *pipeline.Pipeline // the definition the execution is bound to
	// unleased: the row is not leased (the sweeper failing a timed-out
	// await, a worker ending a version wait); commits are guarded by the
	// version alone.
	unleased bool
	// committed is the row of this transition's commit, once it landed.
	committed *store.Execution
	// chained counts the steps this work item already ran before this one;
	// next, set by a commit that also claimed the next step, is that step's row.
	chained int
	next    *store.Execution
	// written is the payload this transition wrote for its commit (a
	// step's output), with the horizon the commit sets already.
	written payload.Ref
	// span is the attempt's span (nil when tracing is off), with the
	// step's name and the outcome it records (tracing.go).
	span     trace.Span
	stepName string
	stepErr  error
	stepCode string
}

func (t *transition) run(ctx context.Context, takeover bool) error {
	r, row := t.r, &t.row
	if row.StepIndex >= len(t.p.Steps) {
		return t.fail(ctx, pipeline.NonRetryable(CodePipelineVersionUnavailable,
			fmt.Errorf("pipeline %s version %s has no step %d", row.PipelineID, t.p.VersionID(), row.StepIndex)), pipeline.RetryPolicy{})
	}
	step := t.p.Steps[row.StepIndex]
	policy := r.cfg.Retry
	if step.Retry != nil {
		policy = *step.Retry
	}
	if takeover && row.Attempt > t.maxAttempt(policy) {
		return t.fail(ctx, &pipeline.Error{Code: CodeWorkerLost, Retryable: true,
			Err: errors.New("the worker running the last attempt lost its lease")}, policy)
	}
	src := row.Input
	if row.StepIndex > 0 || t.awaitCompleted() {
		src = row.Result
	}
	in, err := payload.Read(ctx, r.deps.Payloads, src)
	if errors.Is(err, payload.ErrCorrupt) || errors.Is(err, payload.ErrNotFound) {
		// Reading again cannot help: fail the step (it dead-letters).
		return t.fail(ctx, pipeline.NonRetryable(CodePayloadUnreadable, err), policy)
	}
	if err != nil {
		return t.release(ctx, err, "", policy)
	}
	if t.awaitCompleted() {
		// The await this step started was completed on time: its completion
		// (already stored as Result) is the step's output.
		return t.succeed(ctx, in, &row.Result, policy)
	}
	if step.IsSleep() {
		return t.sleep(ctx, step, in, src, policy)
	}
	if step.IsMap() {
		return t.mapStep(ctx, step, in, policy)
	}

	if ok, err := t.rateToken(ctx, step, takeover, policy); !ok {
		return err // released until its turn (or a backend failed: released)
	}
	out, cause, stepErr := t.invoke(ctx, step, in)
	t.traceOutcome(cause, stepErr)
	switch {
	case errors.Is(cause, ErrCancelled):
		t.log.LogAttrs(ctx, slog.LevelWarn, "step_cancelled", slog.String("event", "step_cancelled"))
		return nil // the execution was ended CANCELLED when the cancel was seen
	case cause != nil:
		t.log.LogAttrs(ctx, slog.LevelWarn, "lease_lost", slog.String("event", "lease_lost"))
		return nil // the new owner runs the step; nothing of ours may commit
	}
	if aw, ok := pipeline.AsAwait(stepErr); ok {
		// Checked before shutdown: the step has handed out its token.
		return t.park(ctx, aw, policy)
	}
	if ou, ok := pipeline.AsOutcomeUnknown(stepErr); ok {
		// Checked before shutdown: an unknown outcome is never handed back
		// for another automatic attempt.
		return t.outcomeUnknown(ctx, ou)
	}
	if hb, ok := pipeline.AsHandBack(stepErr); ok {
		return t.release(ctx, stepErr, hb.Code, policy)
	}
	if stepErr != nil && ctx.Err() != nil {
		return t.release(ctx, stepErr, "", policy) // shutting down: hand the step back
	}
	if stepErr != nil {
		return t.fail(ctx, stepErr, policy)
	}
	return t.succeed(ctx, out, nil, policy)
}

// awaitCompleted reports whether the current step is an await that was
// completed on time (the completion waits as Result for this commit).
func (t *transition) awaitCompleted() bool {
	a := t.row.Await
	return a != nil && a.Status == store.AwaitCompleted && a.StepIndex == t.row.StepIndex
}

// stepInfo is what the step (and the output publish) learn about the
// transition.
func (t *transition) stepInfo(step pipeline.Step) pipeline.StepInfo {
	r, row := t.r, &t.row
	info := pipeline.StepInfo{
		ExecutionID: row.ExecutionID, TenantID: row.TenantID, PipelineID: row.PipelineID,
		StepName: step.Name, StepIndex: row.StepIndex, Attempt: row.Attempt,
		TransitionKey: row.TransitionKey(), FencingToken: row.Version,
		IdempotencyKey: store.StepIdempotencyKey(row.TenantID, row.ExecutionID, step.Name),
		Logger:         t.log, Effects: r.deps.Effects, ExpiresAt: r.horizon(row.RecordsExpireAt, row.ExpiresAt),
		Rejects: r.deps.Rejects, Objects: r.deps.Objects, OutputBucket: r.cfg.OutputBucket,
	}
	if secret := r.cfg.AwaitSecret; secret != "" {
		info.ResumeToken = func(awaitID string) string {
			return await.Sign([]byte(secret), row.TenantID, row.ExecutionID, awaitID)
		}
	}
	return info
}

// invoke runs the step under a renewed lease. cause is set when the
// renewer cancelled the step's context: ErrLeaseLost when the lease was
// lost, ErrCancelled when the execution was cancelled (and already ended
// CANCELLED); nothing of the step's may then be committed.
func (t *transition) invoke(ctx context.Context, step pipeline.Step, in payload.Payload) (out payload.Payload, cause error, err error) {
	stepCtx, cancel := context.WithCancelCause(pipeline.WithPayloads(ctx, t.r.deps.Payloads))
	defer cancel(nil)
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t.renew(stepCtx, cancel, done)
	}()
	info := t.stepInfo(step)
	func() {
		defer func() {
			if v := recover(); v != nil {
				err = pipeline.Retryable(pipeline.CodeStepPanic, fmt.Errorf("step panicked: %v", v))
			}
		}()
		out, err = step.Run(stepCtx, info, in)
	}()
	close(done)
	<-renewed
	if c := context.Cause(stepCtx); errors.Is(c, ErrLeaseLost) || errors.Is(c, ErrCancelled) {
		cause = c
	}
	return out, cause, err
}

// renew extends the lease every third of its length until done closes.
// When the store says the lease is gone, or renewal keeps failing until
// the lease has lapsed, it cancels the step with cause ErrLeaseLost; when
// the refusal was an operator's cancel (the version moved under this
// worker's lease), it ends the execution CANCELLED first and cancels the
// step with cause ErrCancelled, so that a step that ignores its context
// does not hold the cancel up. The lease's lapse by this worker's clock
// cancels the step too, whether or not a renewal answers: a renewal that
// hangs (the store unreachable, the call never returning) must not let
// the step run on into another worker's takeover, which waits the
// clock-skew tolerance beyond the lapse.
func (t *transition) renew(ctx context.Context, cancel context.CancelCauseFunc, done <-chan struct{}) {
	r, row := t.r, &t.row
	tick := time.NewTicker(r.cfg.Lease / 3)
	defer tick.Stop()
	lapse := time.AfterFunc(row.LeaseExpiresAt.Sub(r.deps.Clock.Now()), func() {
		select {
		case <-done: // the step had ended: its commit's condition decides
		default:
			cancel(ErrLeaseLost)
		}
	})
	defer lapse.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// A tick that came due while the step was finishing: the step is
		// done (select picks among ready cases at random), renew no more.
		select {
		case <-done:
			return
		default:
		}
		now := r.deps.Clock.Now()
		until := now.Add(r.cfg.Lease)
		err := r.deps.Store.Renew(ctx, row.Key(), r.cfg.WorkerID, row.Version, until)
		switch {
		case err == nil:
			row.LeaseExpiresAt = until
			if lapse.Stop() { // not yet fired: the lapse moves with the lease
				lapse.Reset(until.Sub(r.deps.Clock.Now()))
			}
			t.log.LogAttrs(ctx, slog.LevelDebug, "lease_renewed", slog.String("event", "lease_renewed"),
				slog.Time("lease_expires_at", until))
		case errors.Is(err, store.ErrLeaseLost) && t.cancelRequested(ctx):
			cancel(ErrCancelled)
			return
		case errors.Is(err, store.ErrLeaseLost) && t.adoptPause(ctx):
			// An operator's pause request moved the version: the step goes
			// on under the new one (its commit parks it PAUSED).
			if r.deps.Store.Renew(ctx, row.Key(), r.cfg.WorkerID, row.Version, until) == nil {
				row.LeaseExpiresAt = until
				if lapse.Stop() {
					lapse.Reset(until.Sub(r.deps.Clock.Now()))
				}
			}
		case errors.Is(err, store.ErrLeaseLost) || !now.Before(row.LeaseExpiresAt):
			cancel(ErrLeaseLost)
			return
		default:
			t.log.LogAttrs(ctx, slog.LevelWarn, "lease_renew_failed", slog.String("event", "lease_renew_failed"),
				slog.String("error", err.Error()))
		}
	}
}

func (t *transition) maxAttempt(p pipeline.RetryPolicy) int {
	if t.row.MaxAttempt > 0 {
		return t.row.MaxAttempt
	}
	return p.MaxAttempts()
}

// succeed commits a successful step: advance to the next step (and
// dispatch it) or, after the last step, publish the pipeline's Output and
// finish the execution. stored, when set, is the output's payload
// reference already on the row (an await's completion).
func (t *transition) succeed(ctx context.Context, out payload.Payload, stored *payload.Ref, policy pipeline.RetryPolicy) error {
	r, row, p := t.r, &t.row, t.p
	last := row.StepIndex == len(p.Steps)-1
	if last && p.Output != nil {
		if err := p.Output.Publish(ctx, t.stepInfo(p.Steps[row.StepIndex]), out); err != nil {
			return t.fail(ctx, err, policy)
		}
	}
	now := r.deps.Clock.Now()
	expires := r.keepAlive(row, now)
	if last {
		expires = now.Add(r.cfg.ExecutionTTL)
	}
	var ref payload.Ref
	if stored != nil {
		ref = *stored
	} else {
		if len(out.Data) > pipeline.MaxOutputBytes {
			return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeOutputTooLarge,
				fmt.Errorf("step %s output is %d bytes, more than the %d a step may return", row.StepName, len(out.Data), pipeline.MaxOutputBytes)), policy)
		}
		slot := "result/" + row.TenantID + "/" + row.ExecutionID + "/" + strconv.Itoa(row.StepIndex)
		var err error
		ref, err = payload.Write(ctx, r.deps.Payloads, out, slot, r.cfg.InlineBudget, r.horizon(row.RecordsExpireAt, expires))
		if errors.Is(err, payload.ErrInvalid) {
			return t.fail(ctx, pipeline.NonRetryable(CodeOutputUnstorable, fmt.Errorf("step %s output: %w", row.StepName, err)), policy)
		}
		if err != nil {
			return t.release(ctx, err, "", policy)
		}
	}
	next := t.base(now)
	next.Result = ref
	chain := !last && t.mayChain(ctx)
	t.written = ref
	switch {
	case last:
		next.Status, next.ExpiresAt = store.Succeeded, expires
		next.SweepAt, next.Sweeps = time.Time{}, 0 // out of the sweep index
	default:
		next.Status, next.StepIndex, next.StepName = store.Queued, row.StepIndex+1, p.Steps[row.StepIndex+1].Name
		next.Attempt, next.MaxAttempt, next.NextDueAt = 1, 0, now
		if chain {
			// Commit this step and claim the next in one conditional write.
			next.Status, next.LeaseOwner, next.LeaseExpiresAt = store.Running, r.cfg.WorkerID, now.Add(r.cfg.Lease)
		}
	}
	keepSweep := !last && t.sweepKept(&next, now)
	got, err := t.commit(ctx, next, keepSweep, slog.Int64("result_bytes", ref.Length), slog.Bool("chained", chain))
	if err != nil || got == nil {
		return err
	}
	if chain && got.Status == store.Running {
		t.next = got
		return nil
	}
	if last {
		r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "execution_succeeded", slog.String("event", "execution_succeeded"),
			slog.Duration("latency", now.Sub(got.CreatedAt)))
		r.notify(ctx, EventSucceeded, *got, SweepResult{})
		return nil
	}
	r.handOver(ctx, got, 0)
	return nil
}

// sleep commits a durable sleep step: the next step is scheduled, with
// this step's input as its own (the stored reference, no payload write),
// at the wake-up time, and handed to the queue with that delay (a queue
// that caps delays hands a not-due item back until it is due; the sweep
// look at a grace after the wake-up finds a lost one). One write, the
// step's commit; the row is kept a retention past the wake-up.
func (t *transition) sleep(ctx context.Context, step pipeline.Step, in payload.Payload, src payload.Ref, policy pipeline.RetryPolicy) error {
	r, row := t.r, &t.row
	now := r.deps.Clock.Now()
	wake, err := step.Wake(ctx, t.stepInfo(step), in, now)
	if err != nil {
		return t.fail(ctx, err, policy)
	}
	if wake.After(now.Add(r.cfg.ExecutionTTL)) {
		return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeSleepBeyondRetention,
			fmt.Errorf("step %s would sleep until %s, beyond the execution retention %s (pipeline.orchestrator.execution-ttl-days)",
				step.Name, wake.UTC().Format(time.RFC3339), r.cfg.ExecutionTTL)), policy)
	}
	wake = maxTime(wake, now)
	next := t.base(now)
	next.Result = src
	next.Status, next.StepIndex, next.StepName = store.Queued, row.StepIndex+1, t.p.Steps[row.StepIndex+1].Name
	next.Attempt, next.MaxAttempt, next.NextDueAt = 1, 0, wake
	next.SweepAt, next.Sweeps = r.firstLook(wake), 0
	next.ExpiresAt = maxTime(next.ExpiresAt, wake.Add(r.cfg.ExecutionTTL))
	got, err := t.commit(ctx, next, false, slog.Time("wake_at", wake))
	if err != nil || got == nil {
		return err
	}
	r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "sleep_started", slog.String("event", "sleep_started"),
		slog.String("sleep_step", step.Name), slog.Time("wake_at", wake), slog.Duration("sleep", wake.Sub(now)))
	r.handOver(ctx, got, wake.Sub(now))
	return nil
}

// sweepKept reports whether a hand-over to the next step may leave the
// sweep index as stored (no index write: the happy path): the sweeper has
// re-dispatched nothing of this execution since it last made progress,
// and its next look is no later than this worker's lease allows (a lapsed
// lease, the tolerance and the grace). Otherwise next's look is pulled in
// to what the next step needs (a grace after it is due, or after the
// chained claim's lease) and the count of re-dispatches reset, so that a
// work item lost after progress waits no longer than the first one did,
// whatever the execution lived through before.
func (t *transition) sweepKept(next *store.Execution, now time.Time) bool {
	r, row := t.r, &t.row
	slack := r.cfg.ClockSkewTolerance + r.cfg.SweepGrace
	if row.Sweeps == 0 && !row.SweepAt.IsZero() && !row.SweepAt.After(row.LeaseExpiresAt.Add(slack)) {
		return true
	}
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	if next.Status == store.Running {
		next.SweepAt = next.LeaseExpiresAt.Add(slack)
	}
	return false
}

// mayChain reports whether this worker may run the next step itself right
// after this one's commit (ChainMaxSteps not reached, not shutting down,
// and, under a deadline such as a Lambda invocation's, at least a lease of
// time left for it: the rule a worker applies before every step).
func (t *transition) mayChain(ctx context.Context) bool {
	r := t.r
	if t.chained+1 >= r.cfg.ChainMaxSteps || ctx.Err() != nil || r.draining.Load() {
		return false
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < r.cfg.Lease {
		return false
	}
	return true
}

// handOver dispatches the next transition of a row just committed. If the
// send fails, the sweeper's next look at the row is pulled in to a grace
// from now (the hand-over itself left the sweep index alone).
func (r *Runtime) handOver(ctx context.Context, e *store.Execution, delay time.Duration) {
	if e.Status == store.Paused {
		return // parked by a pause request: its resume dispatches it
	}
	if r.dispatch(ctx, e, delay) {
		return
	}
	now := r.deps.Clock.Now()
	if look := r.firstLook(now.Add(delay)); e.SweepAt.IsZero() || e.SweepAt.After(look) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DispatchTimeout)
		defer cancel()
		_ = r.deps.Store.Reschedule(rctx, e.Key(), e.SweepAt, look, e.Sweeps) // a conflict means it moved anyway
	}
}

// fail commits a failed step: a retry when the error is retryable and
// attempts remain, otherwise a terminal failure and its dead letter.
func (t *transition) fail(ctx context.Context, stepErr error, policy pipeline.RetryPolicy) error {
	r, row := t.r, &t.row
	code, msg, retryable := pipeline.Classify(stepErr)
	now := r.deps.Clock.Now()
	next := t.base(now)
	next.Error = &store.Failure{Code: code, Message: store.Truncate(msg, store.MaxErrorMessage)}
	if retryable && row.Attempt < t.maxAttempt(policy) {
		delay := policy.Backoff(row.Attempt)
		next.Status, next.Attempt, next.Releases, next.NextDueAt = store.WaitRetry, row.Attempt+1, 0, now.Add(delay)
		next.SweepAt, next.Sweeps = r.firstLook(next.NextDueAt), 0
		// A row waiting for its retry is live: kept a retention past the
		// retry time, however long the delay.
		next.ExpiresAt = maxTime(next.ExpiresAt, next.NextDueAt.Add(r.cfg.ExecutionTTL))
		got, err := t.commit(ctx, next, false, slog.String("error_code", code))
		if err != nil || got == nil {
			return err
		}
		r.execLogger(got).LogAttrs(ctx, slog.LevelWarn, "retry_scheduled", slog.String("event", "retry_scheduled"),
			slog.String("error_code", code), slog.String("error", next.Error.Message), slog.Duration("delay", delay))
		r.notify(ctx, EventRetryScheduled, *got, SweepResult{})
		r.handOver(ctx, got, delay)
		return nil
	}
	if _, ok := pipeline.AsRejected(stepErr); ok {
		return t.rejected(ctx, next)
	}
	next.Error.TerminalReason = store.ReasonNonRetryable
	if retryable {
		next.Error.TerminalReason = store.ReasonRetryExhausted
	}
	// FAILED with a pending publish, in the sweep index: if this process
	// dies before the envelope lands, the sweeper publishes it.
	next.Status, next.DLQPending, next.ExpiresAt = store.Failed, true, now.Add(r.cfg.ExecutionTTL)
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	got, err := t.commit(ctx, next, false, slog.String("error_code", code))
	if err != nil || got == nil {
		return err
	}
	r.deadLetter(ctx, *got)
	return nil
}

// rejected ends the execution as a rejected item: FAILED with reason
// rejected, out of the sweep index, no dead letter (the step published
// the item to the Item Reject Sink before returning).
func (t *transition) rejected(ctx context.Context, next store.Execution) error {
	r := t.r
	now := r.deps.Clock.Now()
	next.Error.Code, next.Error.TerminalReason = pipeline.CodeItemRejected, store.ReasonRejected
	next.Status, next.DLQPending, next.NextDueAt, next.ExpiresAt = store.Failed, false, time.Time{}, now.Add(r.cfg.ExecutionTTL)
	next.SweepAt, next.Sweeps = time.Time{}, 0
	got, err := t.commit(ctx, next, false, slog.String("error_code", pipeline.CodeItemRejected))
	if err != nil || got == nil {
		return err
	}
	r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "execution_rejected", slog.String("event", "execution_rejected"),
		slog.String("error", got.Error.Message))
	r.notify(ctx, EventRejected, *got, SweepResult{})
	return nil
}

// outcomeUnknown parks the execution as REMOTE_OUTCOME_UNKNOWN: the remote
// call reached its deadline (or was cut short) and nothing says whether
// the remote worker stopped. The row leaves the sweep index (no sweep,
// claim or retry) until an operator re-drives it with
// confirmedNoRemoteEffect.
func (t *transition) outcomeUnknown(ctx context.Context, ou *pipeline.OutcomeUnknownError) error {
	r := t.r
	now := r.deps.Clock.Now()
	next := t.base(now)
	next.Status = store.RemoteOutcomeUnknown
	next.SweepAt, next.Sweeps = time.Time{}, 0
	next.Error = &store.Failure{Code: pipeline.CodeRemoteOutcomeUnknown,
		Message: store.Truncate(ou.Error(), store.MaxErrorMessage)}
	got, err := t.commit(ctx, next, false, slog.String("error_code", pipeline.CodeRemoteOutcomeUnknown))
	if err != nil || got == nil {
		return err
	}
	r.execLogger(got).LogAttrs(ctx, slog.LevelError, "remote_transition_outcome_unknown",
		slog.String("event", "remote_transition_outcome_unknown"),
		slog.String("transition_key", t.row.TransitionKey()),
		slog.String("protocol", ou.Protocol), slog.String("target", ou.Target),
		slog.Int64("elapsed_ms", ou.Elapsed.Milliseconds()), slog.Int64("deadline_ms", ou.Deadline.Milliseconds()),
		slog.String("decision", "automatic_retry_suppressed"))
	r.notify(ctx, EventOutcomeUnknown, *got, SweepResult{})
	return nil
}

// base is the row after this transition, before the outcome is filled in:
// lease released, not due, error cleared, transition key recorded, the
// expiry kept a retention ahead, the per-attempt counters reset.
func (t *transition) base(now time.Time) store.Execution {
	next := t.row
	next.LeaseOwner, next.LeaseExpiresAt, next.NextDueAt = "", time.Time{}, time.Time{}
	next.Error, next.DLQPending = nil, false
	next.LastTransitionKey = t.row.TransitionKey()
	next.UpdatedAt = now
	next.ExpiresAt = t.r.keepAlive(&t.row, now)
	next.Releases, next.VersionWaitSince = 0, time.Time{}
	next.RateReservedAt, next.RateReservedVersion = time.Time{}, 0 // spent by the step
	return next
}

// Commit retry bounds: a commit whose write failed transiently (throttling,
// a 5xx, a timeout after the SDK's own retries) is tried again, its
// outcome first resolved by re-reading the row, for at most this many
// writes and never past the lease.
const (
	commitAttempts   = 8
	commitBackoff    = 50 * time.Millisecond
	commitBackoffMax = 2 * time.Second
)

// commit writes next under this transition's lease (or, unleased, under
// its version). keepSweep leaves the sweep index as stored (a hand-over).
// A lost lease is not an error (got is nil): another worker owns the
// execution now. A transient failure is retried; when a write's outcome
// is unknown, the row is read back: if the write landed, that is the
// commit. The commit runs on a context that a shutdown does not cut
// short, so that a finished step is not handed back for nothing.
func (t *transition) commit(ctx context.Context, next store.Execution, keepSweep bool, attrs ...slog.Attr) (*store.Execution, error) {
	if t.span != nil {
		return t.tracedCommit(ctx, func(ctx context.Context) (*store.Execution, error) {
			return t.commitRow(ctx, next, keepSweep, attrs...)
		})
	}
	return t.commitRow(ctx, next, keepSweep, attrs...)
}

func (t *transition) commitRow(ctx context.Context, next store.Execution, keepSweep bool, attrs ...slog.Attr) (*store.Execution, error) {
	r := t.r
	guard := store.Guard{Key: t.row.Key(), Version: t.row.Version, LeaseOwner: r.cfg.WorkerID, KeepSweep: keepSweep}
	if t.unleased {
		guard.LeaseOwner = t.row.LeaseOwner
	}
	deadline := r.deps.Clock.Now().Add(10 * time.Second)
	if !t.unleased {
		deadline = t.row.LeaseExpiresAt.Add(-r.cfg.ClockSkewTolerance)
	}
	// A wall-clock bound besides the attempts: a lease and some.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease+5*time.Second)
	defer cancel()
	outcome := next // before a pause request parks it (pauseOnCommit)
	if !t.unleased && t.pauseOnCommit(&next) {
		guard.KeepSweep = false
	}
	if err := r.keepRecords(cctx, &next, t.keptWritten(&next)...); err != nil {
		// Nothing is written: the step is tried again, as after a failed commit.
		return nil, fmt.Errorf("engine: commit %s: %w", t.row.TransitionKey(), err)
	}
	backoff := commitBackoff
	for attempt := 1; ; attempt++ {
		got, err := r.deps.Store.Update(cctx, guard, next)
		if err == nil {
			return t.landedAs(ctx, got, attrs), nil
		}
		refused := errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict)
		if !refused && !transient(err) {
			return nil, fmt.Errorf("engine: commit %s: %w", t.row.TransitionKey(), err)
		}
		// The outcome of a write is unknown (it failed transiently), or a
		// write was refused, maybe because an earlier try of it landed (ours,
		// or the backend client's own retry of one whose answer was lost):
		// read the row back to tell.
		row, gerr := r.deps.Store.Get(cctx, guard.Key)
		switch {
		case gerr == nil && landed(row, guard, next):
			t.log.LogAttrs(ctx, slog.LevelInfo, "commit_outcome_resolved", slog.String("event", "commit_outcome_resolved"),
				slog.Int("writes", attempt))
			return t.landedAs(ctx, row, attrs), nil
		case gerr == nil && cancelPending(&row) && row.LeaseOwner == r.cfg.WorkerID && !t.unleased:
			// An operator cancelled the execution while the step ran: its
			// outcome is dropped and the execution ends CANCELLED.
			t.log.LogAttrs(ctx, slog.LevelWarn, "commit_refused_cancelled", slog.String("event", "commit_refused_cancelled"))
			if _, err := r.finishCancel(ctx, row, "worker"); err != nil {
				t.log.LogAttrs(ctx, slog.LevelWarn, "cancel_finish_failed", slog.String("event", "cancel_finish_failed"), slog.String("error", err.Error()))
			}
			return nil, nil
		case gerr == nil && !t.unleased && adoptable(&row, &t.row, r.cfg.WorkerID):
			// An operator asked to pause (or withdrew the ask) while the step
			// ran: write the outcome again under the new version, parked
			// PAUSED when asked.
			t.row.Version, t.row.PauseReason, t.row.PauseRequestedAt = row.Version, row.PauseReason, row.PauseRequestedAt
			guard.Version, guard.KeepSweep, next = row.Version, keepSweep, outcome
			if t.pauseOnCommit(&next) {
				guard.KeepSweep = false
			}
			if err := r.keepRecords(cctx, &next, t.keptWritten(&next)...); err != nil {
				return nil, fmt.Errorf("engine: commit %s: %w", t.row.TransitionKey(), err)
			}
			t.log.LogAttrs(ctx, slog.LevelInfo, "pause_request_seen", slog.String("event", "pause_request_seen"),
				slog.String("phase", "commit"), slog.Int64("version", row.Version))
			continue
		case gerr == nil && (row.Version != guard.Version || row.LeaseOwner != guard.LeaseOwner):
			t.log.LogAttrs(ctx, slog.LevelWarn, "lease_lost", slog.String("event", "lease_lost"), slog.String("phase", "commit"))
			return nil, nil
		case errors.Is(gerr, store.ErrNotFound):
			return nil, nil
		}
		if attempt >= commitAttempts || !r.deps.Clock.Now().Add(backoff).Before(deadline) {
			t.log.LogAttrs(ctx, slog.LevelError, "commit_failed", slog.String("event", "commit_failed"),
				slog.Int("writes", attempt), slog.String("error", err.Error()))
			return nil, fmt.Errorf("engine: commit %s after %d writes: %w", t.row.TransitionKey(), attempt, err)
		}
		t.log.LogAttrs(ctx, slog.LevelWarn, "commit_retry", slog.String("event", "commit_retry"),
			slog.Int("writes", attempt), slog.String("error", err.Error()))
		if sleepCtx(cctx, r.jitter(backoff)) != nil {
			return nil, fmt.Errorf("engine: commit %s: %w", t.row.TransitionKey(), err)
		}
		backoff = min(2*backoff, commitBackoffMax)
	}
}

// landedAs logs, records and reports a landed commit.
func (t *transition) landedAs(ctx context.Context, got store.Execution, attrs []slog.Attr) *store.Execution {
	t.log.LogAttrs(ctx, slog.LevelInfo, "transition_committed", append([]slog.Attr{slog.String("event", "transition_committed"),
		slog.String("status", string(got.Status)), slog.Int64("version", got.Version)}, attrs...)...)
	t.r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
	t.committed = &got
	if got.Status == store.Paused {
		t.r.logPaused(ctx, got, "worker", "")
	}
	if got.Parent != nil && got.Status.Terminal() {
		t.r.childEnded(ctx, got)
	}
	t.r.keyEnded(ctx, got)
	return &got
}

// landed reports whether row is the result of the write of next under
// guard: the version moved by exactly one and the row carries next's
// transition, status and update time.
func landed(row store.Execution, guard store.Guard, next store.Execution) bool {
	return row.Version == guard.Version+1 && row.LastTransitionKey == next.LastTransitionKey &&
		row.Status == next.Status && row.UpdatedAt.UnixMilli() == next.UpdatedAt.UnixMilli()
}

// transient reports whether a store error may pass if the call is repeated.
func transient(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// release hands the claimed step back unfinished (QUEUED, due now, same
// attempt) after a backend failure, a shutdown or a step's hand-back, so
// that it runs again without using up a retry. The cause is returned for
// redelivery. Releases are counted on the row: at the release limit the
// hand-back becomes a failed attempt (code, or release_limit_exceeded,
// retryable under the step's policy), so a release can never repeat
// without bound.
func (t *transition) release(ctx context.Context, cause error, code string, policy pipeline.RetryPolicy) error {
	r := t.r
	if t.row.Releases >= r.cfg.ReleaseLimit {
		if code == "" {
			code = CodeReleaseLimit
		}
		t.log.LogAttrs(ctx, slog.LevelWarn, "release_limit_reached", slog.String("event", "release_limit_reached"),
			slog.Int("releases", t.row.Releases+1), slog.String("cause", cause.Error()))
		return t.fail(ctx, pipeline.Retryable(code, fmt.Errorf("handed back %d times unfinished (release limit %d); last cause: %w",
			t.row.Releases+1, r.cfg.ReleaseLimit, cause)), policy)
	}
	now := r.deps.Clock.Now()
	next := t.row
	next.Status, next.LeaseOwner, next.LeaseExpiresAt, next.NextDueAt, next.UpdatedAt = store.Queued, "", time.Time{}, now, now
	next.Releases = t.row.Releases + 1
	// The step may have called its downstream: a reservation is spent.
	next.RateReservedAt, next.RateReservedVersion = time.Time{}, 0
	_, landed, cancelled := t.handBack(ctx, next, true)
	if cancelled {
		return nil // cancelled meanwhile: ended CANCELLED, nothing to hand back
	}
	if landed {
		t.log.LogAttrs(ctx, slog.LevelInfo, "lease_released", slog.String("event", "lease_released"),
			slog.String("cause", cause.Error()), slog.Int("releases", next.Releases))
	}
	return cause
}

// handBack writes next, the claimed row handed back unfinished (QUEUED),
// under this worker's lease: parked PAUSED instead when a pause was
// requested of this attempt; keepSweep leaves the sweep index as stored.
// It reports the row written and whether the write landed, or that it
// was refused because the execution was cancelled meanwhile (ended
// CANCELLED: nothing to hand back).
func (t *transition) handBack(ctx context.Context, next store.Execution, keepSweep bool) (got store.Execution, landed, cancelled bool) {
	r := t.r
	// The caller's context may be the one that ended; releasing must not.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	write := func() error {
		// A pause requested of this attempt parks the handed-back step PAUSED.
		n, keep := next, keepSweep
		if t.pauseOnCommit(&n) {
			keep = false
		}
		var err error
		got, err = r.update(rctx, store.Guard{Key: t.row.Key(), Version: t.row.Version, LeaseOwner: r.cfg.WorkerID, KeepSweep: keep}, n)
		if err == nil && got.Status == store.Paused {
			r.logPaused(ctx, got, "worker", "")
		}
		return err
	}
	err := write()
	if errors.Is(err, store.ErrLeaseLost) && t.adoptPause(ctx) {
		err = write() // paused (or the pause withdrawn) meanwhile: hand back under the new version
	}
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) && t.cancelRequested(ctx) {
			return got, false, true
		}
		t.log.LogAttrs(ctx, slog.LevelWarn, "lease_release_failed", slog.String("event", "lease_release_failed"), slog.String("error", err.Error()))
		return got, false, false
	}
	return got, true, false
}

// deadLetter publishes the envelope of a FAILED execution and marks it
// DLQ. If the publish fails the row stays FAILED with DLQPending, in the
// sweep index, and the sweeper tries again (spacing its tries).
func (r *Runtime) deadLetter(ctx context.Context, e store.Execution) bool {
	log := r.execLogger(&e)
	env := deadletter.Envelope{
		TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID,
		StepIndex: e.StepIndex, StepName: e.StepName, TransitionKey: e.LastTransitionKey,
		RetriesObserved: e.Attempt - 1, FailedAt: e.UpdatedAt,
	}
	if e.Error != nil {
		env.TerminalReason, env.ErrorCode, env.ErrorMessage = e.Error.TerminalReason, e.Error.Code, e.Error.Message
	}
	if err := r.deps.DeadLetter.Publish(ctx, env); err != nil {
		log.LogAttrs(ctx, slog.LevelError, "dlq_publish_failed", slog.String("event", "dlq_publish_failed"), slog.String("error", err.Error()))
		return false
	}
	_, err := r.markDeadLettered(ctx, e)
	if errors.Is(err, store.ErrConflict) {
		// The dead-letter consumer may have marked it first (it reads the
		// envelope just published): that is success, not a failure.
		if now, gerr := r.deps.Store.Get(ctx, e.Key()); gerr == nil && now.Status == store.DLQ && now.LastTransitionKey == e.LastTransitionKey {
			return true
		}
	}
	if err != nil {
		// Published but not marked: the sweeper (or the dlq consumer)
		// marks it later; the envelope may be published again.
		log.LogAttrs(ctx, slog.LevelWarn, "dlq_mark_failed", slog.String("event", "dlq_mark_failed"), slog.String("error", err.Error()))
		return false
	}
	return true
}

// markDeadLettered moves a FAILED row whose envelope is published to DLQ
// (out of the sweep index; retention from now).
func (r *Runtime) markDeadLettered(ctx context.Context, e store.Execution) (store.Execution, error) {
	now := r.deps.Clock.Now()
	next := e
	next.Status, next.DLQPending, next.NextDueAt, next.UpdatedAt = store.DLQ, false, time.Time{}, now
	next.SweepAt, next.Sweeps, next.ExpiresAt = time.Time{}, 0, now.Add(r.cfg.ExecutionTTL)
	got, err := r.update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
	if err != nil {
		return e, err
	}
	log := r.execLogger(&got)
	var reason, code string
	if got.Error != nil {
		reason, code = got.Error.TerminalReason, got.Error.Code
	}
	log.LogAttrs(ctx, slog.LevelError, "execution_dead_lettered", slog.String("event", "execution_dead_lettered"),
		slog.String("terminal_reason", reason), slog.String("error_code", code), slog.Int("retries_observed", got.Attempt-1))
	r.notify(ctx, EventDeadLettered, got, SweepResult{})
	return got, nil
}

// ConfirmDeadLetter is called by the dead-letter consumer for an envelope
// it has recorded: if the execution is still FAILED with its publish
// pending (the publisher crashed before marking it), it becomes DLQ. It is
// idempotent: an execution already DLQ, re-driven, or gone is left alone.
// It reports whether it changed the row.
func (r *Runtime) ConfirmDeadLetter(ctx context.Context, env deadletter.Envelope) (bool, error) {
	e, err := r.deps.Store.Get(ctx, store.Key{TenantID: env.TenantID, ExecutionID: env.ExecutionID})
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.Status != store.Failed || !e.DLQPending || e.LastTransitionKey != env.TransitionKey {
		return false, nil
	}
	_, err = r.markDeadLettered(ctx, e)
	if errors.Is(err, store.ErrConflict) {
		return false, nil // changed meanwhile (marked, or re-driven)
	}
	return err == nil, err
}
