package embedded

import (
	"context"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/store"
)

// DispatcherOptions tune a Dispatcher.
type DispatcherOptions struct {
	// Workers is the number of concurrent handler calls. Default 8.
	Workers int
	// RedeliveryDelay is how long an item whose handler failed waits
	// before it is delivered again. Default 1s. A handler's
	// dispatch.RetryAfterError sets its own delay.
	RedeliveryDelay time.Duration
}

// Dispatcher is the embedded work dispatcher: the store's durable queue
// (see queue.go) drained by a pool of workers in this process. Queued
// items survive a restart: they are delivered again by the next process
// that opens the directory.
type Dispatcher struct {
	db      *DB
	handler dispatch.Handler
	opts    DispatcherOptions

	stop    chan struct{}
	once    sync.Once
	start   sync.Once
	workers sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

var _ dispatch.Dispatcher = (*Dispatcher)(nil)

// NewDispatcher returns a dispatcher whose workers, once Start starts
// them, call h with the items of db's queue (Dispatch works at once). One
// dispatcher per store consumes its queue.
func (db *DB) NewDispatcher(h dispatch.Handler, opts DispatcherOptions) *Dispatcher {
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.RedeliveryDelay <= 0 {
		opts.RedeliveryDelay = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Dispatcher{db: db, handler: h, opts: opts, stop: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Start starts the workers (once; the items queued before, by this
// process or a previous one, are delivered first, oldest due first).
func (d *Dispatcher) Start() {
	d.start.Do(func() {
		for range d.opts.Workers {
			d.workers.Add(1)
			go d.work()
		}
		d.db.queue.signal()
	})
}

// Dispatch implements dispatch.Dispatcher: each message's item is queued
// durably (fsync'd before Dispatch returns) to be delivered after its
// Delay, unless the queue already holds an entry for its execution that
// is due no later (the one the commit before this call wrote), or the
// execution is CANCELLED (terminal: its cancel removed its entry, and no
// dispatch that raced the cancel brings one back): then nothing is
// written.
func (d *Dispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	return d.db.enqueue(ctx, msgs)
}

// enqueue writes the entries msgs need (see Dispatcher.Dispatch).
func (db *DB) enqueue(ctx context.Context, msgs []dispatch.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := db.clock.Now()
	var need []dispatch.Message
	for _, m := range msgs {
		if !db.queue.covered(string(execKey(itemKey(m.Item))), now.Add(max(m.Delay, 0)), m.Item.TraceParent) {
			need = append(need, m)
		}
	}
	if len(need) == 0 {
		return nil
	}
	err := db.update(ctx, func(t *txn) error {
		b := t.bucket(bQueue)
		for _, m := range need {
			k := execKey(itemKey(m.Item))
			due := now.Add(max(m.Delay, 0))
			if row, ok, err := t.row(k); err == nil && ok && row.Status == store.Cancelled {
				continue // CANCELLED is terminal: nothing may run it (a dispatch that raced the cancel)
			}
			if v := b.Get(k); v != nil {
				if body, err := unseal(v); err == nil {
					if old, err := decodeQueue(k, body); err == nil && ms(old.due) <= ms(due) && old.item == m.Item {
						if e := t.db.queue.peek(string(k)); e != nil && e.seq == old.seq && !e.settling && !e.inflight {
							continue
						}
					}
				}
			}
			if err := t.putQueue(k, m.Item, due); err != nil {
				return err
			}
		}
		return nil
	})
	if err == ErrClosed {
		return dispatch.ErrClosed
	}
	return err
}

func itemKey(it dispatch.WorkItem) store.Key {
	return store.Key{TenantID: it.TenantID, ExecutionID: it.ExecutionID}
}

// Close stops the workers: no new deliveries; it waits until handler
// calls in flight return or ctx ends, then cancels their context. Queued
// items stay in the store for the next process. Dispatch keeps working
// while the store is open.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.once.Do(func() { close(d.stop) })
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

func (d *Dispatcher) work() {
	defer d.workers.Done()
	q := d.db.queue
	var timer *time.Timer
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		e, at := q.take(d.db.clock.Now())
		if e == nil {
			var tc <-chan time.Time
			if !at.IsZero() {
				wait := max(at.Sub(d.db.clock.Now()), time.Millisecond)
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				tc = timer.C
			}
			select {
			case <-q.wake:
			case <-tc:
			case <-d.stop:
				return
			case <-q.done:
				return
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		d.deliver(e)
	}
}

// DeliverOne delivers the available entry of the smallest rank, if one
// is available by the store's clock, synchronously and as a worker of Start
// would (settling it the same way), and reports whether it did. It is
// for a caller that drives the queue itself instead of Start's workers:
// the deterministic simulator, which must choose when each delivery runs.
func (d *Dispatcher) DeliverOne() bool {
	e, _ := d.db.queue.take(d.db.clock.Now())
	if e == nil {
		return false
	}
	d.deliver(e)
	return true
}

// Woken is the channel the queue signals whenever an entry is written or
// released (one value per signal, dropped when the buffer is full). A
// caller driving deliveries with DeliverOne waits on it instead of
// polling. Start's workers consume it too: use one or the other.
func (d *Dispatcher) Woken() <-chan struct{} { return d.db.queue.wake }

// NextAvailable is when the queue's earliest entry that no delivery holds
// becomes available (zero when there is none): when a caller of
// DeliverOne should come back.
func (d *Dispatcher) NextAvailable() time.Time {
	q := d.db.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.r.Len() > 0:
		return q.r.es[0].availableAt() // available already
	case q.h.Len() > 0:
		return q.h.es[0].availableAt()
	}
	return time.Time{}
}

// deliver calls the handler with e's item and settles the entry: a failed
// delivery comes back after its delay (in memory: after a restart it is
// delivered at once); a successful one deletes the entry unless a commit
// replaced it, a Dispatch arrived meanwhile, or its execution's row still
// wants it (then it is delivered again).
func (d *Dispatcher) deliver(e *qentry) {
	err := d.handler(d.ctx, e.item)
	q := d.db.queue
	if err != nil {
		delay := d.opts.RedeliveryDelay
		if ra, ok := dispatch.AsRetryAfter(err); ok {
			delay = max(ra.Delay, time.Millisecond)
		}
		q.release(e, d.db.clock.Now().Add(delay))
		return
	}
	if !q.settle(e) {
		return
	}
	keep := false
	werr := d.db.update(context.Background(), func(t *txn) error {
		keep = false
		b := t.bucket(bQueue)
		v := b.Get([]byte(e.key))
		if v == nil {
			return nil
		}
		body, err := unseal(v)
		if err != nil {
			return err
		}
		cur, err := decodeQueue([]byte(e.key), body)
		if err != nil || cur.seq != e.seq {
			return err // written anew meanwhile: the mirror has the new entry
		}
		if row, ok, err := t.row([]byte(e.key)); err != nil {
			return err
		} else if ok && !row.Expired(t.db.clock.Now()) { // an expired row is gone (Process found none)
			if _, want := ready(&row); want {
				keep = true
				return nil
			}
		}
		if err := b.Delete([]byte(e.key)); err != nil {
			return err
		}
		key, seq := e.key, e.seq
		t.after(func() { q.remove(key, seq) })
		return nil
	})
	if werr != nil || keep {
		if werr != nil && werr != ErrClosed {
			d.db.log.LogAttrs(context.Background(), slog.LevelWarn, "embedded_queue_ack_failed", slog.String("event", "embedded_queue_ack_failed"),
				slog.String("tenant", e.item.TenantID), slog.String("execution_id", e.item.ExecutionID), slog.String("error", werr.Error()))
		}
		q.release(e, d.db.clock.Now())
	}
}

// peek returns the key's entry (nil when none).
func (q *queueMirror) peek(key string) *qentry {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.entries[key]
}

// row reads and decodes the row at k in t's transaction (ok false when
// there is none; expiry is not judged here).
func (t *txn) row(k []byte) (store.Execution, bool, error) {
	return readRow(t.tx, k)
}

func readRow(tx *bolt.Tx, k []byte) (store.Execution, bool, error) {
	v := tx.Bucket(bExec).Get(k)
	if v == nil {
		return store.Execution{}, false, nil
	}
	body, err := unseal(v)
	if err != nil {
		return store.Execution{}, false, err
	}
	e, err := decodeRow(body)
	return e, err == nil, err
}

// Queued returns the work items the queue holds, in no order.
func (db *DB) Queued() []dispatch.WorkItem {
	q := db.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]dispatch.WorkItem, 0, len(q.entries))
	for _, e := range q.entries {
		out = append(out, e.item)
	}
	return out
}
