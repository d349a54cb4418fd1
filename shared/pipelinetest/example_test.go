package pipelinetest_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// Testing a pipeline without a runtime: every step once, in order.
func ExampleRunSteps() {
	upper := pipeline.NewStep("upper", func(_ context.Context, _ pipeline.StepInfo, s string) (string, error) {
		return strings.ToUpper(s), nil
	})
	exclaim := pipeline.NewStep("exclaim", func(_ context.Context, info pipeline.StepInfo, s string) (string, error) {
		return s + "!", nil
	})
	p := pipeline.Pipeline{ID: "t.shout", Steps: []pipeline.Step{upper, exclaim}}
	in, _ := payload.JSON("hello")
	out, err := pipelinetest.RunSteps(context.Background(), p, in, pipelinetest.Options{})
	fmt.Println(string(out.Data), err)
	// Output:
	// "HELLO!" <nil>
}
