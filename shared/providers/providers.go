// Package providers turns configuration into a wired Runtime: it picks the
// state store, payload store, dispatcher and dead-letter publisher that
// the configuration names, refusing any that this build does not
// implement, and maps the configuration onto runtime.Config. Every binary
// (qasync serve, and the Lambda functions) builds its runtime here.
package providers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/localdispatch"
	"github.com/qasync/qasync/shared/logdlq"
	"github.com/qasync/qasync/shared/memstore"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/retry"
	"github.com/qasync/qasync/shared/runtime"
)

// Set is a runtime with the providers it runs on.
type Set struct {
	Runtime *runtime.Runtime
	// Local is the in-process dispatcher when dispatcher-provider=event.
	Local *localdispatch.Dispatcher
}

// Close stops the in-process dispatcher: no new work, in-flight steps may
// finish until ctx ends, then their leases are released.
func (s *Set) Close(ctx context.Context) error {
	if s.Local == nil {
		return nil
	}
	return s.Local.Close(ctx)
}

// RuntimeConfig maps the configuration onto the runtime's policy.
func RuntimeConfig(c config.Config) runtime.Config {
	return runtime.Config{
		Lease: c.Lease,
		Retry: retry.Policy{
			MaxRetries: c.MaxRetries, Delay: c.RetryDelay,
			Multiplier: c.RetryMultiplier, MaxDelay: c.RetryMaxDelay,
		},
		SweepLimit:        c.SweepLimit,
		SweepGrace:        c.SweepGrace,
		ExecutionTTL:      time.Duration(c.ExecutionTTLDays) * 24 * time.Hour,
		InlineBudget:      c.InlineBudgetBytes,
		IdempotencyPolicy: runtime.IdempotencyPolicy(c.IdempotencyPolicy),
	}
}

// ErrNotImplemented names a configured provider this build lacks.
var ErrNotImplemented = errors.New("provider not implemented in this build")

// Open validates c and builds the runtime it describes.
func Open(c config.Config, reg *pipeline.Registry, log *slog.Logger) (*Set, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	if c.StateProvider != "memory" {
		errs = append(errs, fmt.Errorf("%sstate-provider: %q: %w", config.KeyPrefix, c.StateProvider, ErrNotImplemented))
	}
	if c.DispatcherProvider != "event" {
		errs = append(errs, fmt.Errorf("%sdispatcher-provider: %q: %w", config.KeyPrefix, c.DispatcherProvider, ErrNotImplemented))
	}
	if c.DLQProvider != "log" {
		errs = append(errs, fmt.Errorf("%sdlq-provider: %q: %w", config.KeyPrefix, c.DLQProvider, ErrNotImplemented))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	clk := clock.System{}
	set := &Set{}
	set.Local = localdispatch.New(func(ctx context.Context, item dispatch.WorkItem) error {
		return set.Runtime.Process(ctx, item)
	}, localdispatch.Options{Workers: c.WorkerConcurrency})
	rt, err := runtime.New(RuntimeConfig(c), runtime.Deps{
		Registry:   reg,
		Store:      memstore.NewStateStore(clk),
		Payloads:   memstore.NewPayloadStore(clk),
		Dispatcher: set.Local,
		DeadLetter: logdlq.New(log),
		Clock:      clk,
		Logger:     log,
	})
	if err != nil {
		_ = set.Local.Close(context.Background())
		return nil, err
	}
	set.Runtime = rt
	return set, nil
}
