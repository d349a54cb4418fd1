package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/execution"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/retry"
	"github.com/qasync/qasync/shared/store"
)

// Errors of CompleteAwait (test with errors.Is).
var (
	// ErrAwaitsDisabled: no resume-token secret is configured.
	ErrAwaitsDisabled = errors.New("runtime: await completion is not configured (no resume-token secret)")
	// ErrResumeTokenMissing: the completion carries no resume token.
	ErrResumeTokenMissing = errors.New("runtime: resume token missing")
	// ErrResumeTokenInvalid: the resume token is not the await's.
	ErrResumeTokenInvalid = errors.New("runtime: resume token invalid")
	// ErrAwaitNotCurrent: the await id is not the execution's current await.
	ErrAwaitNotCurrent = errors.New("runtime: await is not the execution's current await")
	// ErrAwaitAlreadyCompleted: the await was completed with a different payload.
	ErrAwaitAlreadyCompleted = errors.New("runtime: await already completed with a different payload")
	// ErrAwaitBusy: the await timed out and its step is being retried
	// right now; a late completion cannot be recorded until the lease ends.
	ErrAwaitBusy = errors.New("runtime: execution is running; retry the completion later")
)

// park commits the execution as WAITING_EXTERNAL with the step's await:
// never claimed, due only at the await's timeout (when the sweeper fails
// the step with AWAIT_TIMEOUT).
func (t *transition) park(ctx context.Context, aw *pipeline.AwaitError, policy retry.Policy) error {
	r := t.r
	if r.cfg.AwaitSecret == "" {
		return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeAwaitTokenSecretMissing,
			errors.New("the step awaits an external completion but no resume-token secret is configured (await.resume-token-secret)")), policy)
	}
	now := r.Clock.Now()
	next := t.base(now)
	next.Status = execution.WaitingExternal
	a := &execution.Await{ID: aw.ID, Status: execution.AwaitWaiting}
	if aw.Timeout > 0 {
		a.TimeoutAt = now.Add(aw.Timeout)
		next.NextDueAt = a.TimeoutAt
	}
	next.Await = a
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	got, err := t.commit(cctx, next, slog.String("await_id", a.ID))
	if err != nil || got == nil {
		return err
	}
	r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "await_parked", slog.String("event", "await_parked"),
		slog.String("await_id", a.ID), slog.Time("timeout_at", a.TimeoutAt))
	return nil
}

// awaitTimeout fails the await step of a WAITING_EXTERNAL row whose
// timeout has passed, through the step's retry policy, with an unleased
// version-guarded commit. It reports whether it committed.
func (r *Runtime) awaitTimeout(ctx context.Context, key execution.Key) (bool, error) {
	row, err := r.Store.Get(ctx, key)
	if err != nil {
		return false, err
	}
	now := r.Clock.Now()
	if row.Status != execution.WaitingExternal || row.Await == nil || row.Await.Status != execution.AwaitWaiting || !row.Due(now) {
		return false, nil
	}
	policy := r.cfg.Retry
	if p, ok := r.Registry.Get(row.PipelineID); ok && row.StepIndex < len(p.Steps) && p.Steps[row.StepIndex].Retry != nil {
		policy = *p.Steps[row.StepIndex].Retry
	}
	a := *row.Await
	a.Status = execution.AwaitTimedOut
	log := r.execLogger(&row).With(slog.String("transition_key", row.TransitionKey()))
	t := &transition{r: r, row: row, log: log, unleased: true}
	t.row.Await = &a
	if err := t.fail(ctx, pipeline.Retryable(pipeline.CodeAwaitTimeout,
		fmt.Errorf("await %s timed out at %s", a.ID, a.TimeoutAt.UTC().Format(time.RFC3339))), policy); err != nil {
		return false, err
	}
	log.LogAttrs(ctx, slog.LevelWarn, "await_timed_out", slog.String("event", "await_timed_out"), slog.String("await_id", a.ID))
	return true, nil
}

// CompleteAwait delivers the completion of an external await. token is
// the resume token (await.Token). On time, the completion payload becomes
// the next step's input (QUEUED, dispatched), or the result when the
// await step was the last one (SUCCEEDED). A repeat with the same payload
// returns duplicate=true and changes nothing. A completion of an await
// that timed out is kept on the row for reconciliation (Await.Late) and
// changes nothing else.
//
// Errors: store.ErrNotFound (unknown execution or another tenant's),
// ErrAwaitsDisabled, ErrResumeTokenMissing, ErrResumeTokenInvalid,
// ErrAwaitNotCurrent, ErrAwaitAlreadyCompleted, ErrAwaitBusy,
// store.ErrConflict (a concurrent change, retry).
func (r *Runtime) CompleteAwait(ctx context.Context, key execution.Key, awaitID, token string, in payload.Payload) (execution.Execution, bool, error) {
	var (
		e   execution.Execution
		dup bool
		err error
	)
	for range 3 {
		e, dup, err = r.completeAwait(ctx, key, awaitID, token, in)
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	return e, dup, err
}

func (r *Runtime) completeAwait(ctx context.Context, key execution.Key, awaitID, token string, in payload.Payload) (execution.Execution, bool, error) {
	e, err := r.Store.Get(ctx, key)
	if err != nil {
		return e, false, err
	}
	switch {
	case r.cfg.AwaitSecret == "":
		return e, false, ErrAwaitsDisabled
	case token == "":
		return e, false, ErrResumeTokenMissing
	case !await.Verify([]byte(r.cfg.AwaitSecret), key.TenantID, key.ExecutionID, awaitID, token):
		return e, false, ErrResumeTokenInvalid
	}
	digest := payload.Digest(in.Data)
	if e.Await == nil || e.Await.ID != awaitID {
		return e, false, ErrAwaitNotCurrent
	}
	a := *e.Await
	now := r.Clock.Now()
	slot := "await/" + key.TenantID + "/" + key.ExecutionID + "/" + awaitID
	log := r.execLogger(&e).With(slog.String("await_id", awaitID))
	switch {
	case a.Status == execution.AwaitCompleted || a.Late:
		if a.Digest == digest {
			return e, true, nil
		}
		return e, false, ErrAwaitAlreadyCompleted
	case a.Status == execution.AwaitTimedOut:
		if e.LeaseOwner != "" {
			return e, false, ErrAwaitBusy
		}
		ref, err := payload.Write(ctx, r.Payloads, in, slot, r.cfg.InlineBudget, e.ExpiresAt)
		if err != nil {
			return e, false, fmt.Errorf("runtime: store late completion: %w", err)
		}
		a.Late, a.LatePayload, a.Digest, a.CompletedAt = true, ref, digest, now
		next := e
		next.Await, next.UpdatedAt = &a, now
		got, err := r.Store.Update(ctx, store.Guard{Key: key, Version: e.Version}, next)
		if err != nil {
			return e, false, err
		}
		log.LogAttrs(ctx, slog.LevelWarn, "await_completed_late", slog.String("event", "await_completed_late"))
		return got, false, nil
	case e.Status != execution.WaitingExternal:
		return e, false, ErrAwaitNotCurrent
	}
	p, ok := r.Registry.Get(e.PipelineID)
	if !ok || e.StepIndex >= len(p.Steps) {
		return e, false, fmt.Errorf("%w: %s", ErrPipelineNotFound, e.PipelineID)
	}
	ref, err := payload.Write(ctx, r.Payloads, in, slot, r.cfg.InlineBudget, e.ExpiresAt)
	if err != nil {
		return e, false, fmt.Errorf("runtime: store completion: %w", err)
	}
	a.Status, a.Digest, a.CompletedAt = execution.AwaitCompleted, digest, now
	next := e
	next.Await, next.Result, next.Error, next.DLQPending = &a, ref, nil, false
	next.LeaseOwner, next.LeaseExpiresAt, next.NextDueAt = "", time.Time{}, time.Time{}
	next.LastTransitionKey, next.UpdatedAt = e.TransitionKey(), now
	last := e.StepIndex == len(p.Steps)-1
	if last {
		next.Status = execution.Succeeded
	} else {
		next.Status, next.StepIndex, next.StepName = execution.Queued, e.StepIndex+1, p.Steps[e.StepIndex+1].Name
		next.Attempt, next.MaxAttempt, next.NextDueAt = 1, 0, now
	}
	got, err := r.Store.Update(ctx, store.Guard{Key: key, Version: e.Version}, next)
	if err != nil {
		return e, false, err
	}
	log.LogAttrs(ctx, slog.LevelInfo, "await_completed", slog.String("event", "await_completed"),
		slog.String("status", string(got.Status)), slog.Int64("version", got.Version), slog.Int64("completion_bytes", ref.Length))
	r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
	if last {
		r.execLogger(&got).LogAttrs(ctx, slog.LevelInfo, "execution_succeeded", slog.String("event", "execution_succeeded"),
			slog.Duration("latency", now.Sub(got.CreatedAt)))
		r.notify(ctx, EventSucceeded, got, SweepResult{})
		return got, false, nil
	}
	r.dispatch(ctx, &got, 0)
	return got, false, nil
}
