package main

// The qasync adapter: the only file of the benchmark that imports qasync,
// through its public API only (shared/server's in-process Runtime,
// shared/config, shared/pipeline, shared/payload). It runs qasync's
// default local profile: the embedded durable store (bbolt, every commit
// fsync'd before it is acknowledged, concurrent commits grouped), in the
// phase's directory.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
)

func init() {
	register(Spec{
		Key:      "qasync",
		Label:    "qasync (embedded store)",
		Settings: "shared/server.Start on the default embedded store (bbolt file, fsync per group commit), worker-concurrency = workers, default config (a step's commit claims the next step in the same write)",
		Baseline: true,
		Order:    0,
		New:      func() (System, error) { return &qasyncSystem{}, nil },
	})
	register(Spec{
		Key:      "qasync-queue",
		Label:    "qasync (embedded store, chain.max-steps=1)",
		Settings: "the same with chain.max-steps=1: every step's commit enqueues the next step's work item in the same write and a worker takes it from the queue, as a River job per step",
		Order:    1,
		New:      func() (System, error) { return &qasyncSystem{chainMaxSteps: 1}, nil },
	})
}

const (
	qasyncTenant   = "bench"
	qasyncPipeline = "bench.three-steps"
	qasyncKeyPre   = "bench-"
)

// qasyncSystem runs the pipeline on a qasync Runtime in this process.
type qasyncSystem struct {
	chainMaxSteps int
	rt            *server.Runtime
	done          func(Completion)
	// last holds the document each execution's last step produced, until
	// the execution's success is observed (after its commit).
	last sync.Map // int -> Doc
}

// Start implements System.
func (q *qasyncSystem) Start(ctx context.Context, env Env) error {
	q.done = env.Done
	steps := make([]pipeline.Step, len(StepNames))
	for i, name := range StepNames {
		lastStep := i == len(StepNames)-1
		steps[i] = pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in Doc) (Doc, error) {
			out := work(in, name)
			if lastStep {
				q.last.Store(out.ID, out)
			}
			return out, nil
		})
	}
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: qasyncPipeline, Steps: steps})
	if err != nil {
		return err
	}
	cfg := config.Default()
	cfg.EmbeddedDataDir = env.Dir
	cfg.WorkerConcurrency = env.Workers
	if q.chainMaxSteps > 0 {
		cfg.ChainMaxSteps = q.chainMaxSteps
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q.rt, err = server.Start(ctx, cfg, reg, server.WithLogger(log), server.OnFinished(q.finished))
	return err
}

// finished reports a succeeded execution (called after its terminal
// commit is on disk).
func (q *qasyncSystem) finished(f server.Finished) {
	if f.Status != "SUCCEEDED" {
		return
	}
	id, err := strconv.Atoi(strings.TrimPrefix(f.IdempotencyKey, qasyncKeyPre))
	if err != nil {
		return
	}
	doc, _ := q.last.LoadAndDelete(id)
	d, _ := doc.(Doc)
	q.done(Completion{ID: id, Doc: d})
}

// Submit implements System.
func (q *qasyncSystem) Submit(ctx context.Context, id int) error {
	in, err := payload.JSON(Doc{ID: id})
	if err != nil {
		return err
	}
	_, err = q.rt.Submit(ctx, qasyncTenant, qasyncPipeline, fmt.Sprint(qasyncKeyPre, id), in)
	return err
}

// Close implements System.
func (q *qasyncSystem) Close(ctx context.Context) error {
	if q.rt == nil {
		return nil
	}
	return q.rt.Close(ctx)
}
