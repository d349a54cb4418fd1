// Concurrency keys (store.SlotStore) in the slots bucket (one record per
// key: its holders) and the waitkey index (the waiting rows of a key,
// lowest rank first), which putRow keeps in step with the rows.

package embedded

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/store"
)

var _ store.SlotStore = (*State)(nil)

// slotRec is the stored form of a key's record: holders' lives by
// execution id, and the expiry.
type slotRec struct {
	H map[string]int `json:"h,omitempty"`
	X int64          `json:"x"`
}

func (r *slotRec) list() []store.SlotHolder {
	out := make([]store.SlotHolder, 0, len(r.H))
	for id, life := range r.H {
		out = append(out, store.SlotHolder{ExecutionID: id, Life: life})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ExecutionID < out[j].ExecutionID })
	return out
}

// readSlotRec reads scope's record (an expired or missing one as empty).
func readSlotRec(tx *bolt.Tx, sc store.SlotScope, now time.Time) (slotRec, error) {
	r := slotRec{H: map[string]int{}}
	v := tx.Bucket(bSlots).Get([]byte(sc.ID()))
	if v == nil {
		return r, nil
	}
	if err := openJSON(v, &r, fmt.Sprintf("slot record %q", sc.ID())); err != nil {
		return slotRec{}, err
	}
	if r.H == nil || expired(fromSecs(r.X), now) {
		return slotRec{H: map[string]int{}}, nil
	}
	return r, nil
}

func (t *txn) putSlotRec(sc store.SlotScope, r *slotRec) error {
	v, err := sealJSON(r)
	if err != nil {
		return err
	}
	return t.bucket(bSlots).Put([]byte(sc.ID()), v)
}

// waitKey is a waiting row's entry: its key's scope, its rank
// (Execution.WaitRank, fixed at submit, so the entry a row was put under
// is the one its next write deletes), its row key.
func waitKey(e *store.Execution, k []byte) []byte {
	b := appendStr(nil, e.SlotScope().ID())
	return append(append(b, be64(ms(e.WaitRank()))...), k...)
}

func waitingRow(e *store.Execution) bool {
	return e != nil && e.Status == store.WaitingKey && e.ConcurrencyKey != ""
}

// syncWaiting keeps the waitkey index in step with a row written over old
// (either may be nil).
func (t *txn) syncWaiting(k []byte, old, next *store.Execution) error {
	was, is := waitingRow(old), waitingRow(next)
	if was && !is {
		return t.bucket(bWaitKey).Delete(waitKey(old, k))
	}
	if is && !was {
		return t.bucket(bWaitKey).Put(waitKey(next, k), nil)
	}
	return nil
}

// AcquireSlot implements store.SlotStore.
func (s *State) AcquireSlot(ctx context.Context, sc store.SlotScope, h store.SlotHolder, limit int, expires time.Time) ([]store.SlotHolder, bool, error) {
	var refused []store.SlotHolder
	ok := false
	err := s.db.update(ctx, func(t *txn) error {
		r, err := readSlotRec(t.tx, sc, s.clock.Now())
		if err != nil {
			return err
		}
		life, holds := r.H[h.ExecutionID]
		if holds && life != h.Life || !holds && len(r.H) >= limit {
			refused, ok = r.list(), false
			return nil
		}
		r.H[h.ExecutionID], r.X, ok = h.Life, secs(expires), true
		return t.putSlotRec(sc, &r)
	})
	return refused, ok, err
}

// ReleaseSlot implements store.SlotStore.
func (s *State) ReleaseSlot(ctx context.Context, sc store.SlotScope, h store.SlotHolder, next *store.SlotHolder, expires time.Time) (bool, error) {
	released := false
	err := s.db.update(ctx, func(t *txn) error {
		r, err := readSlotRec(t.tx, sc, s.clock.Now())
		if err != nil {
			return err
		}
		if life, holds := r.H[h.ExecutionID]; !holds || life != h.Life {
			released = false
			return nil
		}
		delete(r.H, h.ExecutionID)
		if next != nil {
			r.H[next.ExecutionID] = next.Life
		}
		r.X, released = secs(expires), true
		return t.putSlotRec(sc, &r)
	})
	return released, err
}

// Slots implements store.SlotStore.
func (s *State) Slots(ctx context.Context, sc store.SlotScope) ([]store.SlotHolder, error) {
	var out []store.SlotHolder
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		r, err := readSlotRec(tx, sc, s.clock.Now())
		out = r.list()
		return err
	})
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// Waiting implements store.SlotStore: a prefix scan of the waitkey index.
func (s *State) Waiting(ctx context.Context, sc store.SlotScope, limit int) ([]store.Key, error) {
	var keys []store.Key
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		keys = nil
		prefix := appendStr(nil, sc.ID())
		c := tx.Bucket(bWaitKey).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(keys) < max(limit, 1); k, _ = c.Next() {
			rest := k[len(prefix):]
			if len(rest) < 8 {
				continue
			}
			if key, ok := splitExecKey(rest[8:]); ok {
				keys = append(keys, key)
			}
		}
		return nil
	})
	return keys, err
}
