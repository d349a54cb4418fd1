package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// A two-step pipeline on the memory providers: submit, let the in-process
// workers run it, read the result.
func Example() {
	type greeting struct{ Name, Text string }
	greet := pipeline.Pipeline{ID: "hello.greet", Steps: []pipeline.Step{
		pipeline.NewStep("compose", func(_ context.Context, _ pipeline.StepInfo, in greeting) (greeting, error) {
			in.Text = "hello, " + in.Name
			return in, nil
		}),
		pipeline.NewStep("shout", func(_ context.Context, _ pipeline.StepInfo, in greeting) (greeting, error) {
			in.Text = strings.ToUpper(in.Text)
			return in, nil
		}),
	}}
	reg, _ := pipeline.NewRegistry(greet)
	log := slog.New(slog.DiscardHandler)

	var rt *engine.Runtime
	workers := memory.NewDispatcher(func(ctx context.Context, item dispatch.WorkItem) error { return rt.Process(ctx, item) }, memory.DispatcherOptions{})
	defer workers.Close(context.Background())
	rt, _ = engine.New(engine.Config{}, engine.Deps{
		Registry: reg, Store: memory.NewStateStore(clock.System{}), Payloads: memory.NewPayloadStore(clock.System{}),
		Dispatcher: workers, DeadLetter: memory.NewLogDLQ(log), Logger: log,
	})

	ctx := context.Background()
	in, _ := payload.JSON(greeting{Name: "ada"})
	sub, _ := rt.Submit(ctx, engine.SubmitRequest{TenantID: "default", PipelineID: "hello.greet", IdempotencyKey: "greet-ada", Input: in})
	for {
		e, _ := rt.Status(ctx, sub.Execution.Key())
		if e.Status.Terminal() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, out, _ := rt.Result(ctx, sub.Execution.Key())
	fmt.Println(string(out.Data))
	// Output: {"Name":"ada","Text":"HELLO, ADA"}
}
