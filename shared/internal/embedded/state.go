package embedded

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/store"
)

// State is the embedded execution state store (store.Store, store.Lister
// and history.Reader). Each write is one transaction of the group commit:
// the row (its key is the idempotency record, as in the DynamoDB layout),
// the index entries it moves (sweep, list), its work-queue entry and the
// history events history.Derive gives for it.
type State struct {
	db    *DB
	clock clock.Clock
}

var _ store.Store = (*State)(nil)

// State returns the state store, judging expiry by c (nil: the store's
// clock).
func (db *DB) State(c clock.Clock) *State {
	if c == nil {
		c = db.clock
	}
	return &State{db: db, clock: c}
}

// live reads the unexpired row at k (ok false when missing or expired).
func (s *State) live(tx *bolt.Tx, k []byte, now time.Time) (store.Execution, bool, error) {
	e, ok, err := readRow(tx, k)
	if err != nil {
		return store.Execution{}, false, fmt.Errorf("%w: row %x: %v", ErrDamaged, k, err)
	}
	if !ok || e.Expired(now) {
		return store.Execution{}, false, nil
	}
	return e, true, nil
}

// liveAs reads the unexpired row a call with key finds: for a write
// (exact) the row with key's very id, for a read any the id answers
// (store.Answers: a bare slot reads whichever incarnation lives in it).
func (s *State) liveAs(tx *bolt.Tx, key store.Key, now time.Time, exact bool) (store.Execution, bool, error) {
	e, ok, err := s.live(tx, execKey(key), now)
	if !ok || err != nil {
		return e, false, err
	}
	if exact && e.ExecutionID != key.ExecutionID || !exact && !store.Answers(key.ExecutionID, e.ExecutionID) {
		return store.Execution{}, false, nil
	}
	return e, true, nil
}

// putRow writes next over old (nil: none) in t: the row, the sweep and
// list index entries it moves, its queue entry and its history events.
func (t *txn) putRow(k []byte, old, next *store.Execution) error {
	v, err := encodeRow(next)
	if err != nil {
		return err
	}
	if err := t.bucket(bExec).Put(k, v); err != nil {
		return err
	}
	sw := t.bucket(bSweep)
	if old == nil || ms(old.SweepAt) != ms(next.SweepAt) {
		if old != nil && !old.SweepAt.IsZero() {
			if err := sw.Delete(sweepKey(old.SweepAt, k)); err != nil {
				return err
			}
		}
		if !next.SweepAt.IsZero() {
			if err := sw.Put(sweepKey(next.SweepAt, k), []byte(next.PipelineID)); err != nil {
				return err
			}
		}
	}
	if old == nil {
		if err := t.bucket(bList).Put(listKey(next), []byte(next.PipelineID)); err != nil {
			return err
		}
	}
	if err := t.syncWaiting(k, old, next); err != nil {
		return err
	}
	// The queue follows the committed transitions (a create, a claim, a
	// commit: each moves the version). A renewal or a sweeper's reschedule
	// moves no version and leaves the queue alone: an entry a Dispatch
	// wrote for a RUNNING row whose lease lapsed (the sweeper's re-dispatch
	// for a takeover) must survive the sweeper's own reschedule of the row
	// (audit item 7: it did not, and the execution was never taken over).
	if old == nil || old.Version != next.Version {
		if err := t.syncQueue(k, next); err != nil {
			return err
		}
	}
	return t.record(k, old, next)
}

// dropRow deletes the row at k (an expired one) with its index entries,
// queue entry and history.
func (t *txn) dropRow(k []byte, e *store.Execution) error {
	if err := t.bucket(bExec).Delete(k); err != nil {
		return err
	}
	if !e.SweepAt.IsZero() {
		if err := t.bucket(bSweep).Delete(sweepKey(e.SweepAt, k)); err != nil {
			return err
		}
	}
	if err := t.bucket(bList).Delete(listKey(e)); err != nil {
		return err
	}
	if err := t.syncWaiting(k, e, nil); err != nil {
		return err
	}
	if err := t.syncQueue(k, nil); err != nil {
		return err
	}
	return t.dropHistory(k)
}

// CreateOrGet implements store.Store.
func (s *State) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	e := req.Execution
	if e.TenantID == "" || e.ExecutionID == "" {
		return store.Execution{}, false, fmt.Errorf("embedded: create needs tenant and execution id")
	}
	k := execKey(e.Key())
	var got store.Execution
	var created bool
	err := s.db.update(ctx, func(t *txn) error {
		now := s.clock.Now()
		cur, exists, err := readRow(t.tx, k)
		if err != nil {
			return err
		}
		if exists && !cur.Expired(now) {
			if cur.Fingerprint != e.Fingerprint {
				return refuse(store.ErrKeyMismatch)
			}
			got, created = cur, cur.CreateToken != "" && cur.CreateToken == e.CreateToken
			return nil
		}
		if exists {
			// An expired row under this key: its key no longer binds.
			if err := t.dropRow(k, &cur); err != nil {
				return err
			}
		}
		row := normalize(e)
		if err := t.putRow(k, nil, &row); err != nil {
			return err
		}
		got, created = row, true
		return nil
	})
	if err != nil {
		return store.Execution{}, false, err
	}
	return got, created, nil
}

// normalize keeps e's times at the precision the store keeps (the
// millisecond; the second for ExpiresAt), in UTC, and gives it its own
// copies of what it points to, so that what a write returns equals what a
// later read returns and shares no memory with the caller.
func normalize(e store.Execution) store.Execution {
	for _, t := range []*time.Time{&e.LeaseExpiresAt, &e.NextDueAt, &e.SweepAt, &e.VersionWaitSince,
		&e.CancelRequestedAt, &e.PauseRequestedAt, &e.CreatedAt, &e.UpdatedAt, &e.Rank} {
		*t = fromMs(ms(*t))
	}
	e.ExpiresAt = fromSecs(secs(e.ExpiresAt))
	e.RecordsExpireAt = fromSecs(secs(e.RecordsExpireAt))
	if e.Error != nil {
		f := *e.Error
		e.Error = &f
	}
	e.Input.Inline = bytes.Clone(e.Input.Inline)
	e.Result.Inline = bytes.Clone(e.Result.Inline)
	if e.Await != nil {
		a := *e.Await
		a.TimeoutAt, a.CompletedAt = fromMs(ms(a.TimeoutAt)), fromMs(ms(a.CompletedAt))
		a.LatePayload.Inline = bytes.Clone(a.LatePayload.Inline)
		e.Await = &a
	}
	return e
}

// Get implements store.Store.
func (s *State) Get(ctx context.Context, key store.Key) (store.Execution, error) {
	var e store.Execution
	var ok bool
	err := s.db.view(ctx, func(tx *bolt.Tx) (err error) {
		e, ok, err = s.liveAs(tx, key, s.clock.Now(), false)
		return err
	})
	if err != nil {
		return store.Execution{}, err
	}
	if !ok {
		return store.Execution{}, store.ErrNotFound
	}
	return e, nil
}

// GetBatch implements store.Store.
func (s *State) GetBatch(ctx context.Context, keys []store.Key) ([]store.Execution, error) {
	out := make([]store.Execution, 0, len(keys))
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		now := s.clock.Now()
		for _, k := range keys {
			e, ok, err := s.liveAs(tx, k, now, false)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, e)
			}
		}
		return nil
	})
	return out, err
}

// Claim implements store.Store.
func (s *State) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	k := execKey(req.Key)
	var got store.Execution
	err := s.db.update(ctx, func(t *txn) error {
		row, ok, err := s.liveAs(t.tx, req.Key, s.clock.Now(), true)
		switch {
		case err != nil:
			return err
		case !ok:
			return refuse(store.ErrNotFound)
		case row.Version != req.ExpectVersion || !store.Claimable(&row, req.DueBy, req.TakeoverBy):
			return refuse(store.ErrConflict)
		}
		next := row
		next.Status, next.LeaseOwner, next.LeaseExpiresAt = store.Running, req.Owner, req.LeaseUntil
		next.Attempt, next.Releases = req.Attempt, req.Releases
		if !req.SweepAt.IsZero() {
			next.SweepAt, next.Sweeps = req.SweepAt, 0
		}
		next.Version++
		next.UpdatedAt = req.Now
		next = normalize(next)
		if err := t.putRow(k, &row, &next); err != nil {
			return err
		}
		got = next
		return nil
	})
	return got, err
}

// Renew implements store.Store.
func (s *State) Renew(ctx context.Context, key store.Key, owner string, version int64, until time.Time) error {
	k := execKey(key)
	return s.db.update(ctx, func(t *txn) error {
		row, ok, err := s.liveAs(t.tx, key, s.clock.Now(), true)
		if err != nil {
			return err
		}
		if !ok || row.Status != store.Running || row.LeaseOwner != owner || row.Version != version {
			return refuse(store.ErrLeaseLost)
		}
		next := row
		next.LeaseExpiresAt = until
		return t.putRow(k, &row, &next)
	})
}

// Update implements store.Store.
func (s *State) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	k := execKey(g.Key)
	var got store.Execution
	err := s.db.update(ctx, func(t *txn) error {
		row, ok, err := s.liveAs(t.tx, g.Key, s.clock.Now(), true)
		switch {
		case err != nil:
			return err
		case !ok:
			return refuse(store.ErrNotFound)
		case row.Version != g.Version || row.LeaseOwner != g.LeaseOwner:
			if g.LeaseOwner != "" {
				return refuse(store.ErrLeaseLost)
			}
			return refuse(store.ErrConflict)
		}
		u := next
		u.TenantID, u.ExecutionID, u.PipelineID = row.TenantID, row.ExecutionID, row.PipelineID
		u.PipelineVersion, u.IdempotencyKey, u.Input = row.PipelineVersion, row.IdempotencyKey, row.Input
		u.Fingerprint, u.CreateToken, u.CreatedAt, u.Parent = row.Fingerprint, row.CreateToken, row.CreatedAt, row.Parent
		u.ConcurrencyKey, u.RateLimit, u.RateKey = row.ConcurrencyKey, row.RateLimit, row.RateKey
		u.Priority, u.Rank = row.Priority, row.Rank
		if u.ExpiresAt.IsZero() {
			u.ExpiresAt = row.ExpiresAt
		}
		if g.KeepSweep {
			u.SweepAt, u.Sweeps = row.SweepAt, row.Sweeps
		}
		u.Version = g.Version + 1
		u = normalize(u)
		if err := t.putRow(k, &row, &u); err != nil {
			return err
		}
		got = u
		return nil
	})
	return got, err
}

// Reschedule implements store.Store.
func (s *State) Reschedule(ctx context.Context, key store.Key, from, to time.Time, sweeps int) error {
	k := execKey(key)
	return s.db.update(ctx, func(t *txn) error {
		row, ok, err := s.liveAs(t.tx, key, s.clock.Now(), true)
		switch {
		case err != nil:
			return err
		case !ok:
			return refuse(store.ErrNotFound)
		case ms(row.SweepAt) != ms(from) || row.SweepAt.IsZero() != from.IsZero():
			return refuse(store.ErrConflict)
		}
		next := row
		next.SweepAt, next.Sweeps = to, sweeps
		next = normalize(next)
		return t.putRow(k, &row, &next)
	})
}

// Due implements store.Store: a scan of the sweep index from its start
// (or after the cursor's entry) while entries are due by q.By.
func (s *State) Due(ctx context.Context, q store.DueQuery) (store.DuePage, error) {
	var after []byte
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || len(b) < 8 {
			return store.DuePage{}, fmt.Errorf("embedded: invalid due cursor")
		}
		after = b
	}
	limit := max(q.Limit, 1)
	var page store.DuePage
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		now := s.clock.Now()
		c := tx.Bucket(bSweep).Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else {
			k, v = c.Seek(after)
			if k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		by := ms(q.By)
		for ; k != nil; k, v = c.Next() {
			at := int64(be64Uint(k))
			if at > by {
				break
			}
			if _, ok := splitExecKey(k[8:]); !ok {
				return fmt.Errorf("%w: sweep index key %x", ErrDamaged, k)
			}
			row, live, err := s.live(tx, k[8:], now)
			if err != nil {
				return err
			}
			if !live || ms(row.SweepAt) != at {
				continue // expired, or a stale entry
			}
			key := row.Key() // the incarnation living in the slot
			if len(page.Refs) == limit {
				page.Cursor = base64.RawURLEncoding.EncodeToString(sweepKey(page.Refs[limit-1].SweepAt, execKey(page.Refs[limit-1].Key)))
				return nil
			}
			page.Refs = append(page.Refs, store.DueRef{Key: key, PipelineID: string(v), SweepAt: fromMs(at)})
		}
		return nil
	})
	return page, err
}

func be64Uint(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
