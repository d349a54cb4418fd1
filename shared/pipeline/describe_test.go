package pipeline_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

type order struct {
	ID string `json:"id"`
}

func typedStep[I any](name string) pipeline.Step {
	return pipeline.NewStep(name, func(context.Context, pipeline.StepInfo, I) (payload.Payload, error) {
		return payload.Payload{}, nil
	})
}

// TestInputTypeAndKind: NewStep and SleepUntil know their input type
// (nil for the untyped ones: payload.Payload, json.RawMessage, any);
// Map, Child and Sleep have none; Kind tells the four kinds apart.
func TestInputTypeAndKind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		step pipeline.Step
		typ  reflect.Type
		kind string
	}{
		{typedStep[order]("struct"), reflect.TypeFor[order](), pipeline.KindStep},
		{typedStep[*order]("pointer"), reflect.TypeFor[*order](), pipeline.KindStep},
		{typedStep[[]int]("slice"), reflect.TypeFor[[]int](), pipeline.KindStep},
		{typedStep[payload.Payload]("payload"), nil, pipeline.KindStep},
		{typedStep[json.RawMessage]("raw"), nil, pipeline.KindStep},
		{typedStep[any]("any"), nil, pipeline.KindStep},
		{pipeline.SleepUntil("until", func(o order) time.Time { return time.Time{} }), reflect.TypeFor[order](), pipeline.KindSleep},
		{pipeline.Sleep("sleep", time.Minute), nil, pipeline.KindSleep},
		{pipeline.Map("map", "child", pipeline.MapOptions{}), nil, pipeline.KindMap},
		{pipeline.Child("child", "child"), nil, pipeline.KindChild},
		{pipeline.Step{Name: "literal"}, nil, pipeline.KindStep},
	} {
		if got := c.step.InputType(); got != c.typ {
			t.Errorf("%s: InputType %v, want %v", c.step.Name, got, c.typ)
		}
		if got := c.step.Kind(); got != c.kind {
			t.Errorf("%s: Kind %q, want %q", c.step.Name, got, c.kind)
		}
	}
}

// TestInputTypeSurvivesTheRegistry: the registry's copies of the steps
// keep it.
func TestInputTypeSurvivesTheRegistry(t *testing.T) {
	t.Parallel()
	reg := pipeline.MustRegistry(pipeline.Pipeline{ID: "p", Steps: []pipeline.Step{typedStep[order]("first")}})
	p, _ := reg.Get("p")
	if got := p.Steps[0].InputType(); got != reflect.TypeFor[order]() {
		t.Errorf("InputType after registering: %v", got)
	}
}
