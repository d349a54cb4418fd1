package backend_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
	"github.com/qasync/qasync/shared/store"
)

// countCreates counts the executions a state store creates.
type countCreates struct {
	store.Store
	n *atomic.Int64
}

func (c countCreates) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	e, created, err := c.Store.CreateOrGet(ctx, req)
	if created {
		c.n.Add(1)
	}
	return e, created, err
}

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A backend of your own, as a value: this one opens another backend (the
// memory provider stands for any) and counts the executions its state
// store creates; server.WithBackend runs the runtime on it
// (lambdafn.WithBackend does the same for a Lambda function).
func ExampleFunc() {
	var created atomic.Int64
	counting := backend.Func(func(ctx context.Context, env backend.Env) (*backend.Seams, error) {
		s, err := memory.Backend().Open(ctx, env)
		if err != nil {
			return nil, err
		}
		s.State = countCreates{Store: s.State, n: &created}
		return s, nil
	})

	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "hello", Steps: []pipeline.Step{
		pipeline.NewStep("greet", func(_ context.Context, _ pipeline.StepInfo, name string) (string, error) {
			return "hello, " + name, nil
		}),
	}})
	if err != nil {
		panic(err)
	}
	cfg := config.Default()
	cfg.StateProvider = "memory" // the keys the defaults follow (the in-process dispatcher, the log sinks)
	finished := make(chan server.Finished, 1)
	ctx := context.Background()
	rt, err := server.Start(ctx, cfg, reg, server.WithBackend(counting), server.WithLogger(discard()),
		server.OnFinished(func(f server.Finished) { finished <- f }))
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	in, _ := payload.JSON("ada")
	if _, err := rt.Submit(ctx, "default", "hello", "greeting-1", in); err != nil {
		panic(err)
	}
	f := <-finished
	fmt.Println(f.Status, created.Load())
	// Output: SUCCEEDED 1
}
