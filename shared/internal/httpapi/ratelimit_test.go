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

// withRateLimited serves the test pipelines and "limited": its step
// "ship" starts at most once a minute per customer.
func withRateLimited(t *testing.T) envOption {
	return func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		step := func(name string) pipeline.Step {
			return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in order) (order, error) { return in, nil })
		}
		limited := pipeline.Pipeline{ID: "limited", Steps: []pipeline.Step{step("pack"), step("ship")},
			RateLimit: pipeline.RateLimitKey("carrier", 1, time.Minute, 1, func(o order) string { return o.Customer }, "ship")}
		reg, err := pipeline.NewRegistry(append(testPipelines(), limited)...)
		if err != nil {
			t.Fatal(err)
		}
		d.Registry = reg
	}
}

// TestStatusShowsTheRateLimit: the status document carries the
// execution's rate limit and key and, while it waits for its turn, when
// it runs (rateLimitedUntil, left out otherwise); the pipeline's
// description shows the limit.
func TestStatusShowsTheRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withRateLimited(t))
	first := e.mustSubmit("limited", "o1", `{"customer":"c1"}`)
	second := e.mustSubmit("limited", "o2", `{"customer":"c1"}`)
	for range 3 { // pack, then ship (chained or handed over)
		for _, m := range e.disp.take() {
			_ = e.rt.Process(context.Background(), m.Item)
		}
	}
	ran := decode[client.Execution](t, get(e, first.StatusURL))
	if ran.Status != store.Succeeded || ran.RateLimit != "carrier" || ran.RateKey != "c1" || !ran.RateLimitedUntil.IsZero() {
		t.Errorf("the first execution's status %+v", ran)
	}
	w := get(e, second.StatusURL)
	waiter := decode[client.Execution](t, w)
	if waiter.Status != store.Queued || waiter.StepName != "ship" || waiter.Attempt != 1 || waiter.RateLimitedUntil.IsZero() ||
		!strings.Contains(w.Body.String(), `"rateLimitedUntil"`) {
		t.Errorf("the waiting execution's status %s", w.Body)
	}
	if w := get(e, e.mustSubmit("echo", "", `{}`).StatusURL); strings.Contains(w.Body.String(), "rateLimit") {
		t.Errorf("an execution without a rate limit shows one: %s", w.Body)
	}
	p := decode[client.Pipeline](t, get(e, "/v1/pipelines/limited"))
	if l := p.Versions[0].RateLimit; l == nil || l.Name != "carrier" || l.Rate != 1 || l.Per != "1m0s" || l.Burst != 1 || !l.Keyed ||
		len(l.Steps) != 1 || l.Steps[0] != "ship" {
		t.Errorf("the limited pipeline's rate limit %+v", l)
	}
	if p := decode[client.Pipeline](t, get(e, "/v1/pipelines/echo")); p.Versions[0].RateLimit != nil {
		t.Errorf("echo shows a rate limit %+v", p.Versions[0].RateLimit)
	}
}
