// Package command builds command steps: pipeline steps whose side effect
// (a charge, an email, a call to another system) is a managed boundary.
// Each command has a deterministic command id and a record in the effect
// log (package effect, handed to steps by the runtime as
// pipeline.StepInfo.Effects), so that the side effect is dispatched once
// and its output recorded and replayed:
//
//  1. The record is created (PENDING) or read, conditionally.
//  2. SUCCEEDED: the recorded output is returned without calling the side
//     effect (policy RETURN_RECORDED, the default), or the step fails
//     non-retryably with code command_duplicate (policy FAIL).
//  3. DISPATCHING left by an earlier run of this step (it died, or lost
//     its lease, after starting the side effect): the step's Reconcile
//     asks the external system what happened; it returns the output
//     (recorded as SUCCEEDED), or "not done" (dispatch again), or an
//     error. Without Reconcile the record becomes AMBIGUOUS and the step
//     fails non-retryably with code command_ambiguous.
//  4. Otherwise (PENDING, FAILED_RETRYABLE, FAILED) the record moves to
//     DISPATCHING, conditional on the version read, with the run's
//     transition key and fencing token; the side effect is called; its
//     outcome is recorded (SUCCEEDED with the output, FAILED_RETRYABLE or
//     FAILED by the error's retryability) before the step returns.
//
// Every transition is conditional on the record's version, so two racing
// runs cannot both dispatch: the loser sees the winner's state. A record
// DISPATCHING by another execution (two executions sharing a command id)
// is in flight: the step fails with the retryable code command_in_flight
// and finds the outcome on a later attempt.
//
// The recorded output is kept inline in the record: at most
// effect.MaxOutputBytes (64 KiB). A side effect that succeeds with a
// larger output cannot be recorded: the record becomes AMBIGUOUS and the
// step fails non-retryably with code command_output_too_large. Keep a
// command's output small (an id, a status) and carry bulky data around it.
package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Policy says what a run does with a command that already SUCCEEDED.
type Policy string

// Duplicate policies.
const (
	// ReturnRecorded returns the recorded output without calling the side
	// effect again (the default).
	ReturnRecorded Policy = "RETURN_RECORDED"
	// Fail fails the step non-retryably with CodeDuplicate. This includes
	// the step's own replay after a crash between recording the outcome
	// and committing the step.
	Fail Policy = "FAIL"
)

// Error codes of command steps (stored on the execution).
const (
	// CodeAmbiguous: a run started the side effect and died before
	// recording its outcome, and there is no Reconcile to find out.
	// Non-retryable; the record is AMBIGUOUS until an operator resolves it.
	CodeAmbiguous = "command_ambiguous"
	// CodeDuplicate: the command already SUCCEEDED under policy FAIL.
	CodeDuplicate = "command_duplicate"
	// CodeInFlight: another execution is dispatching the same command.
	// Retryable.
	CodeInFlight = "command_in_flight"
	// CodeOutputTooLarge: the side effect succeeded with an output over
	// effect.MaxOutputBytes; the record is AMBIGUOUS. Non-retryable.
	CodeOutputTooLarge = "command_output_too_large"
	// CodeInvalidID: the ID function returned "". Non-retryable.
	CodeInvalidID = "command_invalid_id"
	// CodeEffectLogMissing: the runtime has no effect log. Non-retryable.
	CodeEffectLogMissing = "command_effect_log_missing"
	// CodeEffectLogFailed: the effect log failed (throttling, outage).
	// Retryable.
	CodeEffectLogFailed = "command_effect_log_failed"
	// CodeBadRecord: the record is in a state this code does not know,
	// or its output cannot be decoded. Non-retryable.
	CodeBadRecord = "command_bad_record"
)

// Spec configures a command step.
type Spec[I, O any] struct {
	// ID returns the command id from the step input (an order id, a
	// payment request id). Default: the step's idempotency key, derived
	// from tenant, execution and step index. Ids are scoped by tenant and
	// Namespace.
	ID func(in I) string
	// Namespace scopes the ids. Default: pipeline id + "/" + step name;
	// steps that must share commands (for the same external system) give
	// the same namespace.
	Namespace string
	// Policy is what a run does with a command that already SUCCEEDED.
	// Default ReturnRecorded.
	Policy Policy
	// Reconcile asks the external system what became of a dispatch whose
	// outcome was not recorded (the run died after starting it). It
	// returns the output with done=true, or done=false when the side
	// effect did not happen (it is dispatched again), or an error (the
	// step fails with it; the record stays as it is). Optional; without
	// it such a command becomes AMBIGUOUS.
	Reconcile func(ctx context.Context, info pipeline.StepInfo, in I) (out O, done bool, err error)
}

// Step adapts fn, the side effect, into a command step. Input and output
// are (de)serialized as by pipeline.NewStep (JSON, or payload.Payload
// untouched); the recorded output is the serialized output, replayed
// byte for byte.
func Step[I, O any](name string, spec Spec[I, O], fn func(ctx context.Context, info pipeline.StepInfo, in I) (O, error), opts ...pipeline.StepOption) pipeline.Step {
	if spec.Policy == "" {
		spec.Policy = ReturnRecorded
	}
	if spec.Policy != ReturnRecorded && spec.Policy != Fail {
		panic(fmt.Sprintf("command: step %s: unknown policy %q", name, spec.Policy))
	}
	c := &cmd[I, O]{name: name, spec: spec, fn: fn}
	// The typed step's encodings, submit check and input type (the
	// pipelines route's JSON Schema), run by the command: the same decode
	// as c.run.
	s := pipeline.NewStep(name, fn)
	s.Run = c.run
	for _, o := range opts {
		o(&s)
	}
	return s
}

// RecordID is the effect log key of command id in namespace for tenant:
// each part length-prefixed, so that no two triples collide.
func RecordID(tenantID, namespace, id string) string {
	return strconv.Itoa(len(tenantID)) + ":" + tenantID + ":" + strconv.Itoa(len(namespace)) + ":" + namespace + ":" + strconv.Itoa(len(id)) + ":" + id
}

type cmd[I, O any] struct {
	name string
	spec Spec[I, O]
	fn   func(ctx context.Context, info pipeline.StepInfo, in I) (O, error)
}

// maxRounds bounds how often a run re-reads a record it lost a race on.
const maxRounds = 6

func (c *cmd[I, O]) run(ctx context.Context, info pipeline.StepInfo, raw payload.Payload) (payload.Payload, error) {
	if ctx.Err() != nil {
		return payload.Payload{}, context.Cause(ctx)
	}
	var in I
	if p, ok := any(&in).(*payload.Payload); ok {
		*p = raw
	} else if err := raw.DecodeJSON(&in); err != nil {
		return payload.Payload{}, pipeline.NonRetryable("invalid_input", fmt.Errorf("step %s: decode input: %w", c.name, err))
	}
	log := info.Effects
	if log == nil {
		return payload.Payload{}, pipeline.NonRetryable(CodeEffectLogMissing, fmt.Errorf("command step %s: the runtime has no effect log", c.name))
	}
	id := info.IdempotencyKey
	if id == "" {
		id = store.StepIdempotencyKey(info.TenantID, info.ExecutionID, info.StepName)
	}
	if c.spec.ID != nil {
		if id = c.spec.ID(in); id == "" {
			return payload.Payload{}, pipeline.NonRetryable(CodeInvalidID, fmt.Errorf("command step %s: empty command id", c.name))
		}
	}
	ns := c.spec.Namespace
	if ns == "" {
		ns = info.PipelineID + "/" + c.name
	}
	r := &runner[I, O]{cmd: c, info: info, in: in, id: id, log: log, lg: info.Logger,
		me: effect.Dispatcher{TenantID: info.TenantID, ExecutionID: info.ExecutionID, StepIndex: info.StepIndex,
			TransitionKey: info.TransitionKey, FencingToken: info.FencingToken}}
	if r.lg == nil {
		r.lg = slog.New(slog.DiscardHandler)
	}
	r.lg = r.lg.With(slog.String("command_id", id))
	now := time.Now().UTC()
	rec, _, err := log.CreateOrGet(ctx, effect.Record{CommandID: RecordID(info.TenantID, ns, id), State: effect.Pending,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: info.ExpiresAt})
	if err != nil {
		return payload.Payload{}, r.logFailed(err)
	}
	return r.resolve(ctx, rec)
}

// runner is one run of a command step.
type runner[I, O any] struct {
	*cmd[I, O]
	info pipeline.StepInfo
	in   I
	id   string // the user's command id (the record's key is scoped)
	log  effect.Log
	lg   *slog.Logger
	me   effect.Dispatcher
	// current is the record found when a recording lost a race.
	current effect.Record
	// encoded is the serialized output of the side effect.
	encoded payload.Payload
}

// resolve acts on the record's state until the step has an outcome.
func (r *runner[I, O]) resolve(ctx context.Context, rec effect.Record) (payload.Payload, error) {
	for range maxRounds {
		switch rec.State {
		case effect.Succeeded:
			if r.spec.Policy == Fail {
				return payload.Payload{}, pipeline.NonRetryable(CodeDuplicate, fmt.Errorf("command %s already succeeded (dispatched by %s)", r.id, rec.Dispatcher.TransitionKey))
			}
			r.event(ctx, slog.LevelInfo, "command_replayed", rec)
			return rec.Output, nil
		case effect.Dispatching, effect.Ambiguous:
			if rec.State == effect.Dispatching && !r.earlier(rec.Dispatcher) {
				return payload.Payload{}, pipeline.Retryable(CodeInFlight, fmt.Errorf("command %s is being dispatched by %s", r.id, rec.Dispatcher.TransitionKey))
			}
			if r.spec.Reconcile == nil {
				if rec.State == effect.Dispatching {
					next := rec
					next.State, next.UpdatedAt = effect.Ambiguous, time.Now().UTC()
					next.Error = &effect.Failure{Code: CodeAmbiguous, Message: "outcome of the dispatch by " + rec.Dispatcher.TransitionKey + " is unknown"}
					cur, err := r.log.Transition(ctx, rec.Version, next)
					if errors.Is(err, effect.ErrConflict) {
						rec = cur
						continue
					}
					if err != nil {
						return payload.Payload{}, r.logFailed(err)
					}
					rec = cur
				}
				r.event(ctx, slog.LevelError, "command_ambiguous", rec)
				return payload.Payload{}, pipeline.NonRetryable(CodeAmbiguous, fmt.Errorf(
					"command %s: the run %s started the side effect and its outcome is unknown; the step has no reconcile function, so an operator must find out what happened",
					r.id, rec.Dispatcher.TransitionKey))
			}
			out, done, err := r.spec.Reconcile(ctx, r.info, r.in)
			if err != nil {
				return payload.Payload{}, err
			}
			if done {
				p, err := r.outcome(ctx, rec, out)
				if errors.Is(err, errRetryRound) {
					rec = r.current
					continue
				}
				if err == nil {
					r.event(ctx, slog.LevelInfo, "command_reconciled", rec, slog.Bool("done", true))
				}
				return p, err
			}
			r.event(ctx, slog.LevelWarn, "command_reconciled", rec, slog.Bool("done", false))
		case effect.Pending, effect.FailedRetryable, effect.Failed:
		default:
			return payload.Payload{}, pipeline.NonRetryable(CodeBadRecord, fmt.Errorf("command %s is in unknown state %q", r.id, rec.State))
		}
		// Dispatch: take the record, conditional on the version read.
		next := rec
		next.State, next.Dispatcher, next.Dispatches = effect.Dispatching, r.me, rec.Dispatches+1
		next.Output, next.Error, next.UpdatedAt = payload.Payload{}, nil, time.Now().UTC()
		cur, err := r.log.Transition(ctx, rec.Version, next)
		if errors.Is(err, effect.ErrConflict) {
			rec = cur // lost the race: act on the winner's state
			continue
		}
		if err != nil {
			return payload.Payload{}, r.logFailed(err)
		}
		return r.dispatch(ctx, cur)
	}
	return payload.Payload{}, pipeline.Retryable(CodeInFlight, fmt.Errorf("command %s: the record kept changing under this run", r.id))
}

// earlier reports whether d is an earlier run of this very step of this
// execution (an older claim), whose lease is gone since this run holds it.
func (r *runner[I, O]) earlier(d effect.Dispatcher) bool {
	return d.TenantID == r.me.TenantID && d.ExecutionID == r.me.ExecutionID && d.StepIndex == r.me.StepIndex &&
		d.FencingToken < r.me.FencingToken
}

// dispatch calls the side effect for a record this run moved to
// DISPATCHING and records its outcome.
func (r *runner[I, O]) dispatch(ctx context.Context, rec effect.Record) (payload.Payload, error) {
	r.event(ctx, slog.LevelInfo, "command_dispatched", rec)
	out, err := r.fn(ctx, r.info, r.in)
	if err != nil {
		if ctx.Err() != nil {
			// Cancelled mid-call (shutdown, lost lease): whether the side
			// effect happened is unknown, so the record stays DISPATCHING
			// for the next run to reconcile.
			return payload.Payload{}, err
		}
		code, msg, retryable := pipeline.Classify(err)
		next := rec
		next.State, next.Error = effect.Failed, &effect.Failure{Code: code, Message: store.Truncate(msg, store.MaxErrorMessage)}
		if retryable {
			next.State = effect.FailedRetryable
		}
		if _, rerr := r.record(ctx, rec, next); rerr != nil {
			r.lg.LogAttrs(ctx, slog.LevelWarn, "command_record_failed", slog.String("event", "command_record_failed"),
				slog.String("state", string(next.State)), slog.String("error", rerr.Error()))
		} else {
			r.event(ctx, slog.LevelWarn, "command_failed", next, slog.String("error_code", code))
		}
		return payload.Payload{}, err
	}
	p, err := r.outcome(ctx, rec, out)
	if errors.Is(err, errRetryRound) {
		// Someone else moved the record meanwhile (a later run after our
		// lease was lost). Our side effect did happen: return its output.
		r.lg.LogAttrs(ctx, slog.LevelWarn, "command_superseded", slog.String("event", "command_superseded"),
			slog.String("state", string(r.current.State)), slog.String("dispatcher", r.current.Dispatcher.TransitionKey))
		return r.encoded, nil
	}
	if err == nil {
		r.event(ctx, slog.LevelInfo, "command_succeeded", rec, slog.Int("output_bytes", len(p.Data)))
	}
	return p, err
}

// errRetryRound: the record moved under a recording; r.current holds it.
var errRetryRound = errors.New("command: record moved")

// outcome records out as the command's output (SUCCEEDED, from rec) and
// returns it serialized.
func (r *runner[I, O]) outcome(ctx context.Context, rec effect.Record, out O) (payload.Payload, error) {
	var p payload.Payload
	var err error
	if pp, ok := any(out).(payload.Payload); ok {
		p = pp
	} else if p, err = payload.JSON(out); err != nil {
		err = fmt.Errorf("command %s: encode output: %w", r.id, err)
	}
	r.encoded = p
	if err == nil && len(p.Data) > effect.MaxOutputBytes {
		err = fmt.Errorf("command %s: output of %d bytes exceeds the effect log's %d", r.id, len(p.Data), effect.MaxOutputBytes)
	}
	if err != nil {
		// Done but unrecordable: only a person can settle it.
		next := rec
		next.State, next.Error = effect.Ambiguous, &effect.Failure{Code: CodeOutputTooLarge, Message: store.Truncate(err.Error(), store.MaxErrorMessage)}
		if _, rerr := r.record(ctx, rec, next); rerr != nil && !errors.Is(rerr, errRetryRound) {
			r.lg.LogAttrs(ctx, slog.LevelWarn, "command_record_failed", slog.String("event", "command_record_failed"), slog.String("error", rerr.Error()))
		}
		r.event(ctx, slog.LevelError, "command_ambiguous", next)
		return payload.Payload{}, pipeline.NonRetryable(CodeOutputTooLarge, err)
	}
	next := rec
	next.State, next.Output, next.Error = effect.Succeeded, p, nil
	got, err := r.record(ctx, rec, next)
	if errors.Is(err, errRetryRound) && r.current.State == effect.Succeeded {
		return r.current.Output, nil
	}
	if err != nil {
		return payload.Payload{}, err
	}
	return got.Output, nil
}

// record writes next over rec, even if ctx has ended (the outcome is the
// truth and must not be lost to a shutdown), retrying backend failures a
// few times. A record that moved to AMBIGUOUS by a later run while this
// one still owned the dispatch is overwritten with the outcome; any other
// move returns errRetryRound with r.current set.
func (r *runner[I, O]) record(ctx context.Context, rec, next effect.Record) (effect.Record, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	var last error
	for try := range 4 {
		next.UpdatedAt = time.Now().UTC()
		cur, err := r.log.Transition(rctx, rec.Version, next)
		switch {
		case err == nil:
			return cur, nil
		case errors.Is(err, effect.ErrConflict):
			if cur.State == effect.Ambiguous && cur.Dispatcher == rec.Dispatcher && cur.Error != nil && cur.Error.Code == CodeAmbiguous {
				rec = cur
				continue
			}
			r.current = cur
			return cur, errRetryRound
		case errors.Is(err, effect.ErrNotFound):
			return effect.Record{}, r.logFailed(err)
		}
		last = err
		select {
		case <-rctx.Done():
			return effect.Record{}, r.logFailed(last)
		case <-time.After(time.Duration(100*(1<<try)) * time.Millisecond):
		}
	}
	return effect.Record{}, r.logFailed(fmt.Errorf("command %s: the outcome could not be recorded: %w", r.id, last))
}

// logFailed classifies an effect log failure as a retryable step error.
func (r *runner[I, O]) logFailed(err error) error {
	if errors.Is(err, effect.ErrInvalid) || errors.Is(err, effect.ErrTooLarge) {
		return pipeline.NonRetryable(CodeBadRecord, err)
	}
	return pipeline.Retryable(CodeEffectLogFailed, err)
}

func (r *runner[I, O]) event(ctx context.Context, level slog.Level, name string, rec effect.Record, attrs ...slog.Attr) {
	r.lg.LogAttrs(ctx, level, name, append([]slog.Attr{slog.String("event", name), slog.String("state", string(rec.State)),
		slog.Int64("effect_version", rec.Version), slog.String("dispatcher", rec.Dispatcher.TransitionKey),
		slog.Int("dispatches", rec.Dispatches)}, attrs...)...)
}
