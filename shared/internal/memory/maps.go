// A map's counts (store.MapStore): one record per group (its ended and
// failed indexes) and one of finished groups, each with its expiry.

package memory

import (
	"context"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/store"
)

var _ store.MapStore = (*StateStore)(nil)

// mapRecKey names one count record: a group (from 0) or the finished set
// (finishedRec).
type mapRecKey struct {
	m store.MapKey
	n int
}

const finishedRec = -1

// mapRec is one count record.
type mapRec struct {
	ended, failed map[int]bool
	expires       time.Time
}

// addTo adds i to record k (and to its failed set when failed), keeping
// the later expiry, and returns the size of its ended set. Callers hold
// s.mu.
func (s *StateStore) addTo(k mapRecKey, i int, failed bool, expires time.Time) int {
	r := s.maps[k]
	if r == nil || expired(r.expires, s.clock.Now()) {
		r = &mapRec{ended: map[int]bool{}, failed: map[int]bool{}}
		s.maps[k] = r
	}
	r.ended[i] = true
	if failed {
		r.failed[i] = true
	}
	if expires.After(r.expires) {
		r.expires = expires
	}
	return len(r.ended)
}

// CountChild implements store.MapStore.
func (s *StateStore) CountChild(ctx context.Context, m store.MapKey, index int, failed bool, expires time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addTo(mapRecKey{m, index / store.GroupSize}, index, failed, expires), nil
}

// FinishGroup implements store.MapStore.
func (s *StateStore) FinishGroup(ctx context.Context, m store.MapKey, group int, expires time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addTo(mapRecKey{m, finishedRec}, group, false, expires), nil
}

// MapCounts implements store.MapStore.
func (s *StateStore) MapCounts(ctx context.Context, m store.MapKey, total int) (store.MapCounts, error) {
	if err := ctx.Err(); err != nil {
		return store.MapCounts{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out store.MapCounts
	live := func(n int) *mapRec {
		r := s.maps[mapRecKey{m, n}]
		if r != nil && expired(r.expires, now) {
			delete(s.maps, mapRecKey{m, n})
			return nil
		}
		return r
	}
	for g := range store.Groups(total) {
		if r := live(g); r != nil {
			out.Ended = appendSet(out.Ended, r.ended)
			out.Failed = appendSet(out.Failed, r.failed)
		}
	}
	if r := live(finishedRec); r != nil {
		out.Finished = appendSet(nil, r.ended)
	}
	return out, nil
}

func appendSet(out []int, set map[int]bool) []int {
	start := len(out)
	for i := range set {
		out = append(out, i)
	}
	slices.Sort(out[start:])
	return out
}
