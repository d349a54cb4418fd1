package wiring_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

func costPipeline(outBytes int) pipeline.Pipeline {
	out := strings.Repeat("o", outBytes)
	step := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]string, error) {
			return map[string]string{"out": out}, nil
		})
	}
	return pipeline.Pipeline{ID: "p.cost", Steps: []pipeline.Step{step("a"), step("b"), step("c")}}
}

func TestDurableWriteUnitsMeasured(t *testing.T) {
	for _, in := range []int{100, 10 << 10} {
		meter := awsclient.NewCapacityMeter()
		d := openDurableWith(t, nil, []func(*middleware.Stack) error{meter.APIOption}, nil, costPipeline(100))
		d.start()
		e := d.submit("p.cost", "k1", map[string]any{"blob": strings.Repeat("i", in)})
		sub := meter.Snapshot()
		d.counter.Reset()
		meter.Reset()
		d.await(e, store.Succeeded, 30*time.Second)
		time.Sleep(200 * time.Millisecond)
		run := meter.Snapshot()
		t.Logf("input %d B: submit %+v; run %+v; requests %v", in, sub, run, d.counter.Snapshot())
	}
}
