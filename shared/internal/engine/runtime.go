// Package engine is the queue-async execution engine (the runtime): it accepts
// submissions, runs one transition per work item under a lease, commits
// each with an OCC-guarded write, retries with backoff, dead-letters what
// cannot finish, sweeps for work whose dispatch was lost, and answers
// status, result and re-drive requests.
//
// It depends only on the seams (store, payload, effect, dispatch,
// deadletter) and on pipeline; the providers behind them are chosen by the
// caller.
package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/tracing"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// IdempotencyPolicy says where an execution's idempotency key comes from.
type IdempotencyPolicy string

// Idempotency policies, named as in the seed document.
const (
	// OptionalClientKey uses the client's key when it sends one (a retry
	// with it resolves to the same execution while that lives); without
	// one, every submit is a new execution (the spec's crash table: the
	// caller's retried submission is a duplicate the caller must tolerate).
	OptionalClientKey IdempotencyPolicy = "OPTIONAL_CLIENT_KEY"
	// ClientKeyRequired refuses a submission without a client key.
	ClientKeyRequired IdempotencyPolicy = "CLIENT_KEY_REQUIRED"
	// ServerKeyOnly ignores the client's key and derives one from the
	// request (tenant, pipeline and payload digest): an identical request
	// resolves to the same execution while that execution's row lives,
	// that is until a retention after it ended. A body submitted again
	// after that starts a new execution.
	ServerKeyOnly IdempotencyPolicy = "SERVER_KEY_ONLY"
)

// Errors returned by Runtime methods (test with errors.Is). Store errors
// (store.ErrNotFound, store.ErrKeyMismatch, store.ErrConflict) pass through.
var (
	// ErrPipelineNotFound: no pipeline with that id is registered.
	ErrPipelineNotFound = errors.New("engine: pipeline not found")
	// ErrKeyRequired: the policy needs a client idempotency key.
	ErrKeyRequired = errors.New("engine: idempotency key required")
	// ErrInvalidInput: the first step refuses the input
	// (pipeline.Step.CheckInput: a JSON decode into its input type, a map
	// step's limits); the message says why. Nothing is stored.
	ErrInvalidInput = errors.New("engine: invalid input")
	// ErrNotSucceeded: the result was asked of an execution that has not succeeded.
	ErrNotSucceeded = errors.New("engine: execution has not succeeded")
	// ErrNotRedrivable: re-drive asked of an execution that is not DLQ,
	// FAILED or REMOTE_OUTCOME_UNKNOWN.
	ErrNotRedrivable = errors.New("engine: execution is not in DLQ, FAILED or REMOTE_OUTCOME_UNKNOWN")
	// ErrRemoteEffectUnconfirmed: re-drive of a REMOTE_OUTCOME_UNKNOWN
	// execution without RedriveOptions.ConfirmedNoRemoteEffect.
	ErrRemoteEffectUnconfirmed = errors.New("engine: re-driving a REMOTE_OUTCOME_UNKNOWN execution needs confirmedNoRemoteEffect")
	// ErrChildrenExpired: re-drive asked of a map parent that failed in
	// its collect (every child of its map's round ended, their outcomes
	// not read yet) after some of those children's rows expired: their
	// outcomes are gone, and re-driving would count the gone children as
	// failed (and a later re-drive run them again). Nothing changes.
	ErrChildrenExpired = errors.New("engine: the map's children whose outcomes the execution has yet to collect expired; it cannot be re-driven")
	// ErrVersionMismatch: re-drive's expected version is not the current one.
	ErrVersionMismatch = errors.New("engine: version mismatch")
	// ErrLeaseLost is the cancellation cause of a step whose lease was lost.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrHistoryUnavailable: the runtime has no history reader (Deps.History).
	ErrHistoryUnavailable = errors.New("engine: execution history is not available with these providers")
)

// Config is the runtime's policy. Fields whose zero value is not a
// usable setting take the documented defaults when zero; SweepGrace,
// InlineBudget and ClockSkewTolerance mean what they say at zero (start
// from DefaultConfig to get the defaults of every field).
type Config struct {
	// Lease is how long a claim lasts without renewal. Default 30s.
	Lease time.Duration
	// Retry is the default retry policy. Default pipeline.DefaultRetry.
	Retry pipeline.RetryPolicy
	// SweepLimit bounds the rows one sweep handles. Default 100.
	SweepLimit int
	// SweepGrace is how long past its due time a row waits for its queued
	// work item before the sweeper dispatches it again; zero re-dispatches
	// as soon as a row is due. DefaultConfig: 10s.
	SweepGrace time.Duration
	// ClockSkewTolerance is the largest clock difference tolerated between
	// the processes sharing the store: a work item is claimed up to this
	// much before its due time, and a lease is taken over only this long
	// after its expiry. Zero trusts the clocks to agree. DefaultConfig: 2s.
	ClockSkewTolerance time.Duration
	// ExecutionTTL is the retention: how long a row is kept after it
	// became terminal (a live row is never deleted). Default 30 days.
	ExecutionTTL time.Duration
	// InlineBudget is the largest payload kept in the row; zero keeps
	// only empty payloads inline. At most payload.MaxInlineBudget.
	// DefaultConfig: payload.DefaultInlineBudget.
	InlineBudget int
	// IdempotencyPolicy defaults to OptionalClientKey.
	IdempotencyPolicy IdempotencyPolicy
	// WorkerID names this process's leases. Default host name + random.
	WorkerID string
	// AwaitSecret keys the resume tokens of await steps (package await).
	// Empty: await steps fail with await_resume_token_secret_missing and
	// CompleteAwait returns ErrAwaitsDisabled.
	AwaitSecret string
	// OutputBucket is handed to every step as pipeline.StepInfo.OutputBucket:
	// the value of the {outputBucket} placeholder of pipelines' Output.
	OutputBucket string
	// PipelineVersionWait is how long an execution whose pipeline
	// definition this worker does not serve waits for a worker that does
	// before it ends DLQ with pipeline_version_unavailable. Default 1h; at
	// most ExecutionTTL.
	PipelineVersionWait time.Duration
	// DispatchTimeout bounds sending a work item after a commit (submit,
	// hand-over, re-drive); a send that misses it is left to the sweeper.
	// Default 2s.
	DispatchTimeout time.Duration
	// ReleaseLimit is how many times one attempt may be handed back
	// unfinished before the hand-back counts as a failed attempt. Default 10.
	ReleaseLimit int
	// ChainMaxSteps is how many steps one work item may run in a row: when
	// a step commits and the next can run, the worker commits it and claims
	// the next in one conditional write and runs it without a queue round
	// trip (each step still its own committed transition), at most this many
	// steps per work item, so that a long pipeline does not hold a worker
	// (or a Lambda batch) from the others. 1 turns chaining off.
	// Default 16.
	ChainMaxSteps int
	// ChildrenLook is how often the sweeper looks at a parent waiting for
	// its children (WAITING_CHILDREN): the look repairs a count or a
	// release lost to a crash and carries a cancel on to the children.
	// Default 5 minutes.
	ChildrenLook time.Duration
	// FanOutParallel is how many child creates a map step's fan-out has
	// in flight at once (each a conditional write: a batch write cannot
	// carry a condition). Default 25. The simulator sets 1: goroutines
	// woken at one virtual instant run in no set order, and its fault
	// draws must come in one.
	FanOutParallel int
	// PriorityAging is how much later a priority's executions rank than
	// those of the priority one more urgent submitted at the same time
	// (store.Execution.Rank): an execution is passed over only by more
	// urgent ones submitted less than (the difference of priorities)
	// times PriorityAging after it, at most four agings. Default 1
	// minute.
	PriorityAging time.Duration
	// KeyWaitLook is how often the sweeper looks at an execution waiting
	// for a slot of its concurrency key (WAITING_KEY) after its first look
	// a grace after it began to wait: the look repairs a wake-up lost to
	// a crash and evicts slots whose holders ended without releasing
	// them. Default 5 minutes.
	KeyWaitLook time.Duration
	// RateLimitHorizon is how far ahead a step of a rate-limited pipeline
	// may reserve its start (pipeline.RateLimit): a step whose turn is
	// further out reserves nothing and comes back (no attempt counted)
	// about a horizon later to try again. Default 15 minutes.
	RateLimitHorizon time.Duration
	// RateLimitWait is how long a worker waits, holding its claim, for a
	// reserved start that is near (a longer wait releases the step until
	// its turn); bounded by a third of the lease. Default 1s.
	RateLimitWait time.Duration
}

// DefaultConfig returns the runtime's defaults for every field.
func DefaultConfig() Config {
	return Config{
		Lease: 30 * time.Second, Retry: pipeline.DefaultRetry, SweepLimit: 100, SweepGrace: 10 * time.Second,
		ClockSkewTolerance: 2 * time.Second, ExecutionTTL: 30 * 24 * time.Hour, InlineBudget: payload.DefaultInlineBudget,
		IdempotencyPolicy: OptionalClientKey, PipelineVersionWait: time.Hour, DispatchTimeout: 2 * time.Second, ReleaseLimit: 10,
		ChainMaxSteps: 16,
		ChildrenLook:  5 * time.Minute, FanOutParallel: 25, KeyWaitLook: 5 * time.Minute,
		RateLimitHorizon: 15 * time.Minute, RateLimitWait: time.Second,
		PriorityAging: time.Minute,
	}
}

func (c *Config) defaults() error {
	def := DefaultConfig()
	if c.Lease == 0 {
		c.Lease = def.Lease
	}
	if c.Retry == (pipeline.RetryPolicy{}) {
		c.Retry = def.Retry
	}
	if c.SweepLimit == 0 {
		c.SweepLimit = def.SweepLimit
	}
	if c.ExecutionTTL == 0 {
		c.ExecutionTTL = def.ExecutionTTL
	}
	if c.IdempotencyPolicy == "" {
		c.IdempotencyPolicy = def.IdempotencyPolicy
	}
	if c.PipelineVersionWait == 0 {
		c.PipelineVersionWait = min(def.PipelineVersionWait, c.ExecutionTTL)
	}
	if c.DispatchTimeout == 0 {
		c.DispatchTimeout = def.DispatchTimeout
	}
	if c.ReleaseLimit == 0 {
		c.ReleaseLimit = def.ReleaseLimit
	}
	if c.ChainMaxSteps == 0 {
		c.ChainMaxSteps = def.ChainMaxSteps
	}
	if c.ChildrenLook <= 0 {
		c.ChildrenLook = def.ChildrenLook
	}
	if c.FanOutParallel <= 0 {
		c.FanOutParallel = def.FanOutParallel
	}
	if c.KeyWaitLook <= 0 {
		c.KeyWaitLook = def.KeyWaitLook
	}
	if c.RateLimitHorizon <= 0 {
		c.RateLimitHorizon = def.RateLimitHorizon
	}
	if c.RateLimitWait <= 0 {
		c.RateLimitWait = def.RateLimitWait
	}
	if c.PriorityAging <= 0 {
		c.PriorityAging = def.PriorityAging
	}
	switch {
	case c.Lease < 3*time.Millisecond:
		return fmt.Errorf("engine: lease %s too short", c.Lease)
	case c.InlineBudget < 0 || c.InlineBudget > payload.MaxInlineBudget:
		return fmt.Errorf("engine: inline budget %d outside 0..%d", c.InlineBudget, payload.MaxInlineBudget)
	case c.SweepLimit < 1, c.SweepGrace < 0, c.ExecutionTTL < 0, c.ClockSkewTolerance < 0, c.ReleaseLimit < 1, c.DispatchTimeout < 0, c.ChainMaxSteps < 1:
		return fmt.Errorf("engine: sweep limit, sweep grace, TTL, clock-skew tolerance, release limit or dispatch timeout out of range")
	case c.PipelineVersionWait < 0 || c.PipelineVersionWait > c.ExecutionTTL:
		return fmt.Errorf("engine: pipeline version wait %s outside 0..the execution retention %s", c.PipelineVersionWait, c.ExecutionTTL)
	}
	switch c.IdempotencyPolicy {
	case OptionalClientKey, ClientKeyRequired, ServerKeyOnly:
	default:
		return fmt.Errorf("engine: unknown idempotency policy %q", c.IdempotencyPolicy)
	}
	return c.Retry.Validate()
}

// Deps are the providers a Runtime runs on.
type Deps struct {
	Registry   *pipeline.Registry
	Store      store.Store
	Payloads   payload.Store
	Dispatcher dispatch.Dispatcher
	DeadLetter deadletter.Publisher
	// Effects is the effect log of command steps, handed to every step as
	// pipeline.StepInfo.Effects. Optional: without one, command steps fail
	// with code command_effect_log_missing (other steps are unaffected).
	Effects effect.Log
	// Rejects is the Item Reject Sink, handed to every step as
	// pipeline.StepInfo.Rejects. Optional.
	Rejects pipeline.RejectSink
	// Objects is the object store of pipelines' Output, handed to every
	// step as pipeline.StepInfo.Objects. Optional.
	Objects pipeline.ObjectStore
	// DeadLetters lists the dead-letter records (Runtime.DeadLetters): the
	// dead-letter consumer's recorder. Optional: without it DeadLetters
	// returns ErrDeadLettersUnavailable.
	DeadLetters deadletter.Lister
	// Jobs keeps bulk re-drive jobs (Runtime.StartRedrives). Optional: the
	// state store when it keeps jobs (store.JobStore); without either,
	// bulk re-drive returns ErrRedrivesUnavailable.
	Jobs store.JobStore
	// Clock defaults to the system clock.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Observers hear what the runtime does (metrics, lifecycle events).
	Observers []Observer
	// History reads executions' histories (Runtime.History). Optional:
	// without it, History returns ErrHistoryUnavailable.
	History history.Reader
	// Rand is the source of the runtime's randomness (execution ids'
	// incarnations and random slots, worker ids, job ids). Default
	// crypto/rand; the simulator passes a seeded one.
	Rand io.Reader
	// TracerProvider receives the runtime's spans (package tracing,
	// docs/tracing.md). Optional: nil (the default) turns tracing off.
	TracerProvider trace.TracerProvider
}

// Runtime is the execution engine. It is safe for concurrent use.
type Runtime struct {
	cfg  Config
	deps Deps
	// draining is set by Drain: committed steps hand the next one over.
	draining atomic.Bool
	// randMu serializes reads of deps.Rand (a seeded source is not safe
	// for concurrent use).
	randMu sync.Mutex
	// tracer is nil when tracing is off (tracing.go).
	tracer trace.Tracer
}

// Drain tells the runtime that its process is shutting down: the steps it
// runs finish and commit as usual, but from now on a commit hands the next
// step over to the work queue instead of running it here (no chaining),
// so that a graceful stop ends in-flight work and starts none.
func (r *Runtime) Drain() { r.draining.Store(true) }

// New checks cfg and deps and returns a Runtime.
func New(cfg Config, deps Deps) (*Runtime, error) {
	if deps.Rand == nil {
		deps.Rand = rand.Reader
	}
	if cfg.WorkerID == "" {
		host, _ := os.Hostname()
		cfg.WorkerID = newWorkerID(store.Truncate(host, 20), deps.Rand)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if deps.Registry == nil || deps.Store == nil || deps.Payloads == nil || deps.Dispatcher == nil || deps.DeadLetter == nil {
		return nil, errors.New("engine: registry, store, payload store, dispatcher and dead-letter publisher are all required")
	}
	if err := checkRetention(cfg, deps.Registry); err != nil {
		return nil, err
	}
	if err := checkKeys(deps.Store, deps.Registry); err != nil {
		return nil, err
	}
	if err := checkRates(deps.Store, deps.Registry); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if js, ok := deps.Store.(store.JobStore); ok && deps.Jobs == nil {
		deps.Jobs = js
	}
	return &Runtime{cfg: cfg, deps: deps, tracer: tracing.Tracer(deps.TracerProvider)}, nil
}

// Registry is the registry the runtime serves.
func (r *Runtime) Registry() *pipeline.Registry { return r.deps.Registry }

// Store is the state store the runtime runs on.
func (r *Runtime) Store() store.Store { return r.deps.Store }

// Payloads is the payload chunk store the runtime runs on.
func (r *Runtime) Payloads() payload.Store { return r.deps.Payloads }

// Dispatcher is the work dispatcher the runtime sends work items with.
func (r *Runtime) Dispatcher() dispatch.Dispatcher { return r.deps.Dispatcher }

// Logger is the runtime's logger.
func (r *Runtime) Logger() *slog.Logger { return r.deps.Logger }

// Now is the runtime clock's time.
func (r *Runtime) Now() time.Time { return r.deps.Clock.Now() }

// Config returns the effective configuration (defaults applied).
func (r *Runtime) Config() Config { return r.cfg }

// SubmitRequest is one submission.
type SubmitRequest struct {
	TenantID   string
	PipelineID string
	// IdempotencyKey is the client's key ("" when none was sent).
	IdempotencyKey string
	Input          payload.Payload
	// Priority is the execution's priority, pipeline.HighestPriority (1)
	// to pipeline.LowestPriority (5); 0 takes the pipeline's default
	// (pipeline.PriorityOf). Out of range: ErrInvalidInput.
	Priority int
	// TraceParent is the caller's W3C traceparent (the submit request's
	// header), when it sent one: with tracing on, the submit span is its
	// child, so that the execution's trace continues the caller's. Ignored
	// when tracing is off, or when ctx carries a span already.
	TraceParent string
	// scheduled: a schedule's fire (schedules.go), whose key is kept
	// whatever the idempotency policy.
	scheduled bool
}

// SubmitResult is the execution a submission created or resolved to.
type SubmitResult struct {
	Execution store.Execution
	// Duplicate is true when the key already mapped to an execution.
	Duplicate bool
}

// Submit records the execution durably (one conditional write of its
// row) and only then dispatches its first work item. A duplicate (the key
// is bound to a live execution of the same request) returns that
// execution and dispatches nothing. A key bound to a different request
// fails with store.ErrKeyMismatch. Neither a duplicate nor a refusal
// stores anything: a keyed submit whose input is too large for the row
// looks for the key's live execution before it writes the input.
func (r *Runtime) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	if r.tracer != nil {
		return r.tracedSubmit(ctx, req)
	}
	return r.submit(ctx, req)
}

func (r *Runtime) submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	p, ok := r.deps.Registry.Get(req.PipelineID)
	if !ok {
		return SubmitResult{}, fmt.Errorf("%w: %s", ErrPipelineNotFound, req.PipelineID)
	}
	if check := p.Steps[0].CheckInput; check != nil && req.Input.Encoding == payload.EncodingJSON {
		// Refused here rather than dead-lettering the execution's first
		// step (an input it cannot decode, a map over its limits).
		if err := check(req.Input); err != nil {
			_, msg, _ := pipeline.Classify(err)
			return SubmitResult{}, fmt.Errorf("%w: %s", ErrInvalidInput, msg)
		}
	}
	if req.Priority != 0 {
		if err := pipeline.CheckPriority(req.Priority); err != nil {
			return SubmitResult{}, fmt.Errorf("%w: %s", ErrInvalidInput, err.Error())
		}
	}
	concurrencyKey, err := p.KeyOf(req.Input)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("%w: %s", ErrInvalidInput, err.Error())
	}
	rateLimit, rateKey, err := rateOf(p, req.Input)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("%w: %s", ErrInvalidInput, err.Error())
	}
	digest := requestDigest(req.Input)
	key := req.IdempotencyKey
	switch {
	case r.cfg.IdempotencyPolicy == ServerKeyOnly && !req.scheduled:
		key = "derived:" + hashParts(req.TenantID, req.PipelineID, digest)
	case key == "" && r.cfg.IdempotencyPolicy == ClientKeyRequired:
		return SubmitResult{}, ErrKeyRequired
	}
	fingerprint := hashParts(p.ID, string(req.Input.Encoding), req.Input.ContentType, req.Input.Message, digest)[:32]
	id, token := r.newExecutionID(req.TenantID, key)
	if key != "" && len(req.Input.Data) > r.cfg.InlineBudget {
		// The input goes to the payload store: answer a duplicate or a
		// refusal from the live row first, so that neither stores a part.
		cur, err := r.deps.Store.Get(ctx, store.Key{TenantID: req.TenantID, ExecutionID: store.Slot(id)})
		switch {
		case err == nil && cur.Fingerprint != fingerprint:
			return SubmitResult{}, store.ErrKeyMismatch
		case err == nil:
			return r.duplicate(ctx, cur), nil
		case !errors.Is(err, store.ErrNotFound):
			return SubmitResult{}, err
		}
	}
	now := r.deps.Clock.Now()
	expires := now.Add(r.cfg.ExecutionTTL)
	records := r.recordsExpire(expires)
	// The input's slot is the execution (incarnation) itself: nothing of
	// it is shared with another execution of the key.
	in, err := payload.Write(ctx, r.deps.Payloads, req.Input, "input/"+store.KeyID(req.TenantID, id), r.cfg.InlineBudget, records)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("engine: store input: %w", err)
	}
	clientKey := key
	if key != req.IdempotencyKey {
		clientKey = "" // derived: not stored
	}
	row := store.Execution{
		TenantID: req.TenantID, ExecutionID: id, PipelineID: p.ID, PipelineVersion: p.VersionID(),
		Status: store.Queued, Version: 1, StepName: p.Steps[0].Name, Attempt: 1,
		NextDueAt: now, SweepAt: r.firstLook(now), IdempotencyKey: clientKey, Input: in,
		Fingerprint: fingerprint, CreateToken: token,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: expires, RecordsExpireAt: records,
		ConcurrencyKey: concurrencyKey, RateLimit: rateLimit, RateKey: rateKey,
	}
	r.prioritize(&row, pipeline.PriorityOf(p, req.Priority))
	got, created, err := r.deps.Store.CreateOrGet(ctx, store.CreateRequest{Execution: row})
	if (err == nil && !created) || errors.Is(err, store.ErrKeyMismatch) {
		// Another create won the key meanwhile: the input just written
		// belongs to no execution (best effort; its expiry ends it else).
		r.discard(ctx, in)
	}
	if err != nil {
		return SubmitResult{}, err
	}
	if !created {
		return r.duplicate(ctx, got), nil
	}
	log := r.execLogger(&got)
	log.LogAttrs(ctx, slog.LevelInfo, "execution_submitted", slog.String("event", "execution_submitted"),
		slog.String("pipeline_version", got.PipelineVersion),
		slog.Int64("input_bytes", in.Length), slog.Bool("input_inline", in.ManifestID == ""))
	r.dispatch(ctx, &got, 0)
	return SubmitResult{Execution: got}, nil
}

// duplicate is the answer to a submit the key's live execution answers.
func (r *Runtime) duplicate(ctx context.Context, e store.Execution) SubmitResult {
	r.execLogger(&e).LogAttrs(ctx, slog.LevelInfo, "execution_deduplicated", slog.String("event", "execution_deduplicated"))
	return SubmitResult{Execution: e, Duplicate: true}
}

// discard deletes the stored parts of a payload no execution references.
func (r *Runtime) discard(ctx context.Context, ref payload.Ref) {
	if ref.ManifestID == "" {
		return
	}
	if err := payload.Delete(ctx, r.deps.Payloads, ref); err != nil {
		r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "payload_discard_failed", slog.String("event", "payload_discard_failed"),
			slog.String("payload_id", ref.ManifestID), slog.String("error", err.Error()))
	}
}

// Status returns the execution's row as the tenant sees it.
func (r *Runtime) Status(ctx context.Context, key store.Key) (store.Execution, error) {
	return r.deps.Store.Get(ctx, key)
}

// Result returns the result of a SUCCEEDED execution. Otherwise it returns
// the row and an error wrapping ErrNotSucceeded.
func (r *Runtime) Result(ctx context.Context, key store.Key) (store.Execution, payload.Payload, error) {
	e, err := r.deps.Store.Get(ctx, key)
	if err != nil {
		return e, payload.Payload{}, err
	}
	if e.Status != store.Succeeded {
		return e, payload.Payload{}, fmt.Errorf("%w: status %s", ErrNotSucceeded, e.Status)
	}
	p, err := payload.Read(ctx, r.deps.Payloads, e.Result)
	return e, p, err
}

// History returns the execution's history, its events in commit order
// numbered from 1 (Deps.History). An unknown execution, or another
// tenant's, returns store.ErrNotFound; without a history reader it returns
// ErrHistoryUnavailable.
func (r *Runtime) History(ctx context.Context, key store.Key) ([]history.Event, error) {
	if r.deps.History == nil {
		return nil, ErrHistoryUnavailable
	}
	return r.deps.History.History(ctx, key)
}

// RedriveOptions are the operator's inputs to a re-drive.
type RedriveOptions struct {
	// Reason is recorded as the audit note.
	Reason string
	// ExpectedVersion, when non-nil, must equal the current version.
	ExpectedVersion *int64
	// ConfirmedNoRemoteEffect is the operator's statement that the remote
	// invocation of a REMOTE_OUTCOME_UNKNOWN execution completed, was
	// cancelled, or can otherwise make no more effects. Required to
	// re-drive that status; ignored for DLQ and FAILED.
	ConfirmedNoRemoteEffect bool
	// RedriveID names the bulk re-drive this re-drive is part of ("" for
	// a single re-drive); the audit log event carries it.
	RedriveID string
}

// Redrive sends a DLQ or FAILED execution back to QUEUED at its failed
// step for exactly one more attempt, recording reason as an audit note.
// expectedVersion, when non-nil, must equal the current version.
func (r *Runtime) Redrive(ctx context.Context, key store.Key, reason string, expectedVersion *int64) (store.Execution, error) {
	return r.RedriveWith(ctx, key, RedriveOptions{Reason: reason, ExpectedVersion: expectedVersion})
}

// RedriveWith is Redrive with every option. A DLQ or FAILED execution, or
// a REMOTE_OUTCOME_UNKNOWN one when opts.ConfirmedNoRemoteEffect is set,
// goes back to QUEUED at its current step for exactly one more (new)
// attempt. REMOTE_OUTCOME_UNKNOWN without the confirmation returns an
// error wrapping ErrRemoteEffectUnconfirmed; any other status
// ErrNotRedrivable; a map parent whose children it has yet to collect,
// some gone, ErrChildrenExpired (childrenKept).
func (r *Runtime) RedriveWith(ctx context.Context, key store.Key, opts RedriveOptions) (store.Execution, error) {
	reason, expectedVersion := opts.Reason, opts.ExpectedVersion
	e, err := r.deps.Store.Get(ctx, key)
	if err != nil {
		return e, err
	}
	if expectedVersion != nil && *expectedVersion != e.Version {
		return e, fmt.Errorf("%w: expected %d, current %d", ErrVersionMismatch, *expectedVersion, e.Version)
	}
	switch {
	case e.Status == store.DLQ, e.Status == store.Failed:
	case e.Status == store.RemoteOutcomeUnknown && opts.ConfirmedNoRemoteEffect:
	case e.Status == store.RemoteOutcomeUnknown:
		return e, ErrRemoteEffectUnconfirmed
	default:
		return e, fmt.Errorf("%w: status %s", ErrNotRedrivable, e.Status)
	}
	if e.Status == store.Failed && e.DLQPending {
		// Its dead letter is still to be published: publish it first, so
		// that the failure the re-drive answers is on record, then re-drive
		// the DLQ row (the version the caller expected has moved by one).
		if !r.deadLetter(ctx, e) {
			return e, fmt.Errorf("%w: the execution's dead letter is still pending and could not be published; retry the re-drive", store.ErrUnavailable)
		}
		if e, err = r.deps.Store.Get(ctx, key); err != nil {
			return e, err
		}
		if e.Status != store.DLQ {
			return e, fmt.Errorf("%w: status %s", ErrNotRedrivable, e.Status)
		}
	}
	if err := r.childrenKept(ctx, &e); err != nil {
		return e, err
	}
	now := r.deps.Clock.Now()
	next := e
	next.Status, next.Attempt, next.MaxAttempt, next.Releases = store.Queued, e.Attempt+1, e.Attempt+1, 0
	next.NextDueAt, next.UpdatedAt = now, now
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	next.ExpiresAt = r.keepAlive(&e, now)
	next.LeaseOwner, next.LeaseExpiresAt = "", time.Time{}
	next.Error, next.DLQPending = nil, false
	next.Note = store.Truncate(reason, store.MaxErrorMessage)
	next.RedriveCount++
	next.SlotHeld = false // a new life: it acquires a slot again (its old one is stale)
	got, err := r.update(ctx, store.Guard{Key: key, Version: e.Version}, next)
	if err != nil {
		return e, err
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelWarn, "execution_redriven", slog.String("event", "execution_redriven"),
		slog.String("reason", next.Note), slog.Int("redrive_count", got.RedriveCount),
		slog.String("from_status", string(e.Status)), slog.Bool("confirmed_no_remote_effect", opts.ConfirmedNoRemoteEffect),
		slog.String("redrive_id", opts.RedriveID))
	r.dispatch(ctx, &got, 0)
	return got, nil
}

// requestDigest is the digest that says whether two submits carry the
// same input: of the JSON without insignificant whitespace for a JSON
// input (the same document sent pretty-printed and compact is the same
// request), of the bytes otherwise. A compact JSON input's digest is its
// bytes' digest, as before.
func requestDigest(in payload.Payload) string {
	if in.Encoding == payload.EncodingJSON {
		var b bytes.Buffer
		if json.Compact(&b, in.Data) == nil {
			return payload.Digest(b.Bytes())
		}
	}
	return payload.Digest(in.Data)
}

// dispatch sends the execution's work item within the dispatch timeout,
// on a context that a caller's cancellation does not cut short (the commit
// before it has landed). A failure is logged and reported, not fatal: the
// row is in the sweep index, so the sweeper dispatches it again.
func (r *Runtime) dispatch(ctx context.Context, e *store.Execution, delay time.Duration) bool {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DispatchTimeout)
	defer cancel()
	item := dispatch.ItemOf(e)
	sp, dctx := r.startDispatch(dctx, spanDispatch, e, &item)
	err := r.deps.Dispatcher.Dispatch(dctx, dispatch.Message{Item: item, Delay: delay})
	if sp != nil {
		endSpan(sp, err, "dispatch_failed")
	}
	if err != nil {
		r.execLogger(e).LogAttrs(ctx, slog.LevelWarn, "dispatch_failed", slog.String("event", "dispatch_failed"),
			slog.String("error", err.Error()))
		return false
	}
	return true
}

// firstLook is when the sweeper first looks at a row that was just
// submitted, re-driven or handed a retry: a grace after it became due, so
// that a lost work item is found while a delivered one is not duplicated.
func (r *Runtime) firstLook(due time.Time) time.Time { return due.Add(r.cfg.SweepGrace) }

// keepAlive is the expiry a live (non-terminal) row gets at a commit: at
// least a retention from now, never earlier than it already was.
func (r *Runtime) keepAlive(e *store.Execution, now time.Time) time.Time {
	return maxTime(e.ExpiresAt, now.Add(r.cfg.ExecutionTTL))
}

// recordsExpire is the expiry of records written for a row that expires at
// rowExpires (payload parts, effect records): one more retention, so that
// later extensions of the row find them still there for a while.
func (r *Runtime) recordsExpire(rowExpires time.Time) time.Time {
	return rowExpires.Add(r.cfg.ExecutionTTL)
}

// horizon is the records' horizon (store.Execution.RecordsExpireAt) of a
// row whose horizon was cur once a write sets its expiry to expires: cur
// while it stays at least half a retention past the expiry, else a
// retention past it. So the horizon, and the records with it, move about
// once per half a retention of an execution's life, not at every commit.
func (r *Runtime) horizon(cur, expires time.Time) time.Time {
	if !cur.IsZero() && !expires.Add(r.cfg.ExecutionTTL/2).After(cur) {
		return cur
	}
	return r.recordsExpire(expires)
}

// keepRecords gives next the horizon its expiry needs. When the horizon
// moves, it first extends every stored payload next references (input,
// result, a late completion) to it, except those in written (this write's
// own, written with the new horizon already): no record the row needs
// expires while the row lives, however often it is extended (retries,
// parks, re-drives). A payload already gone is logged and left (the step
// reading it fails with payload_unreadable); any other failure is
// returned, and the write must not happen.
func (r *Runtime) keepRecords(ctx context.Context, next *store.Execution, written ...payload.Ref) error {
	h := r.horizon(next.RecordsExpireAt, next.ExpiresAt)
	if h.Equal(next.RecordsExpireAt) {
		return nil
	}
	refs := []payload.Ref{next.Input, next.Result}
	if next.Await != nil {
		refs = append(refs, next.Await.LatePayload)
	}
	if next.Children != nil && next.Children.Prior != nil {
		refs = append(refs, *next.Children.Prior)
	}
	for _, ref := range refs {
		if ref.ManifestID == "" || slices.ContainsFunc(written, func(w payload.Ref) bool { return w.ManifestID == ref.ManifestID }) {
			continue
		}
		err := payload.Extend(ctx, r.deps.Payloads, ref, h)
		switch {
		case errors.Is(err, payload.ErrNotFound), errors.Is(err, payload.ErrCorrupt):
			r.execLogger(next).LogAttrs(ctx, slog.LevelError, "payload_lost", slog.String("event", "payload_lost"),
				slog.String("payload_id", ref.ManifestID), slog.String("error", err.Error()))
		case err != nil:
			return fmt.Errorf("engine: keep the payloads of %s: %w", next.ExecutionID, err)
		}
	}
	next.RecordsExpireAt = h
	return nil
}

// update is Store.Update after keepRecords: every write that may move a
// row's expiry goes through it.
func (r *Runtime) update(ctx context.Context, g store.Guard, next store.Execution, written ...payload.Ref) (store.Execution, error) {
	if err := r.keepRecords(ctx, &next, written...); err != nil {
		return store.Execution{}, err
	}
	return r.deps.Store.Update(ctx, g, next)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkRetention refuses a configuration whose executions would wait
// longer than the retention: an await step's timeout, a sleep, or a retry delay
// (the default policy's, or a step's own), beyond it. The runtime keeps a
// waiting row alive past its wait anyway; refusing at startup tells the
// author that the wait is not what they meant.
func checkRetention(cfg Config, reg *pipeline.Registry) error {
	if cfg.Retry.MaxDelay > cfg.ExecutionTTL {
		return fmt.Errorf("engine: the retry delay may reach %s (pipeline.orchestrator.retry-max-delay), more than the execution retention %s (pipeline.orchestrator.execution-ttl-days)",
			cfg.Retry.MaxDelay, cfg.ExecutionTTL)
	}
	for _, p := range reg.All() {
		for _, s := range p.Steps {
			if s.AwaitTimeout > cfg.ExecutionTTL {
				return fmt.Errorf("engine: pipeline %s step %s: await timeout %s exceeds the execution retention %s (pipeline.orchestrator.execution-ttl-days): the parked execution could not be kept that long",
					p.ID, s.Name, s.AwaitTimeout, cfg.ExecutionTTL)
			}
			if s.SleepFor > cfg.ExecutionTTL {
				return fmt.Errorf("engine: pipeline %s step %s: sleep %s exceeds the execution retention %s (pipeline.orchestrator.execution-ttl-days)",
					p.ID, s.Name, s.SleepFor, cfg.ExecutionTTL)
			}
			if s.Retry != nil && s.Retry.MaxDelay > cfg.ExecutionTTL {
				return fmt.Errorf("engine: pipeline %s step %s: its retry delay may reach %s (WithRetry MaxDelay), more than the execution retention %s (pipeline.orchestrator.execution-ttl-days)",
					p.ID, s.Name, s.Retry.MaxDelay, cfg.ExecutionTTL)
			}
		}
	}
	return nil
}

// execLogger returns the logger carrying an execution's identifying fields.
func (r *Runtime) execLogger(e *store.Execution) *slog.Logger {
	return r.deps.Logger.With(
		slog.String("execution_id", e.ExecutionID),
		slog.String("tenant", e.TenantID),
		slog.String("pipeline", e.PipelineID),
		slog.String("step", e.StepName),
		slog.Int("attempt", e.Attempt),
	)
}

// hashParts is the hex SHA-256 of the parts, each length-prefixed so no
// two different lists hash alike.
func hashParts(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}
