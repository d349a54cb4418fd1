package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// Pause and concurrency keys (docs/pipelines.md, "Concurrency keys"):
// a WAITING_KEY execution can be paused and leaves the line; resumed, it
// waits again in its submission order. A paused execution that holds
// its key's slot keeps it.

var c1Scope = store.SlotScope{TenantID: "t1", PipelineID: "p.keyed", Key: "c1"}

// runKeyed delivers, lets the keyed pipeline's hour-long sleeps pass and
// sweeps, rounds times.
func runKeyed(c *cluster, rt *engine.Runtime, rounds int) {
	for range rounds {
		deliver(rt, c.queue)
		time.Sleep(time.Hour + time.Minute)
		c.sweep(rt)
	}
	deliver(rt, c.queue)
}

// submitKeyed submits labels for customer c1, a millisecond apart (their
// submission order), and returns their ids.
func submitKeyed(t *testing.T, rt *engine.Runtime, labels ...string) []string {
	var ids []string
	for _, l := range labels {
		ids = append(ids, submitTo(t, rt, "p.keyed", l, keyedOrder{Customer: "c1", Label: l}).ExecutionID)
		time.Sleep(time.Millisecond)
	}
	return ids
}

// A paused waiter leaves the line (the next waiter gets the slot it
// would have had); resumed, it waits again ahead of the waiters
// submitted after it, and every execution ends.
func TestConcurrencyKeyPauseWaiterKeepsItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		rt := c.worker("w", engine.Config{}, nil, keyedPipeline(1, &started, &mu))
		ctx := context.Background()
		ids := submitKeyed(t, rt, "e1", "e2", "e3", "e4")
		deliver(rt, c.queue) // e1 takes the slot (and sleeps); the others wait
		e2 := c.get(ids[1])
		if e2.Status != store.WaitingKey {
			t.Fatalf("e2 is %s; want WAITING_KEY", e2.Status)
		}
		got, changed, err := rt.Pause(ctx, e2.Key(), pauseOpts("hold e2"))
		if err != nil || !changed || got.Status != store.Paused || got.PausedFrom != store.WaitingKey || !got.SweepAt.IsZero() {
			t.Fatalf("Pause of a waiter = %s from %s (sweep %v) changed=%v, %v; want PAUSED from WAITING_KEY, out of the sweep index",
				got.Status, got.PausedFrom, got.SweepAt, changed, err)
		}
		keys, err := c.store.(store.SlotStore).Waiting(ctx, c1Scope, 10)
		if err != nil || len(keys) != 2 || store.Slot(keys[0].ExecutionID) != store.Slot(ids[2]) {
			t.Fatalf("waiting %v (%v); want e3, e4: the paused e2 left the line", keys, err)
		}
		runKeyed(c, rt, 2) // e1 ends and hands its slot to e3, not to the paused e2
		if row := c.get(ids[1]); row.Status != store.Paused {
			t.Fatalf("paused e2 is %s after e1 ended; want still PAUSED", row.Status)
		}
		if row := c.get(ids[2]); row.Status == store.WaitingKey || !row.SlotHeld {
			t.Fatalf("e3 is %s (slot %v) after e1 ended; want it started", row.Status, row.SlotHeld)
		}
		back, err := rt.Resume(ctx, e2.Key(), pauseOpts("go on"))
		if err != nil || back.Status != store.Queued || back.SlotHeld {
			t.Fatalf("Resume = %s (slot %v), %v; want QUEUED to take its slot", back.Status, back.SlotHeld, err)
		}
		deliver(rt, c.queue) // the key is held by e3: e2 waits again, ahead of e4
		keys, err = c.store.(store.SlotStore).Waiting(ctx, c1Scope, 10)
		if err != nil || len(keys) != 2 || store.Slot(keys[0].ExecutionID) != store.Slot(ids[1]) {
			t.Fatalf("waiting %v (%v); want e2 then e4 (submission order)", keys, err)
		}
		runKeyed(c, rt, 6)
		for i, id := range ids {
			if row := c.get(id); row.Status != store.Succeeded {
				t.Fatalf("e%d ended %s; want SUCCEEDED", i+1, row.Status)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"e1", "e3", "e2", "e4"}; !slices.Equal(started, want) {
			t.Fatalf("started %v; want %v", started, want)
		}
	})
}

// A paused execution that holds its key's slot keeps it however long it
// is paused: no waiter starts meanwhile (the sweeper's looks at the
// waiter do not evict it); resumed, it ends and hands the slot on.
func TestConcurrencyKeyPauseHoldsTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		rt := c.worker("w", engine.Config{}, nil, keyedPipeline(1, &started, &mu))
		ctx := context.Background()
		ids := submitKeyed(t, rt, "e1", "e2")
		deliver(rt, c.queue) // e1 runs a and sleeps, holding the slot; e2 waits
		e1 := c.get(ids[0])
		if _, _, err := rt.Pause(ctx, e1.Key(), pauseOpts("hold e1")); err != nil {
			t.Fatal(err)
		}
		runKeyed(c, rt, 5) // hours of sweeps: e2's looks find the key held
		if row := c.get(ids[0]); row.Status != store.Paused || !row.SlotHeld {
			t.Fatalf("e1 is %s (slot %v); want PAUSED holding its slot", row.Status, row.SlotHeld)
		}
		if row := c.get(ids[1]); row.Status != store.WaitingKey {
			t.Fatalf("e2 is %s while e1 is paused with the slot; want WAITING_KEY", row.Status)
		}
		if hs := holdersOf(t, c.store, "c1"); len(hs) != 1 || hs[0] != e1.Holder() {
			t.Fatalf("holders %v; want e1 alone", hs)
		}
		if _, err := rt.Resume(ctx, e1.Key(), pauseOpts("go on")); err != nil {
			t.Fatal(err)
		}
		runKeyed(c, rt, 4)
		for i, id := range ids {
			if row := c.get(id); row.Status != store.Succeeded {
				t.Fatalf("e%d ended %s; want SUCCEEDED", i+1, row.Status)
			}
		}
	})
}

// A waiter handed a slot just as it is paused holds none: the pause
// passes a slot it finds handed over to the next waiter at once, and a
// hand-over that lands after the pause is evicted by the sweeper's look
// at the next waiter.
func TestConcurrencyKeyPausedWaiterHoldsNoSlot(t *testing.T) {
	for _, handedAfterPause := range []bool{false, true} {
		name := "handed before the pause"
		if handedAfterPause {
			name = "handed after the pause"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t)
				var mu sync.Mutex
				var started []string
				ss := c.store.(store.SlotStore)
				faults := &slotFaults{Store: c.store, ss: ss}
				rt := c.workerOn("w", engine.Config{}, nil, faults, keyedPipeline(1, &started, &mu))
				ctx := context.Background()
				ids := submitKeyed(t, rt, "e1", "e2", "e3")
				faults.failRelease = true // e1's release will fail: its slot stays
				runKeyed(c, rt, 2)
				faults.failRelease = false
				e1, e2 := c.get(ids[0]), c.get(ids[1])
				if e1.Status != store.Succeeded || e2.Status != store.WaitingKey {
					t.Fatalf("e1 %s, e2 %s; want SUCCEEDED and WAITING_KEY", e1.Status, e2.Status)
				}
				handOver := func() { // a releaser that read e2 as the oldest waiter
					h := e2.Holder()
					if ok, err := ss.ReleaseSlot(ctx, c1Scope, e1.Holder(), &h, time.Now().Add(time.Hour)); err != nil || !ok {
						t.Fatalf("hand-over = %v, %v", ok, err)
					}
				}
				if !handedAfterPause {
					handOver()
				}
				if _, _, err := rt.Pause(ctx, e2.Key(), pauseOpts("hold e2")); err != nil {
					t.Fatal(err)
				}
				if handedAfterPause {
					handOver()
					time.Sleep(rt.Config().KeyWaitLook + time.Minute)
					c.sweep(rt) // the look at e3 evicts the paused e2's slot and starts e3
				}
				if row := c.get(ids[2]); row.Status != store.Queued || !row.SlotHeld {
					t.Fatalf("e3 is %s (slot %v); want woken with the slot the paused e2 was handed", row.Status, row.SlotHeld)
				}
				if hs := holdersOf(t, c.store, "c1"); len(hs) != 1 || hs[0].ExecutionID != ids[2] {
					t.Fatalf("holders %v; want e3 alone", hs)
				}
				if _, err := rt.Resume(ctx, e2.Key(), pauseOpts("go on")); err != nil {
					t.Fatal(err)
				}
				runKeyed(c, rt, 6)
				for i, id := range ids {
					if row := c.get(id); row.Status != store.Succeeded {
						t.Fatalf("e%d ended %s; want SUCCEEDED", i+1, row.Status)
					}
				}
			})
		})
	}
}
