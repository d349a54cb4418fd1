package server_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
)

// TestStartRunsTheRuntimeInProcess: Start runs a registry on the default
// providers (the embedded store) without an HTTP API; Submit records an
// execution, OnFinished hears its terminal commit, and after Close a new
// Start on the same directory finds it (a repeated submit is a
// duplicate).
func TestStartRunsTheRuntimeInProcess(t *testing.T) {
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "greet", Steps: []pipeline.Step{
		pipeline.NewStep("hello", func(_ context.Context, _ pipeline.StepInfo, in map[string]string) (map[string]string, error) {
			return map[string]string{"greeting": "hello " + in["name"]}, nil
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.EmbeddedDataDir = t.TempDir()
	finished := make(chan server.Finished, 1)
	quiet := server.WithLogger(slog.New(slog.DiscardHandler))
	ctx := context.Background()
	rt, err := server.Start(ctx, cfg, reg, quiet, server.OnFinished(func(f server.Finished) { finished <- f }))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := payload.JSON(map[string]string{"name": "ada"})
	sub, err := rt.Submit(ctx, "t1", "greet", "k1", in)
	if err != nil || sub.Duplicate {
		t.Fatalf("Submit: %+v %v", sub, err)
	}
	select {
	case f := <-finished:
		if f.ExecutionID != sub.ExecutionID || f.Status != "SUCCEEDED" || f.IdempotencyKey != "k1" {
			t.Fatalf("finished %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no terminal commit within 10s")
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rt, err = server.Start(ctx, cfg, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	again, err := rt.Submit(ctx, "t1", "greet", "k1", in)
	if err != nil || !again.Duplicate || again.ExecutionID != sub.ExecutionID {
		t.Fatalf("after a restart: %+v %v, want the duplicate of %s", again, err, sub.ExecutionID)
	}
}
