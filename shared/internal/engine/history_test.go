package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// stubHistory answers every key with its events, and records the keys asked.
type stubHistory struct {
	events []history.Event
	asked  []store.Key
}

func (s *stubHistory) History(_ context.Context, key store.Key) ([]history.Event, error) {
	s.asked = append(s.asked, key)
	if key.TenantID != "t1" {
		return nil, store.ErrNotFound
	}
	return s.events, nil
}

// newHistoryRuntime is a runtime on memory providers with reader as
// Deps.History.
func newHistoryRuntime(t *testing.T, reader history.Reader) *engine.Runtime {
	t.Helper()
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "p", Steps: []pipeline.Step{appendStep("a")}})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := engine.New(engine.Config{}, engine.Deps{
		Registry: reg, Store: memory.NewStateStore(clock.System{}), Payloads: memory.NewPayloadStore(clock.System{}),
		Dispatcher: &queue{}, DeadLetter: &recordingDLQ{}, History: reader,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestHistoryReadsTheConfiguredReader: Runtime.History answers from
// Deps.History, key and errors passed through as they are.
func TestHistoryReadsTheConfiguredReader(t *testing.T) {
	stub := &stubHistory{events: []history.Event{{Seq: 1, Type: history.Submitted}}}
	rt := newHistoryRuntime(t, stub)
	key := store.Key{TenantID: "t1", ExecutionID: "e1"}
	got, err := rt.History(context.Background(), key)
	if err != nil || len(got) != 1 || got[0].Type != history.Submitted {
		t.Fatalf("History = %+v, %v; want the reader's one SUBMITTED event", got, err)
	}
	if _, err := rt.History(context.Background(), store.Key{TenantID: "t2", ExecutionID: "e1"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("History of another tenant's key: err = %v, want store.ErrNotFound", err)
	}
	if len(stub.asked) != 2 || stub.asked[0] != key {
		t.Fatalf("the reader was asked %v", stub.asked)
	}
}

// TestHistoryWithoutReaderIsUnavailable: a runtime without a history
// reader says so instead of answering an empty history.
func TestHistoryWithoutReaderIsUnavailable(t *testing.T) {
	rt := newHistoryRuntime(t, nil)
	if _, err := rt.History(context.Background(), store.Key{TenantID: "t1", ExecutionID: "e1"}); !errors.Is(err, engine.ErrHistoryUnavailable) {
		t.Fatalf("History without a reader: err = %v, want ErrHistoryUnavailable", err)
	}
}
