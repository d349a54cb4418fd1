package pipeline_test

import (
	"context"
	"testing"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// TestAcceptsEncodingFollowsTheFirstStep: a pipeline whose first step
// decodes JSON (NewStep with a typed input) accepts JSON input only; one
// whose first step takes payload.Payload, or a hand-built step without
// Accepts, accepts every encoding; later steps do not matter.
func TestAcceptsEncodingFollowsTheFirstStep(t *testing.T) {
	t.Parallel()
	typed := pipeline.NewStep("typed", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (payload.Payload, error) {
		return payload.Payload{}, nil
	})
	raw := pipeline.NewStep("raw", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (map[string]any, error) {
		return nil, nil
	})
	hand := pipeline.Step{Name: "hand", Run: raw.Run}
	all := []payload.Encoding{payload.EncodingJSON, payload.EncodingRaw, payload.EncodingProtobuf}
	for _, tc := range []struct {
		name  string
		steps []pipeline.Step
		want  []payload.Encoding
	}{
		{"json first", []pipeline.Step{typed, raw}, []payload.Encoding{payload.EncodingJSON}},
		{"payload first", []pipeline.Step{raw, typed}, all},
		{"hand-built first", []pipeline.Step{hand}, all},
	} {
		p := pipeline.Pipeline{ID: "p", Steps: tc.steps}
		for _, e := range all {
			want := false
			for _, w := range tc.want {
				want = want || w == e
			}
			if got := p.AcceptsEncoding(e); got != want {
				t.Errorf("%s: AcceptsEncoding(%s) = %v, want %v", tc.name, e, got, want)
			}
		}
	}
}
