// Package wiring assembles a process: Assemble turns a configuration and
// a registry into the runtime on the backend the configuration picks,
// its HTTP handler, the loops a long-running process runs beside it, and
// Close. Every entry point assembles here (server.Start and server.Serve,
// lambdafn.Boot for each of the five functions); each passes in Options
// only the parts its role runs (the backends it offers, the HTTP
// handler's constructor, the object store, the secret resolver), so that
// a Lambda function's binary links nothing of the other roles.
//
// The backend is a backend.Backend value: Options.Backend when set (a
// user's own), else Options.Backends[state-provider]. What it leaves nil
// wiring fills in with the defaults every process has (the in-process
// dispatcher, the log dead-letter sink that records with the backend's
// recorder, the log or memory reject sink), refusing a provider key the
// backend does not serve. The test-only faults.* keys (Options.Faults)
// wrap the result.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/metrics"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/internal/tracing"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// Options are what an entry point assembles its process with.
type Options struct {
	// Backends are the backends the state-provider key picks from, by
	// its value: the entry point offers only those it links (the Lambda
	// functions: memory and DynamoDB + SQS; qasync serve: all three).
	Backends map[string]backend.Backend
	// Backend, when set, is the backend instead of the one the key names
	// (server.WithBackend, lambdafn.WithBackend).
	Backend backend.Backend
	// Logger defaults to discarding.
	Logger *slog.Logger
	// AWS is the process's AWS session: the test faults' DynamoDB
	// middleware goes on it. Nil: a DynamoDB fault is refused.
	AWS *awsclient.Session
	// HTTP builds the process's HTTP handler once the runtime exists
	// (nil: the process serves no HTTP).
	HTTP func(rt *engine.Runtime, c config.Config, log *slog.Logger) http.Handler
	// Lifecycle builds the EventBridge client lifecycle events are sent
	// with (LifecycleEvents) when events.sink is eventbridge with a bus:
	// the processes that publish them offer it (qasync serve, which drains
	// the embedded and memory stores' outboxes and feeds the DynamoDB
	// stream, and the history function, which consumes the stream). Nil:
	// the process sends none.
	Lifecycle func(ctx context.Context) (lifecycle.PutEventsAPI, error)
	// Objects is the object store of pipelines' Output, handed to the
	// steps (nil: the process runs no step that publishes one).
	Objects pipeline.ObjectStore
	// Secrets fills the await resume-token secret from the Secrets
	// Manager secret of await.resume-token-secret-arn (ResolveAwaitSecret
	// over a client). Nil: the process does not need the secret (it
	// neither parks an await nor completes one) and leaves it unset.
	Secrets func(ctx context.Context, c *config.Config) error
	// Observers hear the runtime's events besides the configured metrics
	// and lifecycle events.
	Observers []engine.Observer
	// Faults are the test-only faults.* keys (testkeys.Load): the
	// process's clock skewed, its DynamoDB calls, dispatches, commits and
	// dead-letter publishes failed at the given rates. Zero: none.
	Faults testkeys.Faults
	// TracingSync exports each span as it ends instead of in batches
	// (tracing.Options.Sync): for Lambda functions, whose process is frozen
	// between invocations and may end without a flush.
	TracingSync bool
}

// Process is an assembled process.
type Process struct {
	// Config is the effective configuration (providers resolved, the
	// await secret fetched).
	Config config.Config
	// Runtime is the engine on the backend's seams.
	Runtime *engine.Runtime
	// Seams are the backend's seams with the defaults filled in (the
	// faults' wrappers are inside Runtime only).
	Seams backend.Seams
	// Metrics writes EMF metrics when metrics.namespace is set; nil (a
	// no-op) otherwise.
	Metrics *metrics.EMF
	// Handler is the HTTP handler (nil without Options.HTTP).
	Handler http.Handler
	// Logger is the process's logger.
	Logger *slog.Logger
	// Events is the sink of lifecycle events (lifecycle.Configured) and
	// EventTypes the types sent to it; nil when the process sends none.
	Events     outbox.Sink
	EventTypes outbox.Types

	closeDefaults func(ctx context.Context) error
	// tracer is the tracer provider of tracing.exporter (nil: off).
	tracer   *tracing.Provider
	once     sync.Once
	closeErr error
}

// Assemble validates c, opens the backend, fills in the defaults, and
// builds the runtime, its observers and its HTTP handler. Nothing runs
// yet but the deliveries of a backend's in-process dispatcher; Run runs
// the loops, Close stops everything. Every error names the key to fix.
func Assemble(ctx context.Context, c config.Config, reg *pipeline.Registry, o Options) (*Process, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("wiring: no pipeline registry")
	}
	c = c.ResolveProviders()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Secrets != nil {
		if err := o.Secrets(ctx, &c); err != nil {
			return nil, err
		}
	}
	if err := checkOutputBucket(c, reg); err != nil {
		return nil, err
	}
	if c.StrictStartup {
		if err := strictConfig(c); err != nil {
			return nil, err
		}
	}
	b := o.Backend
	if b == nil {
		if b = o.Backends[c.StateProvider]; b == nil {
			return nil, fmt.Errorf("%s: %q is not offered by this process", config.FullKey("state-provider"), c.StateProvider)
		}
	}
	clk := faultClock(o.Faults, log)
	if err := faultAWS(o.Faults, o.AWS, log); err != nil {
		return nil, err
	}
	p := &Process{Config: c, Logger: log}
	ready := make(chan struct{})
	work := func(ctx context.Context, item dispatch.WorkItem) error {
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		return p.Runtime.Process(ctx, item)
	}
	env := backend.Env{Config: c, Clock: clk, Logger: log, Work: work,
		DeadLetter: func(ctx context.Context, m backend.DeadLetterMessage) error {
			select {
			case <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			if p.Seams.Recorder == nil {
				return errors.New("wiring: a dead letter arrived, and the backend keeps no records")
			}
			return lambdahandlers.RecordDeadLetter(ctx, p.Runtime, p.Seams.Recorder, p.Metrics, log, m)
		}}
	seams, err := b.Open(ctx, env)
	if err != nil {
		return nil, err
	}
	if seams == nil || seams.State == nil || seams.Payloads == nil {
		return nil, fmt.Errorf("%w: the backend of %s %q opened no state or payload store", backend.ErrMissingSeam, config.FullKey("state-provider"), c.StateProvider)
	}
	p.Seams = *seams
	if err := p.defaults(env); err != nil {
		_ = p.Close(context.Background())
		return nil, err
	}
	observers := append([]engine.Observer(nil), o.Observers...)
	if c.MetricsNamespace != "" {
		p.Metrics = metrics.New(os.Stdout, c.MetricsNamespace)
		observers = append(observers, p.Metrics)
	}
	if err := p.lifecycleEvents(ctx, o.Lifecycle); err != nil {
		_ = p.Close(context.Background())
		return nil, err
	}
	topts, err := tracingOptions(ctx, c, o)
	if err != nil {
		_ = p.Close(context.Background())
		return nil, err
	}
	if p.tracer, err = tracing.New(ctx, topts); err != nil {
		_ = p.Close(context.Background())
		return nil, fmt.Errorf("wiring: %s: %w", config.FullKey("tracing.exporter"), err)
	}
	deps := faultSeams(o.Faults, log, engine.Deps{
		Registry: reg, Store: p.Seams.State, Payloads: p.Seams.Payloads, Dispatcher: p.Seams.Dispatcher,
		DeadLetter: p.Seams.DeadLetters, Effects: p.Seams.Effects, Clock: clk, Logger: log, Observers: observers,
		Rejects: &reject.Sink{Publisher: p.Seams.Rejects, IncludePayload: c.ItemRejectIncludePayload,
			Policy: reject.Policy(c.ItemRejectPublishFailurePolicy), Logger: log},
		History: p.Seams.History, Objects: o.Objects,
	})
	if lister, ok := p.Seams.Recorder.(deadletter.Lister); ok {
		deps.DeadLetters = lister
	}
	if p.tracer != nil {
		deps.TracerProvider = p.tracer
	}
	if js, ok := p.Seams.State.(store.JobStore); ok {
		deps.Jobs = js // beside the rows (a fault wrapper of the store hides it)
	}
	rt, err := engine.New(RuntimeConfig(c), deps)
	if err != nil {
		_ = p.Close(context.Background())
		return nil, err
	}
	p.Runtime = rt
	close(ready)
	if o.HTTP != nil {
		p.Handler = o.HTTP(rt, c, log)
	}
	return p, nil
}

// tracingOptions are the tracer provider's options of c's tracing.*
// keys. Exporter xray signs with the credentials and region of the
// process's AWS session (the Lambda function's execution role), loaded
// here, once, only then.
func tracingOptions(ctx context.Context, c config.Config, o Options) (tracing.Options, error) {
	topts := tracing.Options{Exporter: c.TracingExporter, Endpoint: c.TracingEndpoint,
		Headers: tracing.ParseHeaders(c.TracingHeaders), Gzip: c.TracingCompression == "gzip",
		SampleRatio: c.TracingSampleRatio, ServiceName: "qasync", Sync: o.TracingSync, Logger: o.Logger}
	if !strings.EqualFold(c.TracingExporter, tracing.ExporterXRay) {
		return topts, nil
	}
	if o.AWS == nil {
		return topts, fmt.Errorf("wiring: %s xray: this process has no AWS session", config.FullKey("tracing.exporter"))
	}
	cfg, err := o.AWS.Config(ctx)
	if err != nil {
		return topts, fmt.Errorf("wiring: %s xray: %w", config.FullKey("tracing.exporter"), err)
	}
	if cfg.Credentials == nil || cfg.Region == "" {
		return topts, fmt.Errorf("wiring: %s xray: the AWS configuration has no credentials or no region", config.FullKey("tracing.exporter"))
	}
	topts.AWS = &tracing.SigV4{Credentials: cfg.Credentials, Region: cfg.Region}
	return topts, nil
}

// defaults fills in what the backend left nil, refusing a provider key
// that names something the backend does not serve.
func (p *Process) defaults(env backend.Env) error {
	c, log := env.Config, env.Logger
	notServed := func(key, value string) error {
		return fmt.Errorf("%s: %q is not served by the backend of %s %q", config.FullKey(key), value, config.FullKey("state-provider"), c.StateProvider)
	}
	s := &p.Seams
	if s.Dispatcher == nil {
		if c.DispatcherProvider != "event" {
			return notServed("dispatcher-provider", c.DispatcherProvider)
		}
		pool := memory.NewDispatcher(env.Work, memory.DispatcherOptions{Workers: c.WorkerConcurrency})
		s.Dispatcher, p.closeDefaults = pool, pool.Close
	}
	if s.DeadLetters == nil {
		if c.DLQProvider != "log" {
			return notServed("dlq-provider", c.DLQProvider)
		}
		// No dead-letter consumer reads a log: record here what it would.
		s.DeadLetters = &RecordingDLQ{Inner: memory.NewLogDLQ(log), Recorder: s.Recorder, Clock: env.Clock, Logger: log}
	}
	if s.Rejects == nil {
		switch c.ItemRejectProvider {
		case "log":
			s.Rejects = reject.NewLog(log)
		case "memory":
			s.Rejects = reject.NewMemory()
		default:
			return notServed("item-reject.provider", c.ItemRejectProvider)
		}
	}
	return nil
}

// Run runs the loops of a long-running process until ctx ends: the
// sweeper and, beside it, the bulk re-drive jobs' and the schedules'
// drivers (every sweep-interval), and the backend's loops (a poller, consumers, a
// feed). When ctx ends the runtime drains (in-flight steps finish and
// commit, none chains on) and Run returns once every loop has.
func (p *Process) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { p.Runtime.RunSweeper(ctx, p.Config.SweepInterval) })
	wg.Go(func() { p.Runtime.RunRedrives(ctx, p.Config.SweepInterval) })
	wg.Go(func() { p.Runtime.RunSchedules(ctx, p.Config.SweepInterval) })
	wg.Go(func() { p.RunLoops(ctx) })
	wg.Wait()
}

// RunLoops runs the backend's loops named (all of them when none is
// named) until ctx ends; Run runs them with the sweeper. When ctx ends
// the runtime drains first. A loop that fails before is logged as event
// loop_failed.
func (p *Process) RunLoops(ctx context.Context, names ...string) {
	stop := context.AfterFunc(ctx, p.Runtime.Drain)
	defer stop()
	var wg sync.WaitGroup
	for _, loop := range p.Seams.Loops {
		if len(names) > 0 && !slices.Contains(names, loop.Name) {
			continue
		}
		wg.Go(func() {
			if err := loop.Run(ctx); err != nil && ctx.Err() == nil {
				p.Logger.LogAttrs(ctx, slog.LevelError, "loop_failed", slog.String("event", "loop_failed"),
					slog.String("loop", loop.Name), slog.String("error", err.Error()))
			}
		})
	}
	wg.Wait()
}

// Close stops taking work: the runtime drains, in-flight deliveries of
// an in-process dispatcher may finish until ctx ends (then their leases
// are handed back), and the backend releases what it holds (the embedded
// store its data directory). Call it after Run returned; later calls
// return the first call's result.
func (p *Process) Close(ctx context.Context) error {
	p.once.Do(func() {
		if p.Runtime != nil {
			p.Runtime.Drain()
		}
		if p.closeDefaults != nil {
			p.closeErr = p.closeDefaults(ctx)
		}
		if p.Seams.Close != nil {
			p.closeErr = errors.Join(p.closeErr, p.Seams.Close(ctx))
		}
		// Last: the spans of the work drained above are flushed.
		p.closeErr = errors.Join(p.closeErr, p.tracer.Shutdown(ctx))
	})
	return p.closeErr
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
		RateLimitHorizon:    c.RateLimitHorizon,
		PriorityAging:       c.PriorityAging,
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

// checkOutputBucket refuses a registry with a pipeline whose Output.To
// uses {outputBucket} when output.bucket is not set: the publish could
// never succeed.
func checkOutputBucket(c config.Config, reg *pipeline.Registry) error {
	if c.OutputBucket != "" {
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

// UsesS3Output reports whether a registered pipeline publishes its
// output to S3.
func UsesS3Output(reg *pipeline.Registry) bool {
	for _, id := range reg.IDs() {
		if p, _ := reg.Get(id); p.Output != nil && strings.HasPrefix(p.Output.To, "s3://") {
			return true
		}
	}
	return false
}

// strictConfig refuses, under strict startup, what the configuration
// alone shows to be unfit for a durable deployment, before the backend
// opens (no AWS call, no file), naming the key of each problem: beside a
// durable state store (any but memory), work items, dead letters or
// rejected items kept only in this process (dispatcher-provider event,
// dlq-provider log, item-reject.provider log or memory); a durable mode
// with the OPTIONAL_CLIENT_KEY idempotency policy; and everywhere the
// X-Tenant-Id header as the tenant source (any caller can send it).
func strictConfig(c config.Config) error {
	var errs []error
	key := func(k string, err error) { errs = append(errs, fmt.Errorf("%s: %w", config.FullKey(k), err)) }
	if c.StateProvider != "memory" {
		if c.DLQProvider == "log" {
			key("dlq-provider", fmt.Errorf("strict startup with state-provider %s refuses %q (dead letters would be kept only in this process's log): use sqs with %s",
				c.StateProvider, c.DLQProvider, config.FullKey("dlq-url")))
		}
		if c.DispatcherProvider == "event" {
			key("dispatcher-provider", fmt.Errorf("strict startup with state-provider %s refuses %q (work items would be kept only in this process's memory): use sqs with %s",
				c.StateProvider, c.DispatcherProvider, config.FullKey("queue-url")))
		}
		if c.ItemRejectProvider == "log" || c.ItemRejectProvider == "memory" {
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

// LifecycleEvents is the Options.Lifecycle of a process that publishes
// lifecycle events: sess's EventBridge client.
func LifecycleEvents(sess *awsclient.Session) func(context.Context) (lifecycle.PutEventsAPI, error) {
	return func(ctx context.Context) (lifecycle.PutEventsAPI, error) {
		return awsclient.EventBridge(ctx, sess)
	}
}
