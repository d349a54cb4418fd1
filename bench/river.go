package main

// River, shared by its SQLite and Postgres drivers (river_sqlite.go,
// river_postgres.go): three job kinds step1..step3; each worker opens a
// transaction, inserts the next step's job in it (InsertTx), completes its
// own job in the same transaction (river.JobCompleteTx) and commits, so a
// step's completion and the enqueue of the next step are one atomic,
// durable write.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
)

// River's fetch tuning for the benchmark (River's defaults are 100 ms and
// 1 s, made for a queue that is mostly idle).
const (
	riverFetchCooldown     = time.Millisecond
	riverFetchPollInterval = 50 * time.Millisecond
)

// The job arguments of the three steps: the same document, three kinds.
type (
	step1Args struct{ Doc }
	step2Args struct{ Doc }
	step3Args struct{ Doc }
)

// Kind implements river.JobArgs.
func (step1Args) Kind() string { return "step1" }

// Kind implements river.JobArgs.
func (step2Args) Kind() string { return "step2" }

// Kind implements river.JobArgs.
func (step3Args) Kind() string { return "step3" }

// stepArgs is what a step worker needs of its arguments.
type stepArgs interface {
	river.JobArgs
	Payload() Doc
}

// riverBackend is what differs between River's drivers: the database,
// and how a transaction of the driver's type is begun and ended.
type riverBackend[TTx any] interface {
	// open creates a fresh database (or schema) and returns the driver on it.
	open(ctx context.Context, env Env) (riverdriver.Driver[TTx], error)
	// schema is River's Config.Schema ("" for the default).
	schema() string
	begin(ctx context.Context) (TTx, error)
	commit(ctx context.Context, tx TTx) error
	rollback(ctx context.Context, tx TTx)
	// close drops what open created.
	close(ctx context.Context) error
}

// riverSystem runs the pipeline on a River client.
type riverSystem[TDriver riverdriver.Driver[TTx], TTx any] struct {
	backend riverBackend[TTx]
	client  *river.Client[TTx]
	done    func(Completion)
	// failed counts worker errors (a step River will retry).
	failed atomic.Int64
	logf   func(string, ...any)
	// stop ends the client's run context (after Stop).
	stop context.CancelFunc
}

// Start implements System: migrate, then start a client with one queue of
// env.Workers workers.
func (s *riverSystem[TDriver, TTx]) Start(ctx context.Context, env Env) error {
	s.done, s.logf = env.Done, env.Logf
	driver, err := s.backend.open(ctx, env)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: s.backend.schema(), Logger: log})
	if err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverStep[TDriver, TTx, step1Args]{sys: s, name: StepNames[0],
		next: func(d Doc) river.JobArgs { return step2Args{d} }})
	river.AddWorker(workers, &riverStep[TDriver, TTx, step2Args]{sys: s, name: StepNames[1],
		next: func(d Doc) river.JobArgs { return step3Args{d} }})
	river.AddWorker(workers, &riverStep[TDriver, TTx, step3Args]{sys: s, name: StepNames[2]})
	s.client, err = river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: env.Workers}},
		Workers:           workers,
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Schema:            s.backend.schema(),
		Logger:            log,
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	// River stops the client when the context given to Start ends, and
	// ctx ends with Start: the client lives on its own context until Close.
	var runCtx context.Context
	runCtx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.client.Start(runCtx); err != nil {
		return fmt.Errorf("river start: %w", err)
	}
	return nil
}

// Submit implements System: insert step1's job (its own transaction).
func (s *riverSystem[TDriver, TTx]) Submit(ctx context.Context, id int) error {
	_, err := s.client.Insert(ctx, step1Args{Doc{ID: id}}, nil)
	return err
}

// Close implements System.
func (s *riverSystem[TDriver, TTx]) Close(ctx context.Context) error {
	var errs []error
	if s.client != nil {
		if err := s.client.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("river stop: %w", err))
		}
	}
	if s.stop != nil {
		s.stop()
	}
	if n := s.failed.Load(); n > 0 && s.logf != nil {
		s.logf("river: %d step attempts failed and were retried", n)
	}
	errs = append(errs, s.backend.close(ctx))
	return errors.Join(errs...)
}

// riverStep works one step: in one transaction, enqueue the next step
// with the appended document and complete this job; after the commit, the
// last step reports the execution done.
type riverStep[TDriver riverdriver.Driver[TTx], TTx any, A stepArgs] struct {
	river.WorkerDefaults[A]
	sys  *riverSystem[TDriver, TTx]
	name string
	// next builds the next step's arguments; nil for the last step.
	next func(Doc) river.JobArgs
}

// Work implements river.Worker.
func (w *riverStep[TDriver, TTx, A]) Work(ctx context.Context, job *river.Job[A]) error {
	if err := w.work(ctx, job); err != nil {
		w.sys.failed.Add(1)
		return err
	}
	return nil
}

func (w *riverStep[TDriver, TTx, A]) work(ctx context.Context, job *river.Job[A]) error {
	out := work(job.Args.Payload(), w.name)
	b := w.sys.backend
	tx, err := b.begin(ctx)
	if err != nil {
		return err
	}
	defer b.rollback(ctx, tx)
	if w.next != nil {
		if _, err := river.ClientFromContext[TTx](ctx).InsertTx(ctx, tx, w.next(out), nil); err != nil {
			return err
		}
	}
	if _, err := river.JobCompleteTx[TDriver](ctx, tx, job); err != nil {
		return err
	}
	if err := b.commit(ctx, tx); err != nil {
		return err
	}
	if w.next == nil {
		w.sys.done(Completion{ID: out.ID, Doc: out})
	}
	return nil
}
