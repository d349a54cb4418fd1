// A map's counts (store.MapStore) in the maps bucket: one record per
// group (its ended and failed indexes) and one holding the finished
// groups, each with its expiry.

package embedded

import (
	"context"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/store"
)

var _ store.MapStore = (*State)(nil)

// mapRec is the stored form of one count record: a group's ended (E) and
// failed (F) indexes, or the finished groups (E) of the map's own record.
type mapRec struct {
	E []int `json:"e,omitempty"`
	F []int `json:"f,omitempty"`
	X int64 `json:"x"`
}

// finishedSlot is the record number of a map's finished set (groups are
// numbered from 0).
const finishedSlot = -1

// mapRecKey is the key of record n of map m: the tenant, the parent id
// and the step, each length-prefixed, then n, then the round when it is
// not 0 (so a later round's records are others).
func mapRecKey(m store.MapKey, n int) []byte {
	k := appendStr(appendStr(nil, m.TenantID), m.ParentID)
	k = append(k, be64(int64(m.StepIndex))...)
	k = append(k, be64(int64(n))...)
	if m.Round > 0 {
		k = append(k, be64(int64(m.Round))...)
	}
	return k
}

// readMapRec reads record k (an expired one as empty).
func readMapRec(tx *bolt.Tx, k []byte, now time.Time) (mapRec, error) {
	var r mapRec
	v := tx.Bucket(bMaps).Get(k)
	if v == nil {
		return r, nil
	}
	if err := openJSON(v, &r, fmt.Sprintf("map record %x", k)); err != nil {
		return mapRec{}, err
	}
	if expired(fromSecs(r.X), now) {
		return mapRec{}, nil
	}
	return r, nil
}

// addToMapRec adds i to record k's E (and to F when alsoF), keeping the
// later expiry, and returns len(E) after the write.
func (s *State) addToMapRec(ctx context.Context, k []byte, i int, alsoF bool, expires time.Time) (int, error) {
	n := 0
	err := s.db.update(ctx, func(t *txn) error {
		r, err := readMapRec(t.tx, k, s.clock.Now())
		if err != nil {
			return err
		}
		r.E = addSorted(r.E, i)
		if alsoF {
			r.F = addSorted(r.F, i)
		}
		r.X = max(r.X, secs(expires))
		v, err := sealJSON(&r)
		if err != nil {
			return err
		}
		n = len(r.E)
		return t.bucket(bMaps).Put(k, v)
	})
	return n, err
}

func addSorted(set []int, i int) []int {
	if at, found := slices.BinarySearch(set, i); !found {
		set = slices.Insert(set, at, i)
	}
	return set
}

// CountChild implements store.MapStore.
func (s *State) CountChild(ctx context.Context, m store.MapKey, index int, failed bool, expires time.Time) (int, error) {
	return s.addToMapRec(ctx, mapRecKey(m, index/store.GroupSize), index, failed, expires)
}

// FinishGroup implements store.MapStore.
func (s *State) FinishGroup(ctx context.Context, m store.MapKey, group int, expires time.Time) (int, error) {
	return s.addToMapRec(ctx, mapRecKey(m, finishedSlot), group, false, expires)
}

// MapCounts implements store.MapStore.
func (s *State) MapCounts(ctx context.Context, m store.MapKey, total int) (store.MapCounts, error) {
	var out store.MapCounts
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		now := s.clock.Now()
		out = store.MapCounts{}
		for g := range store.Groups(total) {
			r, err := readMapRec(tx, mapRecKey(m, g), now)
			if err != nil {
				return err
			}
			out.Ended = append(out.Ended, r.E...)
			out.Failed = append(out.Failed, r.F...)
		}
		r, err := readMapRec(tx, mapRecKey(m, finishedSlot), now)
		out.Finished = r.E
		return err
	})
	return out, err
}
