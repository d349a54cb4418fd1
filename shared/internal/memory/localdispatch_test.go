package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/memory"
)

func TestCloseRefusesNewWorkAndWaitsForInFlight(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	finished := false
	d := memory.NewDispatcher(func(ctx context.Context, _ dispatch.WorkItem) error {
		close(started)
		<-release
		finished = true
		return nil
	}, memory.DispatcherOptions{Workers: 1})
	if err := d.Dispatch(context.Background(), dispatch.Message{Item: dispatch.WorkItem{ExecutionID: "a"}}); err != nil {
		t.Fatal(err)
	}
	<-started
	closed := make(chan error)
	go func() { closed <- d.Close(context.Background()) }()
	time.Sleep(10 * time.Millisecond) // give Close a chance to (wrongly) return early
	select {
	case <-closed:
		t.Fatal("Close returned while a handler was in flight")
	default:
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !finished {
		t.Fatal("in-flight handler did not finish")
	}
	if err := d.Dispatch(context.Background(), dispatch.Message{}); err != dispatch.ErrClosed {
		t.Fatalf("Dispatch after Close = %v, want ErrClosed", err)
	}
}
