package memory_test

import (
	"context"
	"slices"
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

// TestQueuedItemsDeliveredByRank: while the one worker is busy, items
// queue up; they are then delivered smallest rank first (equal ranks in
// arrival order), not in arrival order.
func TestQueuedItemsDeliveredByRank(t *testing.T) {
	first, release := make(chan struct{}), make(chan struct{})
	got := make(chan string, 10)
	d := memory.NewDispatcher(func(ctx context.Context, it dispatch.WorkItem) error {
		if it.ExecutionID == "busy" {
			close(first)
			<-release
		}
		got <- it.ExecutionID
		return nil
	}, memory.DispatcherOptions{Workers: 1})
	defer d.Close(context.Background())
	if err := d.Dispatch(context.Background(), dispatch.Message{Item: dispatch.WorkItem{ExecutionID: "busy"}}); err != nil {
		t.Fatal(err)
	}
	<-first
	for _, it := range []dispatch.WorkItem{{ExecutionID: "low", Rank: 400}, {ExecutionID: "urgent", Rank: 100},
		{ExecutionID: "mid", Rank: 300}, {ExecutionID: "mid2", Rank: 300}} {
		if err := d.Dispatch(context.Background(), dispatch.Message{Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	var order []string
	for range 5 {
		order = append(order, <-got)
	}
	if want := []string{"busy", "urgent", "mid", "mid2", "low"}; !slices.Equal(order, want) {
		t.Fatalf("delivered %v, want %v", order, want)
	}
}
