package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// harness wires a Runtime to memory providers, a recording dead-letter
// publisher and a JSON log captured in memory.
type harness struct {
	t     *testing.T
	rt    *engine.Runtime
	store store.Store
	disp  closer
	dlq   *recordingDLQ
	logs  *logtest.Buffer
	// dropNext, when positive, makes the dispatcher lose that many messages.
	dropNext int
	// drop, when set, loses the n-th message dispatched (from 1).
	drop   func(n int) bool
	mu     sync.Mutex
	sent   int
	events []engine.Event
}

// Observe records runtime events.
func (h *harness) Observe(_ context.Context, ev engine.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

// observed returns the recorded events of one kind.
func (h *harness) observed(kind engine.EventKind) []engine.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []engine.Event
	for _, ev := range h.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// recordingDLQ records envelopes; failNext makes that many publishes fail.
type recordingDLQ struct {
	mu       sync.Mutex
	envs     []deadletter.Envelope
	failNext int
	attempts int
}

func (d *recordingDLQ) Publish(_ context.Context, env deadletter.Envelope) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attempts++
	if d.failNext > 0 {
		d.failNext--
		return errors.New("dlq unavailable")
	}
	d.envs = append(d.envs, env)
	return nil
}

func (d *recordingDLQ) published() []deadletter.Envelope {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadletter.Envelope(nil), d.envs...)
}

// Dispatch implements dispatch.Dispatcher in front of the real one, so a
// test can lose messages.
func (h *harness) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	h.mu.Lock()
	var keep []dispatch.Message
	for _, m := range msgs {
		h.sent++
		switch {
		case h.dropNext > 0:
			h.dropNext--
		case h.drop != nil && h.drop(h.sent):
		default:
			keep = append(keep, m)
		}
	}
	h.mu.Unlock()
	if len(keep) == 0 {
		return nil
	}
	return h.disp.Dispatch(ctx, keep...)
}

func (h *harness) dispatched() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent
}

// newHarness must run inside a synctest bubble when the test relies on
// fake time; the dispatcher is closed at cleanup.
func newHarness(t *testing.T, cfg engine.Config, ps ...pipeline.Pipeline) *harness {
	t.Helper()
	reg, err := pipeline.NewRegistry(ps...)
	if err != nil {
		t.Fatal(err)
	}
	pv := newProviders(t)
	h := &harness{t: t, store: pv.store, dlq: &recordingDLQ{}, logs: &logtest.Buffer{}}
	h.disp = pv.dispatcher(func(ctx context.Context, item dispatch.WorkItem) error { return h.rt.Process(ctx, item) }, 4, 100*time.Millisecond)
	t.Cleanup(func() { _ = h.disp.Close(context.Background()) })
	if cfg.WorkerID == "" {
		cfg.WorkerID = "worker-1"
	}
	h.rt, err = engine.New(cfg, engine.Deps{
		Registry: reg, Store: h.store, Payloads: pv.payloads,
		Dispatcher: h, DeadLetter: h.dlq, Observers: []engine.Observer{h},
		Logger: slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) submit(pipelineID, key string, v any) store.Execution {
	h.t.Helper()
	in, err := payload.JSON(v)
	if err != nil {
		h.t.Fatal(err)
	}
	res, err := h.rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: pipelineID, IdempotencyKey: key, Input: in})
	if err != nil {
		h.t.Fatalf("Submit: %v", err)
	}
	return res.Execution
}

func (h *harness) get(id string) store.Execution {
	h.t.Helper()
	e, err := h.store.Get(context.Background(), store.Key{TenantID: "t1", ExecutionID: id})
	if err != nil {
		h.t.Fatalf("Get: %v", err)
	}
	return e
}

func (h *harness) sweep() engine.SweepResult {
	h.t.Helper()
	res, err := h.rt.SweepOnce(context.Background())
	if err != nil {
		h.t.Fatalf("SweepOnce: %v", err)
	}
	return res
}

// step builds a JSON step from a function of the attempt.
func step(name string, fn func(ctx context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error)) pipeline.Step {
	return pipeline.NewStep(name, fn)
}

// appendStep adds its name to the "path" list of its input.
func appendStep(name string) pipeline.Step {
	return step(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		path, _ := in["path"].([]any)
		in["path"] = append(path, name)
		return in, nil
	})
}

// attempts records the attempts a step saw.
type attempts struct {
	mu   sync.Mutex
	seen []int
	keys []string
}

func (a *attempts) record(info pipeline.StepInfo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, info.Attempt)
	a.keys = append(a.keys, info.TransitionKey)
}

func (a *attempts) list() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.seen...)
}

var _ store.Store = (*memory.StateStore)(nil)

func workItem(e store.Execution) dispatch.WorkItem {
	return dispatch.WorkItem{TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID}
}
