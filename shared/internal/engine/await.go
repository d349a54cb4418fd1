package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Errors of CompleteAwait (test with errors.Is).
var (
	// ErrAwaitsDisabled: no resume-token secret is configured.
	ErrAwaitsDisabled = errors.New("engine: await completion is not configured (no resume-token secret)")
	// ErrResumeTokenMissing: the completion carries no resume token.
	ErrResumeTokenMissing = errors.New("engine: resume token missing")
	// ErrResumeTokenInvalid: the resume token is not the await's.
	ErrResumeTokenInvalid = errors.New("engine: resume token invalid")
	// ErrAwaitNotCurrent: the await id is not the execution's current await.
	ErrAwaitNotCurrent = errors.New("engine: await is not the execution's current await")
	// ErrAwaitAlreadyCompleted: the await was completed with a different payload.
	ErrAwaitAlreadyCompleted = errors.New("engine: await already completed with a different payload")
	// ErrAwaitBusy: the await timed out and its step is being retried
	// right now; a late completion cannot be recorded until the lease ends.
	ErrAwaitBusy = errors.New("engine: execution is running; retry the completion later")
)

// park commits the execution as WAITING_EXTERNAL with the step's await:
// never claimed, in the sweep index only until the await's timeout (when
// the sweeper fails the step with AWAIT_TIMEOUT), kept at least a
// retention past that timeout.
func (t *transition) park(ctx context.Context, aw *pipeline.AwaitError, policy pipeline.RetryPolicy) error {
	r := t.r
	if r.cfg.AwaitSecret == "" {
		return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeAwaitTokenSecretMissing,
			errors.New("the step awaits an external completion but no resume-token secret is configured (await.resume-token-secret)")), policy)
	}
	now := r.deps.Clock.Now()
	next := t.base(now)
	next.Status = store.WaitingExternal
	next.SweepAt, next.Sweeps = time.Time{}, 0
	a := &store.Await{ID: aw.ID, Status: store.AwaitWaiting, StepIndex: t.row.StepIndex}
	if aw.Timeout > 0 {
		a.TimeoutAt = now.Add(aw.Timeout)
		next.SweepAt = a.TimeoutAt
		next.ExpiresAt = maxTime(next.ExpiresAt, a.TimeoutAt.Add(r.cfg.ExecutionTTL))
	}
	next.Await = a
	got, err := t.commit(ctx, next, false, slog.String("await_id", a.ID))
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
func (r *Runtime) awaitTimeout(ctx context.Context, row store.Execution) (bool, error) {
	now := r.deps.Clock.Now()
	if row.Status != store.WaitingExternal || row.Await == nil || row.Await.Status != store.AwaitWaiting ||
		row.Await.TimeoutAt.IsZero() || row.Await.TimeoutAt.After(now) {
		return false, nil
	}
	policy := r.cfg.Retry
	p, ok := r.deps.Registry.Version(row.PipelineID, row.PipelineVersion)
	if ok && row.StepIndex < len(p.Steps) && p.Steps[row.StepIndex].Retry != nil {
		policy = *p.Steps[row.StepIndex].Retry
	}
	a := *row.Await
	a.Status = store.AwaitTimedOut
	log := r.execLogger(&row).With(slog.String("transition_key", row.TransitionKey()))
	if !ok {
		log.LogAttrs(ctx, slog.LevelWarn, "await_timeout_default_policy", slog.String("event", "await_timeout_default_policy"),
			slog.String("pipeline_version", row.PipelineVersion))
	}
	t := &transition{r: r, row: row, log: log, p: p, unleased: true}
	t.row.Await = &a
	if err := t.fail(ctx, pipeline.Retryable(pipeline.CodeAwaitTimeout,
		fmt.Errorf("await %s timed out at %s", a.ID, a.TimeoutAt.UTC().Format(time.RFC3339))), policy); err != nil {
		return false, err
	}
	if t.committed == nil {
		return false, nil // lost to a concurrent change (a completion)
	}
	log.LogAttrs(ctx, slog.LevelWarn, "await_timed_out", slog.String("event", "await_timed_out"), slog.String("await_id", a.ID))
	return true, nil
}

// lateInlineBudget is the inline budget of a late completion: none. The
// row already holds two inline payload slots (input and result); a third
// could take it past DynamoDB's item limit, so a late completion is always
// stored as a payload reference.
const lateInlineBudget = -1

// CompleteAwait delivers the completion of an external await. token is
// the resume token (await.Token): it names the tenant, so no other caller
// identity is needed. On time, the completion payload is stored as the
// execution's Result and the execution goes back to QUEUED at the await
// step; the worker that claims it commits the step with the completion as
// its output (publishing the pipeline's Output first when it was the last
// step), so the completion becomes the next step's input or the result. A
// repeat with the same payload returns duplicate=true and changes
// nothing. A completion of an await that timed out is kept on the row for
// reconciliation (Await.Late, always as a payload reference) and changes
// nothing else.
//
// Errors: store.ErrNotFound (unknown execution, or another tenant's),
// ErrAwaitsDisabled, ErrResumeTokenMissing, ErrResumeTokenInvalid,
// ErrAwaitNotCurrent, ErrAwaitAlreadyCompleted, ErrAwaitBusy,
// store.ErrConflict (a concurrent change, retry).
func (r *Runtime) CompleteAwait(ctx context.Context, executionID, awaitID, token string, in payload.Payload) (store.Execution, bool, error) {
	var (
		e   store.Execution
		dup bool
		err error
	)
	for range 3 {
		e, dup, err = r.completeAwait(ctx, executionID, awaitID, token, in)
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	return e, dup, err
}

func (r *Runtime) completeAwait(ctx context.Context, executionID, awaitID, token string, in payload.Payload) (store.Execution, bool, error) {
	switch {
	case r.cfg.AwaitSecret == "":
		return store.Execution{}, false, ErrAwaitsDisabled
	case token == "":
		return store.Execution{}, false, ErrResumeTokenMissing
	}
	tenant, ok := await.TokenTenant(token)
	if !ok || !await.Verify([]byte(r.cfg.AwaitSecret), tenant, executionID, awaitID, token) {
		return store.Execution{}, false, ErrResumeTokenInvalid
	}
	key := store.Key{TenantID: tenant, ExecutionID: executionID}
	e, err := r.deps.Store.Get(ctx, key)
	if err != nil {
		return e, false, err
	}
	digest := payload.Digest(in.Data)
	if e.Await == nil || e.Await.ID != awaitID {
		return e, false, ErrAwaitNotCurrent
	}
	a := *e.Await
	now := r.deps.Clock.Now()
	slot := "await/" + key.TenantID + "/" + key.ExecutionID + "/" + awaitID
	log := r.execLogger(&e).With(slog.String("await_id", awaitID))
	switch {
	case a.Status == store.AwaitCompleted || a.Late:
		if a.Digest == digest {
			return e, true, nil
		}
		return e, false, ErrAwaitAlreadyCompleted
	case a.Status == store.AwaitTimedOut:
		if e.LeaseOwner != "" {
			return e, false, ErrAwaitBusy
		}
		ref, err := payload.Write(ctx, r.deps.Payloads, in, slot, lateInlineBudget, r.horizon(e.RecordsExpireAt, e.ExpiresAt))
		if err != nil {
			return e, false, fmt.Errorf("engine: store late completion: %w", err)
		}
		a.Late, a.LatePayload, a.Digest, a.CompletedAt = true, ref, digest, now
		next := e
		next.Await, next.UpdatedAt = &a, now
		got, err := r.update(ctx, store.Guard{Key: key, Version: e.Version, KeepSweep: true}, next, ref)
		if err != nil {
			return e, false, err
		}
		log.LogAttrs(ctx, slog.LevelWarn, "await_completed_late", slog.String("event", "await_completed_late"))
		return got, false, nil
	case e.Status == store.Paused && e.PausedFrom == store.WaitingExternal:
		return r.completePausedAwait(ctx, e, a, in, slot)
	case e.Status != store.WaitingExternal:
		return e, false, ErrAwaitNotCurrent
	}
	expires := r.keepAlive(&e, now)
	ref, err := payload.Write(ctx, r.deps.Payloads, in, slot, r.cfg.InlineBudget, r.horizon(e.RecordsExpireAt, expires))
	if err != nil {
		return e, false, fmt.Errorf("engine: store completion: %w", err)
	}
	a.Status, a.Digest, a.CompletedAt = store.AwaitCompleted, digest, now
	next := e
	next.Await, next.Result, next.Error, next.DLQPending = &a, ref, nil, false
	next.Status, next.NextDueAt, next.UpdatedAt, next.ExpiresAt = store.Queued, now, now, expires
	next.LeaseOwner, next.LeaseExpiresAt = "", time.Time{}
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	got, err := r.update(ctx, store.Guard{Key: key, Version: e.Version}, next, ref)
	if err != nil {
		return e, false, err
	}
	log.LogAttrs(ctx, slog.LevelInfo, "await_completed", slog.String("event", "await_completed"),
		slog.String("status", string(got.Status)), slog.Int64("version", got.Version), slog.Int64("completion_bytes", ref.Length))
	r.notify(ctx, EventTransitionCommitted, got, SweepResult{})
	r.dispatch(ctx, &got, 0)
	return got, false, nil
}
