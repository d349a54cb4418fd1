package server

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
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
	set  *wiring.Set
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
	log := o.logger(cfg)
	if err := wiring.ResolveAwaitSecret(ctx, &cfg, nil); err != nil {
		return nil, err
	}
	set, err := wiring.Open(ctx, cfg, reg, log, o.wiringOptions()...)
	if err != nil {
		return nil, err
	}
	consumers, err := set.DeadLetterConsumers(ctx, cfg, lambdahandlers.DLQ(set.Runtime, set.Recorder, set.Metrics, log), log)
	if err != nil {
		_ = set.Close(context.Background())
		return nil, err
	}
	feed, err := set.HistoryFeed(cfg, log)
	if err != nil {
		_ = set.Close(context.Background())
		return nil, err
	}
	return &Runtime{set: set, stop: runBackground(set, cfg, consumers, feed)}, nil
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
	res, err := r.set.Runtime.Submit(ctx, engine.SubmitRequest{TenantID: tenantID, PipelineID: pipelineID, IdempotencyKey: idempotencyKey, Input: input})
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
		err = r.set.Close(ctx)
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

// wiringOptions are the options Serve and Start open the providers with.
func (o *options) wiringOptions() []wiring.Option {
	opts := []wiring.Option{wiring.WithDrainTimeout(drainTimeout)}
	if f := o.finished; f != nil {
		opts = append(opts, wiring.WithObserver(engine.ObserverFunc(func(_ context.Context, ev engine.Event) {
			if ev.Terminal() {
				e := ev.Execution
				f(Finished{TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, IdempotencyKey: e.IdempotencyKey,
					Status: string(e.Status), Latency: ev.Latency})
			}
		})))
	}
	return opts
}

// runBackground runs the sweeper, the bulk re-drive jobs' driver beside it
// (see engine.Runtime.StartRedrives), the work consumer, the dead-letter
// consumers and, with state-provider dynamo, the history stream feed,
// until the returned stop is called; stop waits for them.
func runBackground(set *wiring.Set, cfg config.Config, consumers []*sqsbackend.Consumer, feed *dynamo.StreamFeed) (stop func()) {
	bg, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { set.Runtime.RunSweeper(bg, cfg.SweepInterval) })
	wg.Go(func() { set.Runtime.RunRedrives(bg, cfg.SweepInterval) })
	wg.Go(func() { _ = set.Work(bg) })
	for _, c := range consumers {
		wg.Go(func() { _ = c.Run(bg) })
	}
	if feed != nil {
		wg.Go(func() { _ = feed.Run(bg) })
	}
	return func() { cancel(); wg.Wait() }
}
