package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// order is the keyed pipeline's input.
type order struct {
	Customer string `json:"customer"`
}

// withKeyed serves the test pipelines and "keyed": one execution per
// customer at once.
func withKeyed(t *testing.T) envOption {
	return func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		step := func(name string) pipeline.Step {
			return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in order) (order, error) { return in, nil })
		}
		keyed := pipeline.Pipeline{ID: "keyed", Steps: []pipeline.Step{step("pack"), pipeline.Sleep("nap", time.Hour), step("ship")},
			Concurrency: pipeline.ConcurrencyKey("customer", 1, func(o order) string { return o.Customer }), Priority: 2}
		reg, err := pipeline.NewRegistry(append(testPipelines(), keyed)...)
		if err != nil {
			t.Fatal(err)
		}
		d.Registry = reg
	}
}

// TestStatusShowsTheConcurrencyKey: the status document carries the
// execution's concurrency key and, while it is WAITING_KEY, since when
// it waits (keyWaitSince, left out otherwise); the list takes
// status=WAITING_KEY; the pipeline's description names its key and limit.
func TestStatusShowsTheConcurrencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKeyed(t))
	first := e.mustSubmit("keyed", "o1", `{"customer":"c1"}`)
	second := e.mustSubmit("keyed", "o2", `{"customer":"c1"}`)
	for _, m := range e.disp.take() {
		if err := e.rt.Process(context.Background(), m.Item); err != nil {
			t.Fatal(err)
		}
	}
	holder := decode[client.Execution](t, get(e, first.StatusURL))
	if holder.ConcurrencyKey != "c1" || holder.Status == store.WaitingKey || !holder.KeyWaitSince.IsZero() {
		t.Errorf("the holder's status %+v", holder)
	}
	w := get(e, second.StatusURL)
	waiter := decode[client.Execution](t, w)
	if waiter.Status != store.WaitingKey || waiter.ConcurrencyKey != "c1" || waiter.KeyWaitSince.IsZero() ||
		!strings.Contains(w.Body.String(), `"keyWaitSince"`) {
		t.Errorf("the waiter's status %s", w.Body)
	}
	page := decode[client.ExecutionPage](t, get(e, "/v1/executions?status=WAITING_KEY"))
	if len(page.Executions) != 1 || page.Executions[0].ExecutionID != second.ExecutionID {
		t.Errorf("status=WAITING_KEY lists %+v; want the waiter", page.Executions)
	}
	if w := get(e, e.mustSubmit("echo", "", `{}`).StatusURL); strings.Contains(w.Body.String(), "concurrencyKey") {
		t.Errorf("an execution without a key shows one: %s", w.Body)
	}
	p := decode[client.Pipeline](t, get(e, "/v1/pipelines/keyed"))
	if c := p.Versions[0].Concurrency; c == nil || c.Name != "customer" || c.Limit != 1 {
		t.Errorf("the keyed pipeline's concurrency %+v", c)
	}
	if p.Versions[0].Priority != 2 {
		t.Errorf("the keyed pipeline's default priority %d, want its declared 2", p.Versions[0].Priority)
	}
	if p := decode[client.Pipeline](t, get(e, "/v1/pipelines/echo")); p.Versions[0].Concurrency != nil || p.Versions[0].Priority != 3 {
		t.Errorf("echo shows a concurrency %+v or a default priority %d (want 3)", p.Versions[0].Concurrency, p.Versions[0].Priority)
	}
}
