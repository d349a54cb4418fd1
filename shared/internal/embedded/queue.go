package embedded

import (
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/store"
)

// The work queue lives in the store: bucket queue holds at most one entry
// per execution (its key), with the work item, the time it is due and a
// sequence number that changes whenever the entry is written anew.
//
// The state store keeps the queue in step with the rows, in the same
// transaction as each row write: a row that is QUEUED or WAIT_RETRY has an
// entry due at its NextDueAt, any other row none. So a commit and its
// hand-over (a submit and its first work item, a step and the next one, a
// retry and its delayed item, a re-drive) are one local transaction:
// there is no window in which a crash keeps the commit and loses the work
// item, and the dispatcher's Dispatch that the engine calls after the
// commit finds the entry there and writes nothing. A claim removes the
// entry (the row is RUNNING), so a delivered item costs no write to
// acknowledge. Dispatch writes an entry only for what the rows do not
// imply: the sweeper's re-dispatch of a RUNNING row whose lease lapsed,
// an item for an execution the store does not hold.
//
// The entries are mirrored in memory (queueMirror), loaded at open and
// updated after each commit, so that the workers pick due entries without
// reading the file, and a commit wakes an idle worker at once: latency is
// not bound to a poll interval.

// qentry is one queue entry in memory.
type qentry struct {
	key  string // execKey
	item dispatch.WorkItem
	due  time.Time
	seq  uint64
	// In memory only: when a failed delivery may be tried again, whether a
	// worker holds it, and a Dispatch that arrived while it did (the entry
	// is then kept after the delivery, and delivered again from again).
	notBefore  time.Time
	inflight   bool
	redispatch bool
	again      time.Time
	settling   bool // its deletion is being committed
	idx        int  // heap position, -1 outside the heaps
	ready      bool // idx is in the ready heap (else the waiting one)
}

func (e *qentry) availableAt() time.Time {
	if e.notBefore.After(e.due) {
		return e.notBefore
	}
	return e.due
}

// qheap orders entries: by the time they are available (the waiting
// heap), or, once available, by rank (the ready heap: the smaller rank,
// dispatch.WorkItem.Rank, is delivered first; ties by availability).
type qheap struct {
	es     []*qentry
	byRank bool
}

func (h *qheap) Len() int { return len(h.es) }
func (h *qheap) Less(i, j int) bool {
	a, b := h.es[i], h.es[j]
	if h.byRank && a.item.Rank != b.item.Rank {
		return a.item.Rank < b.item.Rank
	}
	return a.availableAt().Before(b.availableAt())
}
func (h *qheap) Swap(i, j int) { h.es[i], h.es[j] = h.es[j], h.es[i]; h.es[i].idx = i; h.es[j].idx = j }
func (h *qheap) Push(x any)    { e := x.(*qentry); e.idx = len(h.es); h.es = append(h.es, e) }
func (h *qheap) Pop() any {
	old := h.es
	e := old[len(old)-1]
	old[len(old)-1] = nil
	h.es = old[:len(old)-1]
	e.idx = -1
	return e
}

// queueMirror is the in-memory copy of the queue bucket.
type queueMirror struct {
	mu      sync.Mutex
	entries map[string]*qentry
	h       qheap // entries not yet seen available, by availability
	r       qheap // entries available, by rank
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newQueueMirror() *queueMirror {
	return &queueMirror{entries: map[string]*qentry{}, r: qheap{byRank: true}, wake: make(chan struct{}, 1024), done: make(chan struct{})}
}

// push puts e in the waiting heap. Callers hold q.mu.
func (q *queueMirror) push(e *qentry) {
	e.ready = false
	heap.Push(&q.h, e)
}

// unheap takes e out of whichever heap holds it. Callers hold q.mu.
func (q *queueMirror) unheap(e *qentry) {
	switch {
	case e.idx < 0:
	case e.ready:
		heap.Remove(&q.r, e.idx)
	default:
		heap.Remove(&q.h, e.idx)
	}
	e.ready = false
}

func (q *queueMirror) close() { q.once.Do(func() { close(q.done) }) }

func (q *queueMirror) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries)
}

// signal wakes one idle worker.
func (q *queueMirror) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// load adds an entry read at open.
func (q *queueMirror) load(e *qentry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries[e.key] = e
	q.push(e)
}

// put installs e (written by a commit), replacing the key's entry.
func (q *queueMirror) put(e *qentry) {
	q.mu.Lock()
	if old := q.entries[e.key]; old != nil {
		q.unheap(old)
	}
	e.idx = -1
	q.entries[e.key] = e
	q.push(e)
	q.mu.Unlock()
	q.signal()
}

// remove drops the key's entry if it is still the one with seq (deleted
// by a commit).
func (q *queueMirror) remove(key string, seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.entries[key]; e != nil && e.seq == seq {
		q.unheap(e)
		delete(q.entries, key)
	}
}

// take returns the entry available at now of the smallest rank and
// marks it in flight, or the time the earliest entry becomes available
// (zero when none waits).
func (q *queueMirror) take(now time.Time) (*qentry, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.h.Len() > 0 && !q.h.es[0].availableAt().After(now) {
		e := heap.Pop(&q.h).(*qentry)
		e.ready = true
		heap.Push(&q.r, e)
	}
	if q.r.Len() == 0 {
		if q.h.Len() == 0 {
			return nil, time.Time{}
		}
		return nil, q.h.es[0].availableAt()
	}
	e := heap.Pop(&q.r).(*qentry)
	e.ready, e.inflight = false, true
	if q.r.Len() > 0 || q.h.Len() > 0 && !q.h.es[0].availableAt().After(now) {
		q.signal() // more due: let another worker take it
	}
	return e, time.Time{}
}

// release ends a delivery of e that keeps the entry: it becomes available
// again at at (unless a commit replaced or removed it meanwhile).
func (q *queueMirror) release(e *qentry, at time.Time) {
	q.mu.Lock()
	e.inflight, e.settling = false, false
	if q.entries[e.key] != e {
		q.mu.Unlock()
		return
	}
	if e.redispatch {
		e.redispatch = false
		if at.After(e.again) {
			at = e.again
		}
	}
	e.notBefore = at
	q.push(e)
	q.mu.Unlock()
	q.signal()
}

// settle ends a successful delivery of e. It reports whether the entry
// must be deleted from the file (it is still e, and no Dispatch arrived
// during the delivery); otherwise it is released or already gone.
func (q *queueMirror) settle(e *qentry) (deleteIt bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.entries[e.key] != e {
		e.inflight = false
		return false // a commit replaced or removed it (a claim consumed it)
	}
	if e.redispatch {
		e.inflight, e.redispatch = false, false
		e.notBefore = e.again
		q.push(e)
		q.signal()
		return false
	}
	e.settling = true
	return true
}

// covered reports whether an entry for key already delivers an item due
// at due: an entry due no later that no worker holds, or one a worker
// holds (then marked to be delivered again after it). Otherwise Dispatch
// must write one.
//
// A covered entry not being delivered takes traceParent (when set) as its
// item's trace context, in memory only: a commit writes its hand-over's
// entry itself, without one, and the dispatch that follows carries the
// trace context of the span that committed (docs/tracing.md).
func (q *queueMirror) covered(key string, due time.Time, traceParent string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.entries[key]
	switch {
	case e == nil, e.settling:
		return false
	case e.inflight:
		if !e.redispatch || due.Before(e.again) {
			e.again = due
		}
		e.redispatch = true
		return true
	default:
		if e.due.After(due) {
			return false
		}
		if traceParent != "" {
			e.item.TraceParent = traceParent
		}
		return true
	}
}

// Queue entries on disk: due (ms) and seq, 8 bytes each, then the work
// item as JSON; sealed.

func encodeQueue(e *qentry) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(ms(e.due)))
	b = binary.BigEndian.AppendUint64(b, e.seq)
	item, _ := json.Marshal(e.item) // cannot fail
	return seal(append(b, item...))
}

func decodeQueue(k, body []byte) (*qentry, error) {
	if len(body) < 16 {
		return nil, errors.New("short queue entry")
	}
	e := &qentry{key: string(k), due: fromMs(int64(binary.BigEndian.Uint64(body))), seq: binary.BigEndian.Uint64(body[8:]), idx: -1}
	if err := json.Unmarshal(body[16:], &e.item); err != nil {
		return nil, err
	}
	return e, nil
}

// ready reports whether a row wants a queue entry, and when it is due.
func ready(e *store.Execution) (time.Time, bool) {
	if (e.Status == store.Queued || e.Status == store.WaitRetry) && !e.NextDueAt.IsZero() {
		return e.NextDueAt, true
	}
	return time.Time{}, false
}

// syncQueue keeps the key's queue entry in step with row (nil: the row is
// gone), in t's transaction.
func (t *txn) syncQueue(k []byte, row *store.Execution) error {
	b := t.bucket(bQueue)
	var old *qentry
	if v := b.Get(k); v != nil {
		body, err := unseal(v)
		if err == nil {
			old, err = decodeQueue(k, body)
		}
		if err != nil {
			return err
		}
	}
	var due time.Time
	want := false
	if row != nil {
		due, want = ready(row)
	}
	switch {
	case want && old != nil && ms(old.due) == ms(due):
		return nil // already there
	case want:
		return t.putQueue(k, dispatch.ItemOf(row), due)
	case old != nil:
		if err := b.Delete(k); err != nil {
			return err
		}
		key, seq := string(k), old.seq
		t.after(func() { t.db.queue.remove(key, seq) })
	}
	return nil
}

// putQueue writes the key's entry anew (a new sequence number).
func (t *txn) putQueue(k []byte, item dispatch.WorkItem, due time.Time) error {
	b := t.bucket(bQueue)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	// Kept to the millisecond, rounded up: a delay stays a lower bound.
	due = due.Truncate(0)
	if r := due.Truncate(time.Millisecond); r.Before(due) {
		due = r.Add(time.Millisecond)
	}
	e := &qentry{key: string(k), item: item, due: fromMs(ms(due)), seq: seq, idx: -1}
	if err := b.Put(k, encodeQueue(e)); err != nil {
		return err
	}
	t.after(func() { t.db.queue.put(e) })
	return nil
}
