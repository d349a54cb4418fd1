package console_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// queue keeps dispatched work items for the test to run.
type queue struct {
	mu    sync.Mutex
	items []dispatch.WorkItem
}

func (q *queue) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		q.items = append(q.items, m.Item)
	}
	return nil
}

// drain runs every dispatched item until none is left.
func (q *queue) drain(t *testing.T, rt *engine.Runtime) {
	t.Helper()
	for range 10 {
		q.mu.Lock()
		items := q.items
		q.items = nil
		q.mu.Unlock()
		if len(items) == 0 {
			return
		}
		for _, it := range items {
			if err := rt.Process(context.Background(), it); err != nil {
				t.Fatalf("process: %v", err)
			}
		}
	}
	t.Fatal("work items kept coming")
}

// newRuntime is a memory runtime with an "echo" and a "fail" pipeline.
func newRuntime(t *testing.T) (*engine.Runtime, *queue) {
	t.Helper()
	echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	})
	fail := pipeline.NewStep("explode", func(context.Context, pipeline.StepInfo, payload.Payload) (payload.Payload, error) {
		return payload.Payload{}, pipeline.NonRetryable("boom", errors.New("the step always fails"))
	})
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "echo", Steps: []pipeline.Step{echo}}, pipeline.Pipeline{ID: "fail", Steps: []pipeline.Step{fail}})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	log := slog.New(slog.DiscardHandler)
	q := &queue{}
	rt, err := engine.New(engine.Config{WorkerID: "test-worker"}, engine.Deps{
		Registry: reg, Store: memory.NewStateStore(clk), Payloads: memory.NewPayloadStore(clk),
		Dispatcher: q, DeadLetter: memory.NewLogDLQ(log), Clock: clk, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt, q
}

func submit(t *testing.T, rt *engine.Runtime, pipelineID, key, body string) store.Execution {
	t.Helper()
	res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: tenantAcme, PipelineID: pipelineID, IdempotencyKey: key,
		Input: payload.Raw("application/json", []byte(body))})
	if err != nil {
		t.Fatal(err)
	}
	return res.Execution
}

// TestEngineBackendOverTheRealRuntime runs the console on a memory
// runtime through Engine: the status page, the result route and a
// re-drive are the runtime's own; listing, history, dead letters and
// cancel follow what the runtime offers (a page saying it is not
// available, until the runtime has the operation).
func TestEngineBackendOverTheRealRuntime(t *testing.T) {
	t.Parallel()
	rt, q := newRuntime(t)
	failed := submit(t, rt, "fail", "k-fail", `{}`)
	done := submit(t, rt, "echo", "k-echo", `{"echo":"result-bytes-3b9e"}`)
	q.drain(t, rt)

	logs, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: log}),
		logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}

	body := e.get("/console/executions/"+failed.ExecutionID, http.StatusOK)
	wantContains(t, body, `id="exec-status">DLQ</span>`, "<code>boom</code>", "the step always fails")
	if _, ok := any(rt).(interface {
		History(context.Context, store.Key) ([]history.Event, error)
	}); !ok {
		wantContains(t, body, `id="history-notice"`)
	}

	// The result only through the result route.
	if strings.Contains(e.get("/console/executions/"+done.ExecutionID, http.StatusOK), "result-bytes-3b9e") {
		t.Error("the page shows the result's bytes")
	}
	if got := e.get("/console/executions/"+done.ExecutionID+"/result", http.StatusOK); got != `{"echo":"result-bytes-3b9e"}` {
		t.Errorf("result %q", got)
	}

	// A re-drive by the operator, at the version the page showed.
	e.signIn()
	cur, err := rt.Status(context.Background(), failed.Key())
	if err != nil {
		t.Fatal(err)
	}
	w := e.post("/console/executions/"+failed.ExecutionID+"/redrive", url.Values{"reason": {"fixed the input"}, "version": {strconv.FormatInt(cur.Version, 10)}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("redrive: %d\n%s", w.Code, w.Body)
	}
	got, err := rt.Status(context.Background(), failed.Key())
	if err != nil || got.Status != store.Queued || got.RedriveCount != 1 || got.Note != "fixed the input" {
		t.Fatalf("after the re-drive: %s, %d re-drives, note %q (%v)", got.Status, got.RedriveCount, got.Note, err)
	}
	// Re-driving the succeeded one is refused by the runtime.
	if w := e.post("/console/executions/"+done.ExecutionID+"/redrive", url.Values{"reason": {"x"}}); w.Code != http.StatusConflict {
		t.Errorf("redrive of SUCCEEDED: %d, want 409", w.Code)
	}

	// What the runtime does not offer yet says so.
	_, canList := any(rt).(interface {
		List(context.Context, store.ListQuery) (store.ListPage, error)
	})
	_, canListDL := any(rt).(interface {
		DeadLetters(context.Context, deadletter.ListQuery) (deadletter.ListPage, error)
	})
	_, canCancel := any(rt).(interface {
		Cancel(context.Context, store.Key, string) (store.Execution, bool, error)
	})
	for _, c := range []struct {
		path string
		can  bool
	}{{"/console", canList}, {"/console/dead-letters", canListDL}} {
		if c.can {
			e.get(c.path, http.StatusOK)
		} else {
			wantContains(t, e.get(c.path, http.StatusNotImplemented), "not available on this deployment")
		}
	}
	w = e.post("/console/executions/"+got.ExecutionID+"/cancel", url.Values{"reason": {"stop"}})
	switch {
	case canCancel && w.Code != http.StatusSeeOther:
		t.Errorf("cancel: %d, want 303", w.Code)
	case !canCancel && w.Code != http.StatusNotImplemented:
		t.Errorf("cancel without the runtime's Cancel: %d, want 501", w.Code)
	}
}
