package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// A pipeline of more than MaxSteps steps is refused when the registry is
// built, naming the limit; MaxSteps steps are taken.
func TestRegistryRefusesTooManySteps(t *testing.T) {
	steps := func(n int) []pipeline.Step {
		out := make([]pipeline.Step, n)
		for i := range out {
			out[i] = pipeline.NewStep(fmt.Sprintf("s%d", i), func(_ context.Context, _ pipeline.StepInfo, in int) (int, error) { return in, nil })
		}
		return out
	}
	if _, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "long", Steps: steps(pipeline.MaxSteps)}); err != nil {
		t.Fatalf("MaxSteps steps: %v", err)
	}
	_, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "long", Steps: steps(pipeline.MaxSteps + 1)})
	if err == nil || !strings.Contains(err.Error(), "1001 steps, more than the 1000") {
		t.Fatalf("MaxSteps+1 steps: %v", err)
	}
}

// MapElements splits a map's input and enforces its limits with
// non-retryable codes; a Child's whole input is its one element.
func TestMapElementsLimits(t *testing.T) {
	m := pipeline.Map("each", "kid", pipeline.MapOptions{})
	one := pipeline.Child("one", "kid")
	js := func(s string) payload.Payload {
		return payload.Payload{Encoding: payload.EncodingJSON, Data: []byte(s)}
	}
	if els, err := m.MapElements(js(`[1,{"a":2},"x"]`)); err != nil || len(els) != 3 || string(els[1]) != `{"a":2}` {
		t.Fatalf("elements %q, %v", els, err)
	}
	if els, err := one.MapElements(js(`{"a":1}`)); err != nil || len(els) != 1 {
		t.Fatalf("child elements %q, %v", els, err)
	}
	big := `"` + strings.Repeat("x", pipeline.MaxElementBytes) + `"`
	for _, c := range []struct {
		step pipeline.Step
		in   string
		code string
	}{
		{m, `{"a":1}`, pipeline.CodeMapInputInvalid},
		{m, "[" + strings.Repeat("0,", pipeline.MaxChildren) + "0]", pipeline.CodeMapTooLarge},
		{m, "[" + big + "]", pipeline.CodeMapElementTooLarge},
		{one, big, pipeline.CodeMapElementTooLarge},
	} {
		_, err := c.step.MapElements(js(c.in))
		code, _, retryable := pipeline.Classify(err)
		if err == nil || code != c.code || retryable {
			t.Errorf("%s: %v (code %s, retryable %v), want non-retryable %s", c.step.Name, err, code, retryable, c.code)
		}
	}
}
