package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/store"
)

// TestRateBucketsReaped: a bucket idle for store.RateRecordTTL is dropped
// by the next pass, so a long-running process keeps only buckets in use;
// a bucket in use is kept.
func TestRateBucketsReaped(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := NewStateStore(c)
	ctx := context.Background()
	reserve := func(key string) {
		if _, _, err := s.Reserve(ctx, store.RateScope{TenantID: "t", Limit: "api", Key: key}, time.Second, 1, time.Hour, c.Now()); err != nil {
			t.Fatal(err)
		}
	}
	reserve("idle")
	c.Advance(store.RateRecordTTL + 2*time.Second)
	for i := range reapEvery {
		reserve(fmt.Sprintf("k%d", i%10))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.rates[store.RateScope{TenantID: "t", Limit: "api", Key: "idle"}.ID()]; ok {
		t.Fatal("an idle bucket survived a pass")
	}
	if len(s.rates) != 10 {
		t.Fatalf("%d buckets kept, want the 10 in use", len(s.rates))
	}
}
