package objects_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// A pipeline with an Output publishes its terminal output to an object
// before the execution is marked SUCCEEDED: after the last step, the
// runtime calls Output.Publish with its object store (StepInfo.Objects).
func Example() {
	dir, _ := os.MkdirTemp("", "qasync-output")
	defer os.RemoveAll(dir)
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{
		ID: "shop.report",
		Steps: []pipeline.Step{pipeline.NewStep("total", func(ctx context.Context, info pipeline.StepInfo, cents []int) (int, error) {
			sum := 0
			for _, c := range cents {
				sum += c
			}
			return sum, nil
		})},
		Output: &pipeline.Output{To: "file://" + filepath.ToSlash(dir) + "/{tenant}/{pipelineId}/{executionId}.json"},
	})
	if err != nil {
		panic(err)
	}
	p, _ := reg.Get("shop.report")
	info := pipeline.StepInfo{TenantID: "acme", PipelineID: "shop.report", ExecutionID: "exec-1", Objects: objects.Router{File: objects.File{}}}
	in, _ := payload.JSON([]int{150, 4599})
	for range 2 { // a replay writes the same key with the same bytes
		out, err := p.Steps[0].Run(context.Background(), info, in)
		if err == nil {
			err = p.Output.Publish(context.Background(), info, out)
		}
		fmt.Println(string(out.Data), err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "acme", "shop.report", "exec-1.json"))
	fmt.Println(string(b))
	// Output:
	// 4749 <nil>
	// 4749 <nil>
	// 4749
}
