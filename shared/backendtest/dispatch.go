package backendtest

// The dispatcher suite (Provider.Dispatcher): every item delivered with
// its fields, delays honoured as lower bounds, failed handling delivered
// again. Transports deliver in real time, so the suite waits with
// deadlines; it asserts lower bounds on delays, never upper bounds tighter
// than Timeout.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
)

// Timeout bounds every wait of the dispatcher suite: a transport must
// deliver each item (and each redelivery after a failed handler) within
// it.
const Timeout = 20 * time.Second

type deliveries struct {
	mu    sync.Mutex
	got   map[string][]time.Time
	items map[string]dispatch.WorkItem
	fail  map[string]int // remaining failures per execution id
	ch    chan struct{}
}

func newDeliveries() *deliveries {
	return &deliveries{got: map[string][]time.Time{}, items: map[string]dispatch.WorkItem{}, fail: map[string]int{}, ch: make(chan struct{}, 1)}
}

func (r *deliveries) handle(_ context.Context, item dispatch.WorkItem) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[item.ExecutionID] = append(r.got[item.ExecutionID], time.Now())
	r.items[item.ExecutionID] = item
	select {
	case r.ch <- struct{}{}:
	default:
	}
	if r.fail[item.ExecutionID] > 0 {
		r.fail[item.ExecutionID]--
		return fmt.Errorf("scripted failure")
	}
	return nil
}

// wait blocks until cond holds (checked after each delivery) or Timeout.
func (r *deliveries) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(Timeout)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func workItem(t *testing.T, i int) dispatch.WorkItem {
	return dispatch.WorkItem{TenantID: "tenant-" + t.Name(), ExecutionID: fmt.Sprintf("exec-%d", i), PipelineID: "p.one"}
}

// runDispatcher runs the dispatcher suite on dispatchers from f.
func runDispatcher(t *testing.T, f func(*testing.T, dispatch.Handler) dispatch.Dispatcher) {
	t.Run("DeliversEveryItemWithItsFields", func(t *testing.T) {
		t.Parallel()
		rec := newDeliveries()
		d := f(t, rec.handle)
		const n = 25
		msgs := make([]dispatch.Message, n)
		for i := range msgs {
			msgs[i] = dispatch.Message{Item: workItem(t, i)}
		}
		if err := d.Dispatch(context.Background(), msgs...); err != nil {
			t.Fatalf("Dispatch: %v", err)
		}
		rec.wait(t, "25 deliveries", func() bool { return len(rec.got) == n })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for i := range n {
			if got, want := rec.items[fmt.Sprintf("exec-%d", i)], workItem(t, i); got != want {
				t.Errorf("delivered %+v, want %+v", got, want)
			}
		}
	})
	t.Run("DelayIsALowerBound", func(t *testing.T) {
		t.Parallel()
		rec := newDeliveries()
		d := f(t, rec.handle)
		start := time.Now()
		const delay = time.Second
		if err := d.Dispatch(context.Background(), dispatch.Message{Item: workItem(t, 1), Delay: delay}, dispatch.Message{Item: workItem(t, 2)}); err != nil {
			t.Fatalf("Dispatch: %v", err)
		}
		rec.wait(t, "both deliveries", func() bool { return len(rec.got) == 2 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if at := rec.got["exec-1"][0]; at.Sub(start) < delay {
			t.Fatalf("delayed item delivered after %s, want at least %s", at.Sub(start), delay)
		}
	})
	t.Run("FailedHandlingIsRedelivered", func(t *testing.T) {
		t.Parallel()
		rec := newDeliveries()
		rec.fail["exec-1"] = 2
		d := f(t, rec.handle)
		if err := d.Dispatch(context.Background(), dispatch.Message{Item: workItem(t, 1)}); err != nil {
			t.Fatalf("Dispatch: %v", err)
		}
		rec.wait(t, "three deliveries", func() bool { return len(rec.got["exec-1"]) >= 3 })
	})
	t.Run("CancelledContextRefused", func(t *testing.T) {
		t.Parallel()
		d := f(t, newDeliveries().handle)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := d.Dispatch(ctx, dispatch.Message{Item: workItem(t, 1)}); err == nil {
			t.Fatalf("Dispatch with a cancelled context succeeded")
		}
	})
}
