// Package providers turns configuration into a wired Runtime: it builds
// the state store, payload store, effect log, dispatcher and dead-letter publisher the
// configuration names (memory / event / log for local development,
// DynamoDB / SQS for durable execution), verifies their resources under
// strict startup, and maps the configuration onto engine.Config. Every
// binary (qasync serve, and the Lambda functions) builds its runtime here.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/metrics"
	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// Set is a runtime with the providers it runs on.
type Set struct {
	Runtime *engine.Runtime
	// Local is the in-process dispatcher when dispatcher-provider=event;
	// its workers start with Open.
	Local *memory.Dispatcher
	// Embedded is the embedded store when state-provider=embedded (every
	// seam in its data directory); Close closes it.
	Embedded *embedded.DB
	// Queue is the embedded store's dispatcher when
	// dispatcher-provider=embedded; its workers start with Open.
	Queue *embedded.Dispatcher
	// Poller consumes the work queue when dispatcher-provider=sqs; Work
	// runs it.
	Poller *sqsbackend.Poller
	// Clients are the AWS clients, when a durable provider is configured.
	Clients *awsclient.Clients
	// Recorder keeps the dead-letter consumer's records (DynamoDB with
	// state-provider dynamo, memory otherwise).
	Recorder deadletter.Recorder
	// History is the DynamoDB history of the executions (state-provider
	// dynamo; nil otherwise): the history Lambda function applies the
	// execution table's stream batches to it, and qasync serve's stream
	// poller (HistoryFeed) does the same locally.
	History *dynamo.History
	// Metrics writes EMF metrics when metrics.namespace is set; nil (a
	// no-op) otherwise.
	Metrics *metrics.EMF
	// Rejects is the Item Reject Sink handed to steps
	// (pipeline.item-reject.*).
	Rejects *reject.Sink
	// RejectMemory holds the envelopes when item-reject.provider=memory.
	RejectMemory *reject.Memory
	// Objects is the object store of pipelines' Output (Terminal Object
	// Publish): file:// always, s3:// with AWS clients.
	Objects objects.Router
}

// Work runs the work consumer until ctx ends: the SQS poller when the
// dispatcher is sqs (returning once in-flight transitions are settled),
// nothing for the in-process dispatcher, whose workers run from Open.
func (s *Set) Work(ctx context.Context) error {
	if s.Poller == nil {
		<-ctx.Done()
		return nil
	}
	stop := context.AfterFunc(ctx, s.Runtime.Drain) // in-flight steps finish, none chain
	defer stop()
	return s.Poller.Run(ctx)
}

// Close stops the in-process or embedded dispatcher: no new work,
// in-flight steps may finish until ctx ends, then their leases are
// released; then it closes the embedded store (releasing its data
// directory).
func (s *Set) Close(ctx context.Context) error {
	var err error
	if (s.Local != nil || s.Queue != nil) && s.Runtime != nil {
		s.Runtime.Drain()
	}
	if s.Local != nil {
		err = s.Local.Close(ctx)
	}
	if s.Queue != nil {
		err = errors.Join(err, s.Queue.Close(ctx))
	}
	if s.Embedded != nil {
		err = errors.Join(err, s.Embedded.Close())
	}
	return err
}

// RuntimeConfig maps the configuration onto the runtime's policy.
func RuntimeConfig(c config.Config) engine.Config {
	return engine.Config{
		Lease: c.Lease,
		Retry: pipeline.RetryPolicy{
			MaxRetries: c.MaxRetries, Delay: c.RetryDelay,
			Multiplier: c.RetryMultiplier, MaxDelay: c.RetryMaxDelay,
		},
		SweepLimit:          c.SweepLimit,
		SweepGrace:          c.SweepGrace,
		ClockSkewTolerance:  c.ClockSkewTolerance,
		PipelineVersionWait: c.PipelineVersionWait,
		DispatchTimeout:     c.DispatchTimeout,
		ReleaseLimit:        c.ReleaseLimit,
		ChainMaxSteps:       c.ChainMaxSteps,
		ExecutionTTL:        time.Duration(c.ExecutionTTLDays) * 24 * time.Hour,
		InlineBudget:        c.InlineBudgetBytes,
		IdempotencyPolicy:   engine.IdempotencyPolicy(c.IdempotencyPolicy),
		AwaitSecret:         c.AwaitResumeTokenSecret,
		OutputBucket:        c.OutputBucket,
	}
}

// Durable reports whether any configured provider keeps state outside the
// process.
func Durable(c config.Config) bool {
	return c.StateProvider == "dynamo" || c.DispatcherProvider == "sqs" || c.DLQProvider == "sqs"
}

// needsAWS reports whether the configuration uses any AWS service.
func needsAWS(c config.Config) bool {
	return Durable(c) || c.EventsBusName != "" || c.ItemRejectProvider == "sqs"
}

// Option adjusts Open.
type Option func(*options)

type options struct {
	apiOptions []func(*middleware.Stack) error
	drain      time.Duration
	observers  []engine.Observer
	objects    pipeline.ObjectStore
}

// WithObserver adds an observer of the runtime's events (tests, a
// process of its own that wants to count them).
func WithObserver(o engine.Observer) Option {
	return func(opts *options) { opts.observers = append(opts.observers, o) }
}

// WithObjects replaces the object store that pipelines' Output publishes to
// (tests).
func WithObjects(o pipeline.ObjectStore) Option {
	return func(opts *options) { opts.objects = o }
}

// WithAPIOptions adds SDK middleware to every AWS client (for example an
// awsclient.Counter's).
func WithAPIOptions(fns ...func(*middleware.Stack) error) Option {
	return func(o *options) { o.apiOptions = append(o.apiOptions, fns...) }
}

// WithDrainTimeout bounds how long the SQS poller waits for in-flight
// transitions once Work's context ends (default 20s); then their context
// is cancelled and their leases released.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) { o.drain = d }
}

// Open validates c, builds the providers it names and the runtime on them.
// Under strict startup it first refuses, before any AWS call, a
// configuration unfit for a durable deployment (see strictConfig: with
// state-provider dynamo a log DLQ, the in-process dispatcher or a
// non-durable reject sink; a durable mode with OPTIONAL_CLIENT_KEY;
// tenant-source header), then checks that the tables and queues exist;
// every error names the key to fix. The test-only
// faults.* keys, when set, add DynamoFaults to the AWS clients and wrap
// the dispatcher in a FaultyDispatcher (logged once as event
// test_faults_enabled).
func Open(ctx context.Context, c config.Config, reg *pipeline.Registry, log *slog.Logger, opts ...Option) (*Set, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.ResolveProviders()
	o := options{drain: 20 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	set := &Set{}
	var clk clock.Clock = clock.System{}
	if c.FaultClockOffset != 0 {
		clk = OffsetClock(c.FaultClockOffset) // test only: a skewed worker
	}
	if c.FaultDynamoErrorRate > 0 {
		o.apiOptions = append(o.apiOptions, DynamoFaults(c.FaultDynamoErrorRate, log))
	}
	faults := c.FaultDynamoErrorRate > 0 || c.FaultDispatchDuplicateRate > 0 || c.FaultDispatchDropRate > 0 ||
		c.FaultCommitErrorRate > 0 || c.FaultDLQErrorRate > 0 || c.FaultDLQOutageUntil > 0 || c.FaultClockOffset != 0
	if faults && log != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "test_faults_enabled", slog.String("event", "test_faults_enabled"),
			slog.Float64("dynamo_error_rate", c.FaultDynamoErrorRate),
			slog.Float64("dispatch_duplicate_rate", c.FaultDispatchDuplicateRate),
			slog.Float64("dispatch_drop_rate", c.FaultDispatchDropRate),
			slog.Float64("commit_error_rate", c.FaultCommitErrorRate),
			slog.Float64("dlq_error_rate", c.FaultDLQErrorRate),
			slog.Int64("dlq_outage_until_ms", c.FaultDLQOutageUntil),
			slog.Int64("clock_offset_ms", c.FaultClockOffset.Milliseconds()))
	}
	if err := checkOutputBucket(c, reg); err != nil {
		return nil, err
	}
	if c.StrictStartup {
		// What the configuration alone shows is refused before any AWS
		// call, so that a wrong deployment fails fast and says why.
		if err := strictConfig(c); err != nil {
			return nil, err
		}
	}
	if needsAWS(c) || usesS3Output(reg) {
		clients, err := awsclient.Load(ctx, o.apiOptions...)
		if err != nil {
			return nil, fmt.Errorf("providers: AWS configuration: %w", err)
		}
		set.Clients = &clients
		if c.StrictStartup {
			if err := strict(ctx, c, clients); err != nil {
				return nil, err
			}
		}
	}
	var (
		st  store.Store
		ps  payload.Store
		dlq deadletter.Publisher
		d   dispatch.Dispatcher
		fx  effect.Log
		// hist reads executions' histories: the memory store records them
		// itself; DynamoDB's are fed from the execution table's stream.
		hist history.Reader
	)
	switch c.StateProvider {
	case "dynamo":
		ds, err := dynamo.NewStateStore(set.Clients.DynamoDB, dynamo.Options{
			ExecutionTable: c.ExecutionTable, DueShards: c.DueShards(), Clock: clk})
		if err != nil {
			return nil, err
		}
		dh, err := dynamo.NewHistory(set.Clients.DynamoDB, ds, dynamo.HistoryOptions{
			Table: c.HistoryTable, Retention: time.Duration(c.ExecutionTTLDays) * 24 * time.Hour, Logger: log})
		if err != nil {
			return nil, err
		}
		set.History, hist = dh, dh
		st, ps = ds, dynamo.NewPayloadStore(set.Clients.DynamoDB, c.PayloadTable, clk)
		set.Recorder = dynamo.NewDeadLetters(set.Clients.DynamoDB, c.DeadLetterTable, clk)
		fx = dynamo.NewEffects(set.Clients.DynamoDB, c.EffectTable, clk)
	case "embedded":
		db, err := embedded.Open(c.EmbeddedDataDir, embedded.Options{Clock: clk, Logger: log, BreakLeases: true})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", config.FullKey("embedded.data-dir"), err)
		}
		set.Embedded = db
		es := db.State(clk)
		st, ps, fx, hist = es, db.Payloads(clk), db.Effects(clk), es
		set.Recorder = db.DeadLetters(clk)
	default:
		mem := memory.NewStateStore(clk)
		st, ps, hist = mem, memory.NewPayloadStore(clk), mem
		set.Recorder = memory.NewDeadLetters(clk)
		fx = memory.NewEffects(clk)
	}
	var observers []engine.Observer
	if c.MetricsNamespace != "" {
		set.Metrics = metrics.New(os.Stdout, c.MetricsNamespace)
		observers = append(observers, set.Metrics)
	}
	if c.EventsBusName != "" {
		observers = append(observers, lifecycle.New(set.Clients.EventBridge, c.EventsBusName, lifecycle.WithLogger(log)))
	}
	switch c.DLQProvider {
	case "sqs":
		dlq = sqsbackend.NewDLQ(set.Clients.SQS, c.DLQURL)
	case "embedded":
		dlq = recordAndLog{set.Embedded.DeadLetters(clk), memory.NewLogDLQ(log)}
	default:
		// No dead-letter consumer reads a log: record here what it would.
		dlq = &RecordingDLQ{Inner: memory.NewLogDLQ(log), Recorder: set.Recorder, Clock: clk, Logger: log}
	}
	set.Objects = objects.Router{File: objects.File{}}
	if set.Clients != nil {
		set.Objects.S3 = objects.S3{Client: set.Clients.S3}
	}
	set.Rejects = &reject.Sink{IncludePayload: c.ItemRejectIncludePayload, Policy: reject.Policy(c.ItemRejectPublishFailurePolicy), Logger: log}
	switch c.ItemRejectProvider {
	case "sqs":
		set.Rejects.Publisher = sqsbackend.NewRejects(set.Clients.SQS, c.ItemRejectQueueURL)
	case "memory":
		set.RejectMemory = reject.NewMemory()
		set.Rejects.Publisher = set.RejectMemory
	case "embedded":
		set.Rejects.Publisher = set.Embedded.Rejects()
	default:
		set.Rejects.Publisher = reject.NewLog(log)
	}
	handler := func(ctx context.Context, item dispatch.WorkItem) error { return set.Runtime.Process(ctx, item) }
	switch c.DispatcherProvider {
	case "sqs":
		d = sqsbackend.NewDispatcher(set.Clients.SQS, c.QueueURL, sqsbackend.WithLogger(log))
		set.Poller = sqsbackend.NewPoller(set.Clients.SQS, c.QueueURL, handler, sqsbackend.PollerOptions{
			WaitTimeSeconds: int32(c.SQSWaitSeconds), Concurrency: c.WorkerConcurrency,
			VisibilityTimeout: c.SQSVisibility, DrainTimeout: o.drain, Logger: log,
		})
	case "embedded":
		set.Queue = set.Embedded.NewDispatcher(handler, embedded.DispatcherOptions{Workers: c.WorkerConcurrency})
		d = set.Queue
	default:
		set.Local = memory.NewDispatcher(handler, memory.DispatcherOptions{Workers: c.WorkerConcurrency})
		d = set.Local
	}
	if c.FaultDispatchDuplicateRate > 0 || c.FaultDispatchDropRate > 0 {
		d = &FaultyDispatcher{Inner: d, DuplicateRate: c.FaultDispatchDuplicateRate, DropRate: c.FaultDispatchDropRate, Logger: log}
	}
	jobs, _ := st.(store.JobStore) // bulk re-drive jobs, beside the rows
	if c.FaultCommitErrorRate > 0 {
		st = &FaultyStore{Store: st, CommitRate: c.FaultCommitErrorRate, Logger: log}
	}
	if c.FaultDLQErrorRate > 0 || c.FaultDLQOutageUntil > 0 {
		dlq = &FaultyDLQ{Inner: dlq, Rate: c.FaultDLQErrorRate, OutageUntil: time.UnixMilli(c.FaultDLQOutageUntil), Logger: log}
	}
	lister, _ := set.Recorder.(deadletter.Lister)
	rt, err := engine.New(RuntimeConfig(c), engine.Deps{
		Registry: reg, Store: st, Payloads: ps, Dispatcher: d, DeadLetter: dlq, Effects: fx, Clock: clk, Logger: log,
		Observers: append(observers, o.observers...), Rejects: set.Rejects, Objects: objectsOr(o.objects, set.Objects),
		History:     hist,
		DeadLetters: lister, Jobs: jobs,
	})
	if err != nil {
		_ = set.Close(context.Background())
		return nil, err
	}
	set.Runtime = rt
	if set.Queue != nil {
		set.Queue.Start()
	}
	return set, nil
}

// recordAndLog is the embedded dead-letter sink: the envelope is recorded
// in the store (where the operator plane lists it) and logged as the log
// sink does.
type recordAndLog struct {
	rec deadletter.Publisher
	log deadletter.Publisher
}

// Publish implements deadletter.Publisher: nil once the record is on disk.
func (p recordAndLog) Publish(ctx context.Context, env deadletter.Envelope) error {
	if err := p.rec.Publish(ctx, env); err != nil {
		return err
	}
	return p.log.Publish(ctx, env)
}

// usesS3Output reports whether a registered pipeline publishes its output
// to S3 (which needs the AWS clients even with the memory providers).
func usesS3Output(reg *pipeline.Registry) bool {
	if reg == nil {
		return false
	}
	for _, id := range reg.IDs() {
		if p, _ := reg.Get(id); p.Output != nil && strings.HasPrefix(p.Output.To, "s3://") {
			return true
		}
	}
	return false
}

// checkOutputBucket refuses a registry with a pipeline whose Output.To
// uses {outputBucket} when output.bucket is not set: the publish could
// never succeed.
func checkOutputBucket(c config.Config, reg *pipeline.Registry) error {
	if reg == nil || c.OutputBucket != "" {
		return nil
	}
	for _, id := range reg.IDs() {
		if p, _ := reg.Get(id); p.Output != nil && p.Output.UsesOutputBucket() {
			return fmt.Errorf("%s: pipeline %s publishes its output to %q, but the key is empty (the CDK stack sets it with context outputBucket=true)",
				config.FullKey("output.bucket"), id, p.Output.To)
		}
	}
	return nil
}

// strictConfig refuses, under strict startup, what the configuration
// alone shows to be unfit for a durable deployment, naming the key of each
// problem: with state-provider dynamo, dead letters and work items kept in
// the process (dlq-provider log, dispatcher-provider event) or rejected
// items kept in a log; a durable mode with the OPTIONAL_CLIENT_KEY
// idempotency policy; and everywhere the X-Tenant-Id header as the tenant
// source (any caller can send it).
func strictConfig(c config.Config) error {
	var errs []error
	key := func(k string, err error) { errs = append(errs, fmt.Errorf("%s: %w", config.FullKey(k), err)) }
	if c.StateProvider == "dynamo" {
		if c.DLQProvider != "sqs" {
			key("dlq-provider", fmt.Errorf("strict startup with state-provider dynamo refuses %q (dead letters would be kept only in this process's log): use sqs with %s",
				c.DLQProvider, config.FullKey("dlq-url")))
		}
		if c.DispatcherProvider != "sqs" {
			key("dispatcher-provider", fmt.Errorf("strict startup with state-provider dynamo refuses %q (work items would be kept only in this process's memory): use sqs with %s",
				c.DispatcherProvider, config.FullKey("queue-url")))
		}
		if c.ItemRejectProvider != "sqs" {
			key("item-reject.provider", fmt.Errorf("strict durable startup refuses the non-durable Item Reject Sink %q (rejected items would be lost with the process or its log): use sqs with %s",
				c.ItemRejectProvider, config.FullKey("item-reject.queue-url")))
		}
	}
	if Durable(c) && c.IdempotencyPolicy == string(engine.OptionalClientKey) {
		key("idempotency-policy", errors.New("strict durable startup refuses OPTIONAL_CLIENT_KEY: use CLIENT_KEY_REQUIRED (or SERVER_KEY_ONLY)"))
	}
	if c.TenantSource == "header" {
		key("http.tenant-source", errors.New(`strict startup refuses header (any caller can send X-Tenant-Id and read another tenant's executions): use iam or jwt behind API Gateway, or none for a single tenant`))
	}
	return errors.Join(errs...)
}

// strict verifies the durable resources, naming the key of each problem.
func strict(ctx context.Context, c config.Config, clients awsclient.Clients) error {
	var errs []error
	key := func(k string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", config.FullKey(k), err))
		}
	}
	if c.StateProvider == "dynamo" {
		key("dynamo.execution-table", provision.CheckTables(ctx, clients.DynamoDB, []schema.Table{schema.ExecutionTable(c.ExecutionTable)}))
		key("dynamo.execution-payload-table", provision.CheckTables(ctx, clients.DynamoDB, []schema.Table{schema.PayloadTable(c.PayloadTable)}))
		key("dynamo.dead-letter-table", provision.CheckTables(ctx, clients.DynamoDB, []schema.Table{schema.DeadLetterTable(c.DeadLetterTable)}))
		key("dynamo.effect-table", provision.CheckTables(ctx, clients.DynamoDB, []schema.Table{schema.EffectTable(c.EffectTable)}))
		key("dynamo.history-table", provision.CheckTables(ctx, clients.DynamoDB, []schema.Table{schema.HistoryTable(c.HistoryTable)}))
	}
	if c.DispatcherProvider == "sqs" {
		key("queue-url", provision.CheckQueue(ctx, clients.SQS, c.QueueURL))
	}
	if c.DLQProvider == "sqs" {
		key("dlq-url", provision.CheckQueue(ctx, clients.SQS, c.DLQURL))
	}
	if c.ItemRejectProvider == "sqs" {
		key("item-reject.queue-url", provision.CheckQueue(ctx, clients.SQS, c.ItemRejectQueueURL))
	}
	return errors.Join(errs...)
}

func objectsOr(o pipeline.ObjectStore, def objects.Router) pipeline.ObjectStore {
	if o != nil {
		return o
	}
	return def
}
