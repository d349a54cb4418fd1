// Rate limits (store.RateStore) in the rates bucket: one record per
// bucket, its theoretical arrival time, moved in one transaction.

package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/store"
)

var _ store.RateStore = (*State)(nil)

// rateRec is the stored form of a bucket: its theoretical arrival time
// (Unix nanoseconds).
type rateRec struct {
	T int64 `json:"t"`
}

// expired reports whether the janitor may drop the record: its tat is a
// store.RateRecordTTL behind now (it reads as unused long before).
func (r *rateRec) expired(now time.Time) bool {
	return time.Unix(0, r.T).Add(store.RateRecordTTL).Before(now)
}

// Reserve implements store.RateStore.
func (s *State) Reserve(ctx context.Context, sc store.RateScope, interval time.Duration, burst int, horizon time.Duration, now time.Time) (time.Time, bool, error) {
	var at time.Time
	ok := false
	err := s.db.update(ctx, func(t *txn) error {
		var tat time.Time
		if v := t.bucket(bRates).Get([]byte(sc.ID())); v != nil {
			var r rateRec
			if err := openJSON(v, &r, fmt.Sprintf("rate record %q", sc.ID())); err != nil {
				return err
			}
			tat = time.Unix(0, r.T)
		}
		var next time.Time
		at, ok, next = store.Reserve(tat, interval, burst, horizon, now)
		if !ok {
			return nil
		}
		v, err := sealJSON(&rateRec{T: next.UnixNano()})
		if err != nil {
			return err
		}
		return t.bucket(bRates).Put([]byte(sc.ID()), v)
	})
	return at, ok, err
}
