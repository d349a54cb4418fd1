// The dispatcher (NewDispatcher) is the in-process "event" work dispatcher: a
// queue in memory, smallest rank first, drained by a pool of goroutines that call the runtime's
// handler. It keeps the queue-async lifecycle while the process lives and
// loses queued items when it exits (the sweeper re-dispatches them from a
// durable store).

package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
)

// DispatcherOptions tune a Dispatcher.
type DispatcherOptions struct {
	// Workers is the number of concurrent handler calls. Default 8.
	Workers int
	// RedeliveryDelay is how long a work item whose handler failed waits
	// before it is delivered again. Default 1s. A handler's
	// dispatch.RetryAfterError sets its own delay.
	RedeliveryDelay time.Duration
}

// Dispatcher is an in-process dispatch.Dispatcher.
type Dispatcher struct {
	handler dispatch.Handler
	opts    DispatcherOptions

	mu      sync.Mutex
	queue   []dispatch.WorkItem
	closed  bool
	timers  map[*time.Timer]struct{}
	wake    chan struct{}
	stop    chan struct{}
	workers sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

var _ dispatch.Dispatcher = (*Dispatcher)(nil)

// NewDispatcher starts a dispatcher whose workers call h.
func NewDispatcher(h dispatch.Handler, opts DispatcherOptions) *Dispatcher {
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.RedeliveryDelay <= 0 {
		opts.RedeliveryDelay = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		handler: h, opts: opts,
		timers: map[*time.Timer]struct{}{},
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		ctx:    ctx, cancel: cancel,
	}
	for range opts.Workers {
		d.workers.Add(1)
		go d.work()
	}
	return d
}

// Dispatch implements dispatch.Dispatcher. Delayed messages wait on a
// timer; the rest are queued at once.
func (d *Dispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dispatch.ErrClosed
	}
	for _, m := range msgs {
		if m.Delay > 0 {
			d.later(m.Item, m.Delay)
		} else {
			d.queue = append(d.queue, m.Item)
		}
	}
	d.signal()
	return nil
}

// Len reports how many items wait in the queue (not counting delayed ones).
func (d *Dispatcher) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// Close stops accepting messages, drops queued and delayed ones, and waits
// until handler calls in flight return or ctx ends; on ctx's end it
// cancels their context.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		d.queue = nil
		for t := range d.timers {
			t.Stop()
		}
		close(d.stop)
	}
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.workers.Wait(); close(done) }()
	select {
	case <-done:
		d.cancel()
		return nil
	case <-ctx.Done():
		d.cancel()
		<-done
		return ctx.Err()
	}
}

// later queues item after delay. Callers hold d.mu.
func (d *Dispatcher) later(item dispatch.WorkItem, delay time.Duration) {
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.timers, t)
		if d.closed {
			return
		}
		d.queue = append(d.queue, item)
		d.signal()
	})
	d.timers[t] = struct{}{}
}

// signal wakes one idle worker. Callers hold d.mu.
func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) work() {
	defer d.workers.Done()
	for {
		item, ok := d.pop()
		if !ok {
			select {
			case <-d.wake:
				continue
			case <-d.stop:
				return
			}
		}
		if err := d.handler(d.ctx, item); err != nil {
			delay := d.opts.RedeliveryDelay
			if ra, ok := dispatch.AsRetryAfter(err); ok {
				delay = ra.Delay // not due yet: keep it until it is
			}
			d.mu.Lock()
			if !d.closed {
				d.later(item, delay)
			}
			d.mu.Unlock()
		}
	}
}

func (d *Dispatcher) pop() (dispatch.WorkItem, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.queue) == 0 {
		return dispatch.WorkItem{}, false
	}
	// The smallest rank first (dispatch.WorkItem.Rank), in arrival order
	// among equal ranks.
	i := 0
	for j, it := range d.queue {
		if it.Rank < d.queue[i].Rank {
			i = j
		}
	}
	item := d.queue[i]
	d.queue = slices.Delete(d.queue, i, i+1)
	if len(d.queue) > 0 {
		d.signal() // let another worker pick up the rest
	}
	return item, true
}
