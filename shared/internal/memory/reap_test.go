package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// TestExpiredEntriesAreReclaimed: entries that expired and are never read
// again do not stay in memory: after reapEvery more writes each store
// holds what is live only. A process on the memory providers runs for
// months (the simulation runs two years) without growing with all it
// ever stored.
func TestExpiredEntriesAreReclaimed(t *testing.T) {
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx := t.Context()
	parts, rows, effects, letters := NewPayloadStore(c), NewStateStore(c), NewEffects(c), NewDeadLetters(c)
	write := func(round, n int, ttl time.Duration) {
		for i := range n {
			id := fmt.Sprintf("r%d-%d", round, i)
			exp := c.Now().Add(ttl)
			if err := parts.PutPart(ctx, payload.Part{PayloadID: id, Name: "manifest", Data: []byte("x"), ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
			e := store.Execution{TenantID: "t", ExecutionID: id + ".i", PipelineID: "p", Status: store.Succeeded, Version: 1,
				CreatedAt: c.Now(), UpdatedAt: c.Now(), ExpiresAt: exp}
			if _, _, err := rows.CreateOrGet(ctx, store.CreateRequest{Execution: e}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := effects.CreateOrGet(ctx, effect.Record{CommandID: id, State: effect.Pending, CreatedAt: c.Now(), ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
			if _, err := letters.Put(ctx, deadletter.Record{ID: id, RecordedAt: c.Now(), ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
		}
	}
	held := func() [4]int {
		return [4]int{len(parts.parts), len(rows.rows), len(effects.records), len(letters.records)}
	}
	write(0, reapEvery, time.Minute) // all expire
	c.Advance(2 * time.Minute)
	write(1, reapEvery, time.Hour) // a pass runs during these
	for i, n := range held() {
		if n > reapEvery {
			t.Errorf("store %d holds %d entries, want at most %d (the live ones and those written since the pass)", i, n, reapEvery)
		}
	}
	if n := parts.LiveParts(); n != reapEvery {
		t.Errorf("%d live parts, want %d: a pass dropped a live one", n, reapEvery)
	}
}
