package embedded

import (
	"context"
	"errors"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// maxBatch bounds the writes one group commit applies.
const maxBatch = 512

// The group commit. Every write of the store is a function of a bbolt
// write transaction, handed to one loop that applies all the writes
// pending at that moment in one transaction and commits it; bbolt's commit
// writes the dirty pages, fdatasyncs, writes the meta page and fdatasyncs
// again, and only then does any writer get its answer. So every
// acknowledged write is on disk, and concurrent writers share the fsyncs
// (no timer: a lone writer commits at once, a busy store batches what
// arrived during the previous commit).

// txn is one write's view of the batch transaction.
type txn struct {
	tx    *bolt.Tx
	db    *DB
	posts []func()
}

// after runs f once the transaction is committed (in commit order, before
// any writer of the batch is answered): it updates what the store mirrors
// in memory, the work queue.
func (t *txn) after(f func()) { t.posts = append(t.posts, f) }

// bucket returns a bucket of the transaction.
func (t *txn) bucket(name []byte) *bolt.Bucket { return t.tx.Bucket(name) }

// refusal is a write's answer that is not a failure of the store: a
// condition that did not hold (ErrConflict, ErrNotFound, ...). A write
// returning one has changed nothing, and the batch goes on.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// refuse wraps a write's answer (see refusal).
func refuse(err error) error { return refusal{err} }

type counters struct{ commits, writes atomic.Uint64 }

type writeOp struct {
	fn   func(*txn) error
	err  error
	done chan struct{}
}

// update runs fn in the next group commit and returns its answer once the
// commit is on disk. fn must change nothing before it returns a refusal;
// any other error of fn aborts the batch, which is then run again one
// write at a time, so that only fn's caller sees the error. A cancelled
// ctx is refused before the write is queued; once queued, the write is
// waited for (its outcome would otherwise be unknown).
func (db *DB) update(ctx context.Context, fn func(*txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	op := &writeOp{fn: fn, done: make(chan struct{})}
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	db.writes <- op
	db.mu.RUnlock()
	<-op.done
	var r refusal
	if errors.As(op.err, &r) {
		return r.err
	}
	return op.err
}

// view runs fn in a read transaction (a consistent snapshot of the last
// commit).
func (db *DB) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return db.bolt.View(fn)
}

func (db *DB) loop() {
	defer close(db.loopDone)
	batch := make([]*writeOp, 0, maxBatch)
	for op := range db.writes {
		batch = append(batch[:0], op)
	more:
		for len(batch) < maxBatch {
			select {
			case op, ok := <-db.writes:
				if !ok {
					break more
				}
				batch = append(batch, op)
			default:
				break more
			}
		}
		if err := db.commit(batch); err != nil && len(batch) > 1 {
			for _, op := range batch {
				_ = db.commit([]*writeOp{op})
			}
		}
		for _, op := range batch {
			if op.done != nil {
				close(op.done)
			}
		}
	}
}

// commit applies ops in one transaction. On a failure of the transaction
// (not a refusal) every op gets the error and nothing is applied.
func (db *DB) commit(ops []*writeOp) error {
	var posts []func()
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		posts = posts[:0]
		for _, op := range ops {
			t := &txn{tx: tx, db: db}
			op.err = op.fn(t)
			var r refusal
			switch {
			case op.err == nil:
				posts = append(posts, t.posts...)
			case errors.As(op.err, &r):
			default:
				return op.err
			}
		}
		return nil
	})
	if err != nil {
		for _, op := range ops {
			op.err = err
		}
		return err
	}
	db.stats.commits.Add(1)
	db.stats.writes.Add(uint64(len(ops)))
	for _, p := range posts {
		p()
	}
	return nil
}

// Stats counts the store's group commits.
type Stats struct {
	// Commits is the number of write transactions committed (each one
	// fsync'd), Writes the number of writes they carried.
	Commits, Writes uint64
}

// Stats returns the counts so far.
func (db *DB) Stats() Stats {
	return Stats{Commits: db.stats.commits.Load(), Writes: db.stats.writes.Load()}
}
