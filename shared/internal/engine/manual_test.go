package engine_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// cluster is several runtimes ("workers") on one shared store (the
// provider under test's: memory, or the embedded store with
// QASYNC_ENGINE_PROVIDER=embedded), whose work items land in one queue
// that the test delivers by hand: for scenarios where workers differ
// (definitions served, clocks) or where deliveries must be counted
// exactly. (On the embedded store the rows' own queue entries are written
// too, but no dispatcher consumes them: the test delivers.)
type cluster struct {
	t     *testing.T
	store store.Store
	// jobs is the store's job store (bulk re-drives), which tests wrap.
	jobs     jobStore
	payloads payload.Store
	effects  effect.Log
	queue    *queue
	dlq      *recordingDLQ
	logs     *logtest.Buffer
	// observers hear every worker made after they are set.
	observers []engine.Observer
	// tracer, when set, traces every worker made after it is set.
	tracer trace.TracerProvider
}

// queue records dispatched messages; the test takes them with take.
type queue struct {
	mu   sync.Mutex
	msgs []dispatch.Message
	sent int
	// block, when set, makes Dispatch wait until its context ends.
	block bool
}

func (q *queue) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	q.mu.Lock()
	block := q.block
	q.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, msgs...)
	q.sent += len(msgs)
	return nil
}

// take removes and returns every queued message.
func (q *queue) take() []dispatch.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs = nil
	return out
}

// freeze makes Dispatch hang until its context ends (on) or work again.
func (q *queue) freeze(on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.block = on
}

func (q *queue) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent
}

// jobStore is a state store that keeps jobs, as both providers' do.
type jobStore interface {
	store.Store
	store.JobStore
}

func newCluster(t *testing.T) *cluster {
	pv := newProviders(t)
	js, ok := pv.store.(jobStore)
	if !ok {
		t.Fatalf("the state store %T keeps no jobs", pv.store)
	}
	return &cluster{t: t, store: pv.store, jobs: js, payloads: pv.payloads, effects: pv.effects,
		queue: &queue{}, dlq: &recordingDLQ{}, logs: &logtest.Buffer{}}
}

// worker is one runtime of the cluster: its own registry, id and clock.
func (c *cluster) worker(id string, cfg engine.Config, clk clock.Clock, ps ...pipeline.Pipeline) *engine.Runtime {
	c.t.Helper()
	return c.workerOn(id, cfg, clk, c.store, ps...)
}

// workerOn is a worker whose state store is st (the cluster's wrapped:
// a worker cut off from it, or one whose answers are lost).
func (c *cluster) workerOn(id string, cfg engine.Config, clk clock.Clock, st store.Store, ps ...pipeline.Pipeline) *engine.Runtime {
	c.t.Helper()
	reg, err := pipeline.NewRegistry(ps...)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.WorkerID = id
	rt, err := engine.New(cfg, engine.Deps{
		Registry: reg, Store: st, Payloads: c.payloads, Effects: c.effects, Dispatcher: c.queue, DeadLetter: c.dlq, Clock: clk, Observers: c.observers,
		TracerProvider: c.tracer,
		Logger:         slog.New(slog.NewJSONHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With(slog.String("worker", id)),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return rt
}

func (c *cluster) get(id string) store.Execution {
	c.t.Helper()
	e, err := c.store.Get(context.Background(), store.Key{TenantID: "t1", ExecutionID: id})
	if err != nil {
		c.t.Fatalf("Get: %v", err)
	}
	return e
}

func submitTo(t *testing.T, rt *engine.Runtime, pipelineID, key string, v any) store.Execution {
	t.Helper()
	in, err := payload.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: pipelineID, IdempotencyKey: key, Input: in})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return res.Execution
}

// skewed is the system clock (synctest's fake one in a bubble) shifted.
type skewed time.Duration

func (s skewed) Now() time.Time { return time.Now().Add(time.Duration(s)) }
