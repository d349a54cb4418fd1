// Rate limits (store.RateStore): a bucket's theoretical arrival time by
// scope, moved under the store's lock.

package memory

import (
	"context"
	"time"

	"github.com/qasync/qasync/shared/store"
)

var _ store.RateStore = (*StateStore)(nil)

// Reserve implements store.RateStore. A bucket whose tat is behind now
// holds nothing: it is dropped as a reservation passes by (the store
// keeps only buckets in use).
func (s *StateStore) Reserve(ctx context.Context, sc store.RateScope, interval time.Duration, burst int, horizon time.Duration, now time.Time) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok, next := store.Reserve(s.rates[sc.ID()], interval, burst, horizon, now)
	if ok {
		s.rates[sc.ID()] = next
	}
	if s.rateReap.due() {
		for id, tat := range s.rates {
			if tat.Add(store.RateRecordTTL).Before(now) {
				delete(s.rates, id)
			}
		}
	}
	return at, ok, nil
}
