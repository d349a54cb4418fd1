package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/execution"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/retry"
	"github.com/qasync/qasync/shared/store"
)

// Error codes the runtime itself assigns.
const (
	// CodeWorkerLost: the previous attempt's worker lost its lease (crash,
	// timeout) and no attempt was left for a takeover.
	CodeWorkerLost = "worker_lost"
	// CodePipelineNotRegistered: this binary does not serve the pipeline or
	// the step index is out of range.
	CodePipelineNotRegistered = "pipeline_not_registered"
	// CodePayloadUnreadable: the step's input could not be read or verified.
	CodePayloadUnreadable = "payload_unreadable"
)

// Process runs one transition for a delivered work item: read the row,
// claim its lease, run the current step while renewing the lease, and
// commit the outcome. It is the dispatch.Handler of every transport.
//
// A nil return means the work item is done with: the transition was
// committed, or there was nothing to do (duplicate delivery, lost claim,
// not yet due, lost lease). An error means a backend failed before the
// outcome was recorded; the transport should deliver the item again.
func (r *Runtime) Process(ctx context.Context, item dispatch.WorkItem) error {
	key := execution.Key{TenantID: item.TenantID, ExecutionID: item.ExecutionID}
	row, err := r.Store.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		r.Logger.LogAttrs(ctx, slog.LevelWarn, "work_item_orphaned", slog.String("event", "work_item_orphaned"),
			slog.String("execution_id", key.ExecutionID), slog.String("tenant", key.TenantID))
		return nil
	}
	if err != nil {
		return err
	}
	now := r.Clock.Now()
	if !row.Status.Claimable() || !row.Due(now) {
		return nil // duplicate, finished, parked, leased elsewhere or not yet due
	}
	attempt, takeover := row.Attempt, row.Status == execution.Running
	if takeover {
		attempt++ // the previous attempt's worker vanished: that attempt counts
	}
	claimed, err := r.Store.Claim(ctx, store.ClaimRequest{
		Key: key, ExpectVersion: row.Version, Owner: r.cfg.WorkerID,
		Now: now, LeaseUntil: now.Add(r.cfg.Lease), Attempt: attempt,
	})
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil // another worker won the race
	}
	if err != nil {
		return err
	}
	log := r.execLogger(&claimed).With(slog.String("transition_key", claimed.TransitionKey()))
	log.LogAttrs(ctx, slog.LevelInfo, "lease_claimed", slog.String("event", "lease_claimed"),
		slog.Int64("version", claimed.Version), slog.Bool("takeover", takeover))
	if takeover {
		r.notify(ctx, EventLeaseTakeover, claimed, SweepResult{})
	}
	t := &transition{r: r, row: claimed, log: log}
	return t.run(ctx, takeover)
}

// transition is one claimed step run.
type transition struct {
	r   *Runtime
	row execution.Execution // as claimed: the commit guard's version
	log *slog.Logger
	// unleased: the row is not leased (the sweeper failing a timed-out
	// await); commits are guarded by the version alone.
	unleased bool
}

func (t *transition) run(ctx context.Context, takeover bool) error {
	r, row := t.r, &t.row
	p, ok := r.Registry.Get(row.PipelineID)
	if !ok || row.StepIndex >= len(p.Steps) {
		return t.fail(ctx, &pipeline.Error{Code: CodePipelineNotRegistered,
			Err: fmt.Errorf("pipeline %s step %d is not served by this worker", row.PipelineID, row.StepIndex)}, retry.Policy{})
	}
	step := p.Steps[row.StepIndex]
	policy := r.cfg.Retry
	if step.Retry != nil {
		policy = *step.Retry
	}
	if takeover && row.Attempt > t.maxAttempt(policy) {
		return t.fail(ctx, &pipeline.Error{Code: CodeWorkerLost, Retryable: true,
			Err: errors.New("the worker running the last attempt lost its lease")}, policy)
	}
	src := row.Input
	if row.StepIndex > 0 {
		src = row.Result
	}
	in, err := payload.Read(ctx, r.Payloads, src)
	if errors.Is(err, payload.ErrCorrupt) || errors.Is(err, payload.ErrNotFound) {
		// Reading again cannot help: fail the step (it dead-letters).
		return t.fail(ctx, pipeline.NonRetryable(CodePayloadUnreadable, err), policy)
	}
	if err != nil {
		return t.release(ctx, err)
	}

	out, lost, stepErr := t.invoke(ctx, step, in)
	if lost {
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
	if stepErr != nil && ctx.Err() != nil {
		return t.release(ctx, stepErr) // shutting down: hand the step back untouched
	}
	if stepErr != nil {
		return t.fail(ctx, stepErr, policy)
	}
	return t.succeed(ctx, p, out)
}

// invoke runs the step under a renewed lease. lost reports that the lease
// was lost while it ran; the step's context was then cancelled with cause
// ErrLeaseLost.
func (t *transition) invoke(ctx context.Context, step pipeline.Step, in payload.Payload) (out payload.Payload, lost bool, err error) {
	row := &t.row
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t.renew(stepCtx, cancel, done)
	}()
	info := pipeline.StepInfo{
		ExecutionID: row.ExecutionID, TenantID: row.TenantID, PipelineID: row.PipelineID,
		StepName: step.Name, StepIndex: row.StepIndex, Attempt: row.Attempt,
		TransitionKey: row.TransitionKey(), FencingToken: row.Version,
		IdempotencyKey: execution.StepIdempotencyKey(row.TenantID, row.ExecutionID, row.StepIndex),
		Logger:         t.log, Effects: t.r.Effects, ExpiresAt: row.ExpiresAt,
		Rejects: t.r.Rejects, Objects: t.r.Objects, OutputBucket: t.r.cfg.OutputBucket,
	}
	if secret := t.r.cfg.AwaitSecret; secret != "" {
		info.ResumeToken = func(awaitID string) string {
			return await.Sign([]byte(secret), row.TenantID, row.ExecutionID, awaitID)
		}
	}
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
	return out, errors.Is(context.Cause(stepCtx), ErrLeaseLost), err
}

// renew extends the lease every third of its length until done closes.
// When the store says the lease is gone, or renewal keeps failing until
// the lease has lapsed, it cancels the step with cause ErrLeaseLost.
func (t *transition) renew(ctx context.Context, cancel context.CancelCauseFunc, done <-chan struct{}) {
	r, row := t.r, &t.row
	tick := time.NewTicker(r.cfg.Lease / 3)
	defer tick.Stop()
	expires := row.LeaseExpiresAt
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := r.Clock.Now()
		until := now.Add(r.cfg.Lease)
		err := r.Store.Renew(ctx, row.Key(), r.cfg.WorkerID, row.Version, until)
		switch {
		case err == nil:
			expires = until
			t.log.LogAttrs(ctx, slog.LevelDebug, "lease_renewed", slog.String("event", "lease_renewed"),
				slog.Time("lease_expires_at", until))
		case errors.Is(err, store.ErrLeaseLost) || !now.Before(expires):
			cancel(ErrLeaseLost)
			return
		default:
			t.log.LogAttrs(ctx, slog.LevelWarn, "lease_renew_failed", slog.String("event", "lease_renew_failed"),
				slog.String("error", err.Error()))
		}
	}
}

func (t *transition) maxAttempt(p retry.Policy) int {
	if t.row.MaxAttempt > 0 {
		return t.row.MaxAttempt
	}
	return p.MaxAttempts()
}

// succeed commits a successful step: advance to the next step (and
// dispatch it) or finish the execution.
func (t *transition) succeed(ctx context.Context, p *pipeline.Pipeline, out payload.Payload) error {
	r, row := t.r, &t.row
	now := r.Clock.Now()
	slot := "result/" + row.TenantID + "/" + row.ExecutionID + "/" + strconv.Itoa(row.StepIndex)
	ref, err := payload.Write(ctx, r.Payloads, out, slot, r.cfg.InlineBudget, row.ExpiresAt)
	if err != nil {
		return t.release(ctx, err)
	}
	next := t.base(now)
	next.Result = ref
	last := row.StepIndex == len(p.Steps)-1
	if last {
		next.Status = execution.Succeeded
	} else {
		next.Status, next.StepIndex, next.StepName = execution.Queued, row.StepIndex+1, p.Steps[row.StepIndex+1].Name
		next.Attempt, next.MaxAttempt, next.NextDueAt = 1, 0, now
	}
	got, err := t.commit(ctx, next, slog.Int64("result_bytes", ref.Length))
	if err != nil || got == nil {
		return err
	}
	if last {
		r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "execution_succeeded", slog.String("event", "execution_succeeded"),
			slog.Duration("latency", now.Sub(got.CreatedAt)))
		r.notify(ctx, EventSucceeded, *got, SweepResult{})
		return nil
	}
	r.dispatch(ctx, got, 0)
	return nil
}

// fail commits a failed step: a retry when the error is retryable and
// attempts remain, otherwise a terminal failure and its dead letter.
func (t *transition) fail(ctx context.Context, stepErr error, policy retry.Policy) error {
	r, row := t.r, &t.row
	code, msg, retryable := pipeline.Classify(stepErr)
	now := r.Clock.Now()
	next := t.base(now)
	next.Error = &execution.Failure{Code: code, Message: execution.Truncate(msg, execution.MaxErrorMessage)}
	if retryable && row.Attempt < t.maxAttempt(policy) {
		delay := policy.Backoff(row.Attempt)
		next.Status, next.Attempt, next.NextDueAt = execution.WaitRetry, row.Attempt+1, now.Add(delay)
		got, err := t.commit(ctx, next, slog.String("error_code", code))
		if err != nil || got == nil {
			return err
		}
		r.execLogger(got).LogAttrs(ctx, slog.LevelWarn, "retry_scheduled", slog.String("event", "retry_scheduled"),
			slog.String("error_code", code), slog.String("error", next.Error.Message), slog.Duration("delay", delay))
		r.notify(ctx, EventRetryScheduled, *got, SweepResult{})
		r.dispatch(ctx, got, delay)
		return nil
	}
	next.Error.TerminalReason = execution.ReasonNonRetryable
	if retryable {
		next.Error.TerminalReason = execution.ReasonRetryExhausted
	}
	// FAILED with a pending publish, due now: if this process dies before
	// the envelope lands, the sweeper publishes it.
	next.Status, next.DLQPending, next.NextDueAt = execution.Failed, true, now
	got, err := t.commit(ctx, next, slog.String("error_code", code))
	if err != nil || got == nil {
		return err
	}
	r.deadLetter(ctx, *got)
	return nil
}

// outcomeUnknown parks the execution as REMOTE_OUTCOME_UNKNOWN: the remote
// call reached its deadline and nothing says whether the remote worker
// stopped. The row leaves the due index (no sweep, claim or retry) until
// an operator re-drives it with confirmedNoRemoteEffect.
func (t *transition) outcomeUnknown(ctx context.Context, ou *pipeline.OutcomeUnknownError) error {
	r := t.r
	now := r.Clock.Now()
	next := t.base(now)
	next.Status = execution.RemoteOutcomeUnknown
	next.Error = &execution.Failure{Code: pipeline.CodeRemoteOutcomeUnknown,
		Message: execution.Truncate(ou.Error(), execution.MaxErrorMessage)}
	// Commit on a context that outlives a shutdown: the park must land.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	got, err := t.commit(cctx, next, slog.String("error_code", pipeline.CodeRemoteOutcomeUnknown))
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
// lease released, not due, error cleared, transition key recorded.
func (t *transition) base(now time.Time) execution.Execution {
	next := t.row
	next.LeaseOwner, next.LeaseExpiresAt, next.NextDueAt = "", time.Time{}, time.Time{}
	next.Error, next.DLQPending = nil, false
	next.LastTransitionKey = t.row.TransitionKey()
	next.UpdatedAt = now
	return next
}

// commit writes next under this transition's lease. A lost lease is not
// an error (got is nil); another worker owns the execution now.
func (t *transition) commit(ctx context.Context, next execution.Execution, attrs ...slog.Attr) (*execution.Execution, error) {
	guard := store.Guard{Key: t.row.Key(), Version: t.row.Version, LeaseOwner: t.r.cfg.WorkerID}
	if t.unleased {
		guard.LeaseOwner = ""
	}
	got, err := t.r.Store.Update(ctx, guard, next)
	if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound) || (t.unleased && errors.Is(err, store.ErrConflict)) {
		t.log.LogAttrs(ctx, slog.LevelWarn, "lease_lost", slog.String("event", "lease_lost"), slog.String("phase", "commit"))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: commit %s: %w", t.row.TransitionKey(), err)
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "transition_committed", append([]slog.Attr{slog.String("event", "transition_committed"),
		slog.String("status", string(got.Status)), slog.Int64("version", got.Version)}, attrs...)...)
	t.r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
	return &got, nil
}

// release hands the claimed step back untouched (QUEUED, due now, same
// attempt) after a backend failure or a shutdown, so that it runs again
// without using up a retry. The cause is returned for redelivery.
func (t *transition) release(ctx context.Context, cause error) error {
	now := t.r.Clock.Now()
	next := t.row
	next.Status, next.LeaseOwner, next.LeaseExpiresAt, next.NextDueAt, next.UpdatedAt = execution.Queued, "", time.Time{}, now, now
	// The caller's context may be the one that ended; releasing must not.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := t.r.Store.Update(rctx, store.Guard{Key: t.row.Key(), Version: t.row.Version, LeaseOwner: t.r.cfg.WorkerID}, next); err != nil {
		t.log.LogAttrs(ctx, slog.LevelWarn, "lease_release_failed", slog.String("event", "lease_release_failed"), slog.String("error", err.Error()))
	} else {
		t.log.LogAttrs(ctx, slog.LevelInfo, "lease_released", slog.String("event", "lease_released"), slog.String("cause", cause.Error()))
	}
	return cause
}

// deadLetter publishes the envelope of a FAILED execution and marks it
// DLQ. If the publish fails the row stays FAILED with DLQPending, due, and
// the sweeper tries again.
func (r *Runtime) deadLetter(ctx context.Context, e execution.Execution) bool {
	log := r.execLogger(&e)
	env := deadletter.Envelope{
		TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID,
		StepIndex: e.StepIndex, StepName: e.StepName, TransitionKey: e.LastTransitionKey,
		RetriesObserved: e.Attempt - 1, FailedAt: e.UpdatedAt,
	}
	if e.Error != nil {
		env.TerminalReason, env.ErrorCode, env.ErrorMessage = e.Error.TerminalReason, e.Error.Code, e.Error.Message
	}
	if err := r.DeadLetter.Publish(ctx, env); err != nil {
		log.LogAttrs(ctx, slog.LevelError, "dlq_publish_failed", slog.String("event", "dlq_publish_failed"), slog.String("error", err.Error()))
		return false
	}
	_, err := r.markDeadLettered(ctx, e)
	if errors.Is(err, store.ErrConflict) {
		// The dead-letter consumer may have marked it first (it reads the
		// envelope just published): that is success, not a failure.
		if now, gerr := r.Store.Get(ctx, e.Key()); gerr == nil && now.Status == execution.DLQ && now.LastTransitionKey == e.LastTransitionKey {
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

// markDeadLettered moves a FAILED row whose envelope is published to DLQ.
func (r *Runtime) markDeadLettered(ctx context.Context, e execution.Execution) (execution.Execution, error) {
	next := e
	next.Status, next.DLQPending, next.NextDueAt, next.UpdatedAt = execution.DLQ, false, time.Time{}, r.Clock.Now()
	got, err := r.Store.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
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
	e, err := r.Store.Get(ctx, execution.Key{TenantID: env.TenantID, ExecutionID: env.ExecutionID})
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.Status != execution.Failed || !e.DLQPending || e.LastTransitionKey != env.TransitionKey {
		return false, nil
	}
	_, err = r.markDeadLettered(ctx, e)
	if errors.Is(err, store.ErrConflict) {
		return false, nil // changed meanwhile (marked, or re-driven)
	}
	return err == nil, err
}
