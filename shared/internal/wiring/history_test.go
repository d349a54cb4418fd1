package wiring_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// historyTypes lists the types of a history.
func historyTypes(evs []history.Event) []history.Type {
	out := make([]history.Type, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// TestMemoryProvidersServeHistory: with state-provider memory the runtime
// reads histories from the memory store, which records them as it writes.
func TestMemoryProvidersServeHistory(t *testing.T) {
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "p", Steps: []pipeline.Step{
		pipeline.NewStep("a", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			return in, nil
		}),
		pipeline.NewStep("b", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			return in, nil
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.StateProvider = "memory" // the embedded store's history: TestOpenDefaultsToTheEmbeddedStore
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close(context.Background())
	in, _ := payload.JSON(map[string]any{})
	res, err := set.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p", IdempotencyKey: "k", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	want := []history.Type{history.Submitted, history.StepStarted, history.StepSucceeded, history.StepStarted, history.StepSucceeded, history.Succeeded}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := set.Runtime.History(context.Background(), res.Execution.Key())
		if err == nil && len(got) == len(want) {
			for i := range want {
				if got[i].Type != want[i] || got[i].Seq != i+1 {
					t.Fatalf("history %v, want %v numbered from 1", historyTypes(got), want)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history = %v, %v; want %v", historyTypes(got), err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := set.Runtime.History(context.Background(), store.Key{TenantID: "t2", ExecutionID: res.Execution.ExecutionID}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's history: err = %v, want store.ErrNotFound", err)
	}
}
