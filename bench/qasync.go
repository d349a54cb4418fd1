package main

// The qasync adapter: the only file of the benchmark that imports qasync.
// It is a placeholder on the memory providers (shared/memstore,
// shared/localdispatch) until the durable embedded store exists; then this
// file is replaced, and the packages it imports may move, without touching
// the rest of the benchmark.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/localdispatch"
	"github.com/qasync/qasync/shared/logdlq"
	"github.com/qasync/qasync/shared/memstore"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/runtime"
)

func init() {
	register(Spec{
		Key:      "qasync",
		Label:    "qasync (memory, placeholder for the embedded store)",
		Settings: "shared/runtime on shared/memstore + shared/localdispatch (nothing reaches a disk), default runtime config",
		Baseline: true,
		Order:    0,
		New:      func() (System, error) { return &qasyncSystem{}, nil },
	})
}

const (
	qasyncTenant   = "bench"
	qasyncPipeline = "bench.three-steps"
	qasyncKeyPre   = "bench-"
)

// qasyncSystem runs the pipeline on a qasync Runtime in this process.
type qasyncSystem struct {
	rt   *runtime.Runtime
	disp *localdispatch.Dispatcher
	done func(Completion)
	// last holds the document each execution's last step produced, until
	// the execution's success is observed (after its commit).
	last sync.Map // int -> Doc
}

// Start implements System.
func (q *qasyncSystem) Start(_ context.Context, env Env) error {
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
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q.disp = localdispatch.New(func(ctx context.Context, item dispatch.WorkItem) error { return q.rt.Process(ctx, item) },
		localdispatch.Options{Workers: env.Workers, RedeliveryDelay: 10 * time.Millisecond})
	cfg := runtime.DefaultConfig()
	cfg.WorkerID = "bench-worker"
	q.rt, err = runtime.New(cfg, runtime.Deps{
		Registry: reg, Store: memstore.NewStateStore(clock.System{}), Payloads: memstore.NewPayloadStore(clock.System{}),
		Effects: memstore.NewEffects(clock.System{}), Dispatcher: q.disp, DeadLetter: logdlq.New(log), Logger: log,
		Observers: []runtime.Observer{runtime.ObserverFunc(q.observe)},
	})
	if err != nil {
		_ = q.disp.Close(context.Background())
		return err
	}
	return nil
}

// observe reports a succeeded execution (called after its terminal commit).
func (q *qasyncSystem) observe(_ context.Context, ev runtime.Event) {
	if ev.Kind != runtime.EventSucceeded {
		return
	}
	id, err := strconv.Atoi(strings.TrimPrefix(ev.Execution.IdempotencyKey, qasyncKeyPre))
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
	_, err = q.rt.Submit(ctx, runtime.SubmitRequest{
		TenantID: qasyncTenant, PipelineID: qasyncPipeline, IdempotencyKey: fmt.Sprint(qasyncKeyPre, id), Input: in,
	})
	return err
}

// Close implements System.
func (q *qasyncSystem) Close(ctx context.Context) error {
	if q.disp == nil {
		return nil
	}
	return q.disp.Close(ctx)
}
