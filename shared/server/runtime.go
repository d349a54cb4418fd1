package server

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsbackend"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// Runtime is the local runtime in this process without its HTTP API: the
// workers and the sweeper of a registry on the providers the
// configuration names (by default the embedded store), and Submit as a
// function call. Serve is Start plus the HTTP API; a program that embeds
// qasync (a benchmark, a command-line tool) uses Start.
type Runtime struct {
	p    *wiring.Process
	stop func()
	once sync.Once
}

// Finished describes an execution that reached a terminal status
// (SUCCEEDED, DLQ, or parked as REMOTE_OUTCOME_UNKNOWN); OnFinished hands
// it over after the terminal commit is durable.
type Finished struct {
	TenantID, ExecutionID, PipelineID string
	// IdempotencyKey is the client's key ("" for a derived one).
	IdempotencyKey string
	Status         string
	// Latency is submit to terminal.
	Latency time.Duration
}

// OnFinished calls f after each terminal commit (Start and Serve), from
// the worker that made it: f must be quick.
func OnFinished(f func(Finished)) Option { return func(o *options) { o.finished = f } }

// Start starts the workers and the sweeper of reg on the providers cfg
// names and returns the running Runtime; Close stops it. Errors are those
// of Serve's startup (configuration, providers).
func Start(ctx context.Context, cfg config.Config, reg *pipeline.Registry, opts ...Option) (*Runtime, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	p, err := o.assemble(ctx, cfg, reg, o.logger(cfg), false)
	if err != nil {
		return nil, err
	}
	return &Runtime{p: p, stop: runBackground(p)}, nil
}

// Submitted is the execution a Submit created or resolved to.
type Submitted struct {
	ExecutionID string
	// Duplicate is true when the key already named an execution.
	Duplicate bool
}

// Submit records an execution of pipelineID for tenantID with input (as
// POST /v1/pipelines/{id}/executions does: durable when it returns) and
// hands it to the workers. idempotencyKey may be "" where the
// idempotency policy allows it.
func (r *Runtime) Submit(ctx context.Context, tenantID, pipelineID, idempotencyKey string, input payload.Payload) (Submitted, error) {
	res, err := r.p.Runtime.Submit(ctx, engine.SubmitRequest{TenantID: tenantID, PipelineID: pipelineID, IdempotencyKey: idempotencyKey, Input: input})
	if err != nil {
		return Submitted{}, err
	}
	return Submitted{ExecutionID: res.Execution.ExecutionID, Duplicate: res.Duplicate}, nil
}

// Close stops sweeping and taking work, lets in-flight steps finish until
// ctx ends (then their leases are handed back), and closes the providers
// (the embedded store's directory is released).
func (r *Runtime) Close(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		r.stop()
		err = r.p.Close(ctx)
	})
	return err
}

// logger is the configured logger: WithLogger's, or JSON on stdout at the
// log-level key's level.
func (o *options) logger(cfg config.Config) *slog.Logger {
	if o.log != nil {
		return o.log
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
}

// assemble is the process of Serve (withHTTP) and Start: the runtime on
// the backend cfg names among the three this binary offers (or
// WithBackend's), its loops standing in for the Lambda event sources, the
// object store of steps' outputs (file:// and s3://), the await secret
// fetched from its ARN, the test-only faults of the environment
// (testkeys), and OnFinished's observer.
func (o *options) assemble(ctx context.Context, cfg config.Config, reg *pipeline.Registry, log *slog.Logger, withHTTP bool) (*wiring.Process, error) {
	keys, err := testkeys.Load(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	sess := awsclient.NewSession()
	wo := wiring.Options{
		Backends: map[string]backend.Backend{
			"embedded": embedded.Backend(), "memory": memory.Backend(),
			"dynamo": awsbackend.NewServing(sess, awsbackend.ServingOptions{DrainTimeout: drainTimeout}),
		},
		Backend: o.backend, Logger: log, AWS: sess,
		Objects:   objects.Router{File: objects.File{}, S3: objects.S3{Connect: func(ctx context.Context) (*s3.Client, error) { return awsclient.S3(ctx, sess) }}},
		Secrets:   wiring.Secrets(func(ctx context.Context) (wiring.SecretGetter, error) { return awsclient.SecretsManager(ctx, sess) }),
		Faults:    keys.Faults,
		Lifecycle: wiring.LifecycleEvents(sess),
	}
	if withHTTP {
		wo.HTTP = console.Site
	}
	if f := o.finished; f != nil {
		wo.Observers = append(wo.Observers, engine.ObserverFunc(func(_ context.Context, ev engine.Event) {
			if ev.Terminal() {
				e := ev.Execution
				f(Finished{TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, IdempotencyKey: e.IdempotencyKey,
					Status: string(e.Status), Latency: ev.Latency})
			}
		}))
	}
	return wiring.Assemble(ctx, cfg, reg, wo)
}

// runBackground runs the process's loops (the sweeper, the bulk re-drive
// jobs' driver, the backend's poller, consumers and feed) until the
// returned stop is called; stop waits for them.
func runBackground(p *wiring.Process) (stop func()) {
	bg, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(bg) }()
	return func() { cancel(); <-done }
}
