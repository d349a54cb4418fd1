package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
)

// A pipeline's default priority must be 1 to 5 (0: none declared); a
// submit's priority wins over it, and the default is 3 without either.
// The rank ages a priority by (priority-1) agings.
func TestPriorityDefaultsAndRank(t *testing.T) {
	step := pipeline.NewStep("s", func(_ context.Context, _ pipeline.StepInfo, in int) (int, error) { return in, nil })
	for _, bad := range []int{-1, 6} {
		_, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "p", Steps: []pipeline.Step{step}, Priority: bad})
		if err == nil || !strings.Contains(err.Error(), "priority") {
			t.Errorf("Priority %d: %v, want a refusal naming the priority", bad, err)
		}
	}
	p := pipeline.Pipeline{ID: "p", Steps: []pipeline.Step{step}, Priority: 2}
	if _, err := pipeline.NewRegistry(p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p         *pipeline.Pipeline
		requested int
		want      int
	}{{&p, 0, 2}, {&p, 5, 5}, {nil, 0, pipeline.DefaultPriority}, {&pipeline.Pipeline{}, 0, 3}} {
		if got := pipeline.PriorityOf(c.p, c.requested); got != c.want {
			t.Errorf("PriorityOf(%v, %d) = %d, want %d", c.p != nil, c.requested, got, c.want)
		}
	}
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	if got := pipeline.Rank(at, 5, time.Minute); !got.Equal(at.Add(4 * time.Minute)) {
		t.Errorf("Rank of priority 5 = %v, want four agings later", got)
	}
	if got := pipeline.Rank(at, 1, time.Minute); !got.Equal(at) {
		t.Errorf("Rank of priority 1 = %v, want the creation", got)
	}
}
