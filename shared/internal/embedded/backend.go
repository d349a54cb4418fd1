package embedded

import (
	"context"
	"errors"
	"fmt"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/outbox"
)

// Backend is the embedded store as a backend.Backend (state-provider
// embedded, the default of qasync serve): Open opens the data directory
// of embedded.data-dir (breaking the leases of a dead process, see
// Options.BreakLeases) and returns every seam in it, its work queue's
// dispatcher running pipeline.orchestrator.worker-concurrency workers.
// Dead letters are recorded in the store (then logged, as the log sink
// does) and rejected items kept in it when item-reject.provider is
// embedded. Close stops the workers (in-flight steps finish until its
// context ends) and releases the directory.
func Backend() backend.Backend { return backend.Func(openBackend) }

func openBackend(_ context.Context, env backend.Env) (*backend.Seams, error) {
	c := env.Config
	db, err := Open(c.EmbeddedDataDir, Options{Clock: env.Clock, Logger: env.Logger, BreakLeases: true,
		Events: outbox.Configured(c)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.FullKey("embedded.data-dir"), err)
	}
	state := db.State(env.Clock)
	dead := db.DeadLetters(env.Clock)
	queue := db.NewDispatcher(env.Work, DispatcherOptions{Workers: c.WorkerConcurrency})
	s := &backend.Seams{
		State: state, Payloads: db.Payloads(env.Clock), Effects: db.Effects(env.Clock), History: state,
		Recorder: dead, Dispatcher: queue,
		DeadLetters: recordAndLog{rec: dead, log: memory.NewLogDLQ(env.Logger)},
		Close: func(ctx context.Context) error {
			return errors.Join(queue.Close(ctx), db.Close())
		},
	}
	if c.ItemRejectProvider == "embedded" {
		s.Rejects = db.Rejects()
	}
	queue.Start() // env.Work waits for the runtime
	return s, nil
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
