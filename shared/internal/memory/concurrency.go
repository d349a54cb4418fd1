// Concurrency keys (store.SlotStore): one record per key holding its
// holders, and the set of waiting rows (kept by index).

package memory

import (
	"context"
	"sort"
	"time"

	"github.com/qasync/qasync/shared/store"
)

var _ store.SlotStore = (*StateStore)(nil)

// slotRec is one key's record: its holders' lives by execution id.
type slotRec struct {
	holders map[string]int
	expires time.Time
}

// waiting reports whether row belongs in the waiting set.
func waiting(row *store.Execution) bool {
	return row.Status == store.WaitingKey && row.ConcurrencyKey != ""
}

// slotRecord returns scope's live record, creating an empty one. Callers
// hold s.mu.
func (s *StateStore) slotRecord(sc store.SlotScope) *slotRec {
	r := s.slots[sc.ID()]
	if r == nil || expired(r.expires, s.clock.Now()) {
		r = &slotRec{holders: map[string]int{}}
		s.slots[sc.ID()] = r
	}
	return r
}

func (r *slotRec) list() []store.SlotHolder {
	out := make([]store.SlotHolder, 0, len(r.holders))
	for id, life := range r.holders {
		out = append(out, store.SlotHolder{ExecutionID: id, Life: life})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ExecutionID < out[j].ExecutionID })
	return out
}

// AcquireSlot implements store.SlotStore.
func (s *StateStore) AcquireSlot(ctx context.Context, sc store.SlotScope, h store.SlotHolder, limit int, expires time.Time) ([]store.SlotHolder, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.slotRecord(sc)
	life, holds := r.holders[h.ExecutionID]
	if holds && life != h.Life || !holds && len(r.holders) >= limit {
		return r.list(), false, nil
	}
	r.holders[h.ExecutionID], r.expires = h.Life, expires
	return nil, true, nil
}

// ReleaseSlot implements store.SlotStore.
func (s *StateStore) ReleaseSlot(ctx context.Context, sc store.SlotScope, h store.SlotHolder, next *store.SlotHolder, expires time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.slotRecord(sc)
	if life, holds := r.holders[h.ExecutionID]; !holds || life != h.Life {
		return false, nil
	}
	delete(r.holders, h.ExecutionID)
	if next != nil {
		r.holders[next.ExecutionID] = next.Life
	}
	r.expires = expires
	return true, nil
}

// Slots implements store.SlotStore.
func (s *StateStore) Slots(ctx context.Context, sc store.SlotScope) ([]store.SlotHolder, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.slots[sc.ID()]
	if r == nil || expired(r.expires, s.clock.Now()) {
		return nil, nil
	}
	return r.list(), nil
}

// Waiting implements store.SlotStore.
func (s *StateStore) Waiting(ctx context.Context, sc store.SlotScope, limit int) ([]store.Key, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	var rows []*store.Execution
	for k := range s.wait {
		if row := s.live(k, now); row != nil && waiting(row) && row.SlotScope() == sc {
			rows = append(rows, row)
		}
	}
	s.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if a, b := rows[i].WaitRank().UnixMilli(), rows[j].WaitRank().UnixMilli(); a != b {
			return a < b
		}
		return rows[i].ExecutionID < rows[j].ExecutionID
	})
	keys := make([]store.Key, 0, min(len(rows), max(limit, 1)))
	for _, row := range rows[:min(len(rows), max(limit, 1))] {
		keys = append(keys, row.Key())
	}
	return keys, nil
}
