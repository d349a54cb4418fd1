package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// keyedOrder is the input of the keyed pipeline: a customer and a label.
type keyedOrder struct {
	Customer string `json:"customer"`
	Label    string `json:"label"`
}

// keyedPipeline is a, a sleep of an hour (the slot is kept while the
// execution sleeps), b; at most limit executions per customer hold a
// slot. started records the labels in the keyedOrder their a ran.
func keyedPipeline(limit int, started *[]string, mu *sync.Mutex) pipeline.Pipeline {
	a := pipeline.NewStep("a", func(_ context.Context, _ pipeline.StepInfo, in keyedOrder) (keyedOrder, error) {
		mu.Lock()
		*started = append(*started, in.Label)
		mu.Unlock()
		return in, nil
	})
	b := pipeline.NewStep("b", func(_ context.Context, _ pipeline.StepInfo, in keyedOrder) (keyedOrder, error) { return in, nil })
	return pipeline.Pipeline{ID: "p.keyed", Steps: []pipeline.Step{a, pipeline.Sleep("nap", time.Hour), b},
		Concurrency: pipeline.ConcurrencyKey("customer", limit, func(o keyedOrder) string { return o.Customer })}
}

// holdersOf returns the holders of customer's key.
func holdersOf(t *testing.T, st store.Store, customer string) []store.SlotHolder {
	t.Helper()
	hs, err := st.(store.SlotStore).Slots(context.Background(), store.SlotScope{TenantID: "t1", PipelineID: "p.keyed", Key: customer})
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// drainKeyed delivers every queued item until none is left, checking
// after each delivery that no more than limit executions of customer hold
// a slot, and that no more than limit of its rows are past their wait
// (neither WAITING_KEY nor QUEUED at step 0 without a slot) and not ended.
func drainKeyed(t *testing.T, c *cluster, rt *engine.Runtime, ids []string, limit int) {
	t.Helper()
	for range 100 {
		msgs := c.queue.take()
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			_ = rt.Process(context.Background(), m.Item)
			started := 0
			for _, id := range ids {
				row := c.get(id)
				if row.SlotHeld && !row.Status.Terminal() {
					started++
				}
			}
			if started > limit || len(holdersOf(t, c.store, "c1")) > limit {
				t.Fatalf("%d executions started and %d slots held for key c1, limit %d", started, len(holdersOf(t, c.store, "c1")), limit)
			}
		}
	}
	t.Fatal("the queue never drained")
}

// At most the limit of one key's executions run; the others wait as
// WAITING_KEY (visible with their key) and start in submission keyedOrder as
// holders end; another key is not held up; a pipeline without a key
// writes no slot.
func TestConcurrencyKeyLimitsAndReleasesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		rt := c.worker("w", engine.Config{}, nil, keyedPipeline(2, &started, &mu))
		var ids []string
		for _, label := range []string{"e1", "e2", "e3", "e4", "e5"} {
			ids = append(ids, submitTo(t, rt, "p.keyed", label, keyedOrder{Customer: "c1", Label: label}).ExecutionID)
			time.Sleep(time.Millisecond)
		}
		other := submitTo(t, rt, "p.keyed", "x1", keyedOrder{Customer: "c2", Label: "x1"})
		deliver(rt, c.queue)
		for i, want := range []store.Status{store.Queued, store.Queued, store.WaitingKey, store.WaitingKey, store.WaitingKey} {
			row := c.get(ids[i])
			if row.Status != want || row.ConcurrencyKey != "c1" {
				t.Fatalf("%s: %s key %q, want %s key c1", ids[i], row.Status, row.ConcurrencyKey, want)
			}
			if want == store.Queued && (row.StepName != "b" || !row.SlotHeld) {
				t.Fatalf("%s holds no slot while it sleeps (%s, held %v)", ids[i], row.StepName, row.SlotHeld)
			}
		}
		if row := c.get(other.ExecutionID); row.Status != store.Queued || row.StepName != "b" {
			t.Fatalf("the other key's execution is %s at %s; want it running (sleeping)", row.Status, row.StepName)
		}
		keys, err := c.store.(store.SlotStore).Waiting(context.Background(), store.SlotScope{TenantID: "t1", PipelineID: "p.keyed", Key: "c1"}, 10)
		if err != nil || len(keys) != 3 || store.Slot(keys[0].ExecutionID) != store.Slot(ids[2]) {
			t.Fatalf("waiting %v (%v); want e3, e4, e5", keys, err)
		}
		if n := len(c.queue.take()); n != 3 { // the sleepers' delayed items
			t.Fatalf("%d items queued after the first round; want the 3 sleepers'", n)
		}
		time.Sleep(time.Hour)
		c.queue.msgs = nil
		res := c.sweep(rt) // the sleepers are due: re-dispatched
		_ = res
		drainKeyed(t, c, rt, ids, 2)
		for range 3 {
			time.Sleep(time.Hour + time.Minute)
			c.sweep(rt)
			drainKeyed(t, c, rt, ids, 2)
		}
		for _, id := range append(ids, other.ExecutionID) {
			if row := c.get(id); row.Status != store.Succeeded {
				t.Fatalf("%s ended %s; want SUCCEEDED", id, row.Status)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"e1", "e2", "x1", "e3", "e4", "e5"}
		if len(started) != len(want) {
			t.Fatalf("started %v, want %v", started, want)
		}
		for i := range want {
			if started[i] != want[i] {
				t.Fatalf("started %v, want %v (submission keyedOrder)", started, want)
			}
		}
		if hs := holdersOf(t, c.store, "c1"); len(hs) != 0 {
			t.Fatalf("slots still held after every execution ended: %v", hs)
		}
	})
}

// sweep runs one sweep pass of rt.
func (c *cluster) sweep(rt *engine.Runtime) engine.SweepResult {
	c.t.Helper()
	res, err := rt.SweepOnce(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

// slotFaults wraps a store: ReleaseSlot fails while failRelease is set
// (a worker that dies between its terminal commit and the release), and
// commits of one execution fail while failCommitOf names it (a worker
// that dies mid-step, before its commit).
type slotFaults struct {
	store.Store
	ss           store.SlotStore
	mu           sync.Mutex
	failRelease  bool
	failCommitOf string
}

var errSlotFault = errors.New("injected: worker died")

func (f *slotFaults) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	f.mu.Lock()
	fail := f.failCommitOf != "" && g.Key.ExecutionID == f.failCommitOf
	f.mu.Unlock()
	if fail {
		return store.Execution{}, errSlotFault
	}
	return f.Store.Update(ctx, g, next)
}

func (f *slotFaults) AcquireSlot(ctx context.Context, s store.SlotScope, h store.SlotHolder, limit int, exp time.Time) ([]store.SlotHolder, bool, error) {
	return f.ss.AcquireSlot(ctx, s, h, limit, exp)
}

func (f *slotFaults) ReleaseSlot(ctx context.Context, s store.SlotScope, h store.SlotHolder, next *store.SlotHolder, exp time.Time) (bool, error) {
	f.mu.Lock()
	fail := f.failRelease
	f.mu.Unlock()
	if fail {
		return false, errSlotFault
	}
	return f.ss.ReleaseSlot(ctx, s, h, next, exp)
}

func (f *slotFaults) Slots(ctx context.Context, s store.SlotScope) ([]store.SlotHolder, error) {
	return f.ss.Slots(ctx, s)
}

func (f *slotFaults) Waiting(ctx context.Context, s store.SlotScope, limit int) ([]store.Key, error) {
	return f.ss.Waiting(ctx, s, limit)
}

// A worker that dies mid-step keeps its execution's slot: the execution
// is taken over once the lease lapses and goes on with it (a waiter does
// not start meanwhile). A worker that dies between the terminal commit
// and the release leaks nothing: the sweeper's look at the waiter evicts
// the ended holder and starts the waiter.
func TestConcurrencyKeySlotSurvivesCrashes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		faults := &slotFaults{Store: c.store, ss: c.store.(store.SlotStore)}
		cfg := engine.Config{Lease: 30 * time.Second, SweepGrace: 10 * time.Second}
		rt := c.workerOn("w", cfg, nil, faults, keyedPipeline(1, &started, &mu))
		e1 := submitTo(t, rt, "p.keyed", "e1", keyedOrder{Customer: "c1", Label: "e1"})
		time.Sleep(time.Millisecond)
		e2 := submitTo(t, rt, "p.keyed", "e2", keyedOrder{Customer: "c1", Label: "e2"})
		msgs := c.queue.take()
		faults.failCommitOf = e1.ExecutionID
		_ = rt.Process(context.Background(), msgs[0].Item) // e1 acquires, claims, runs a, dies before its commit
		faults.failCommitOf = ""
		_ = rt.Process(context.Background(), msgs[1].Item) // e2: the key is full
		if row := c.get(e2.ExecutionID); row.Status != store.WaitingKey {
			t.Fatalf("e2 is %s while e1's worker is dead with its slot; want WAITING_KEY", row.Status)
		}
		time.Sleep(time.Minute) // the lease lapses
		c.sweep(rt)             // e1 re-dispatched for a takeover; e2's look finds the key held by a live execution
		if row := c.get(e2.ExecutionID); row.Status != store.WaitingKey {
			t.Fatalf("e2 is %s after the sweep; want still WAITING_KEY (e1 keeps its slot)", row.Status)
		}
		faults.failRelease = true // e1's worker will die right after e1's terminal commit
		for range 3 {
			deliver(rt, c.queue)
			time.Sleep(time.Hour + time.Minute)
			c.sweep(rt)
		}
		if row := c.get(e1.ExecutionID); row.Status != store.Succeeded || row.Attempt != 1 {
			t.Fatalf("e1 ended %s (attempt %d); want SUCCEEDED", row.Status, row.Attempt)
		}
		faults.failRelease = false
		if row := c.get(e2.ExecutionID); row.Status == store.WaitingKey {
			// The release failed: the look at e2 evicts e1 and wakes e2.
			time.Sleep(10 * time.Minute)
			c.sweep(rt)
		}
		for range 3 {
			deliver(rt, c.queue)
			time.Sleep(time.Hour + time.Minute)
			c.sweep(rt)
		}
		if row := c.get(e2.ExecutionID); row.Status != store.Succeeded {
			t.Fatalf("e2 ended %s; want SUCCEEDED once e1's slot was evicted", row.Status)
		}
		if !strings.Contains(c.logs.String(), `"event":"key_slot_evicted"`) {
			t.Fatalf("no key_slot_evicted event: %s", c.logs.String())
		}
	})
}

// A key the input cannot give refuses the submit; a pipeline with a
// limit out of range is refused by the registry.
func TestConcurrencyKeyRefusals(t *testing.T) {
	c := newCluster(t)
	var mu sync.Mutex
	var started []string
	rt := c.worker("w", engine.Config{}, nil, keyedPipeline(1, &started, &mu))
	long := make([]byte, pipeline.MaxConcurrencyKeyBytes+1)
	for i := range long {
		long[i] = 'k'
	}
	in, _ := payload.JSON(keyedOrder{Customer: string(long)})
	if _, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.keyed", Input: in}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Fatalf("submit with a %d-byte key: %v; want ErrInvalidInput", len(long), err)
	}
	p := keyedPipeline(0, &started, &mu)
	if _, err := pipeline.NewRegistry(p); err == nil {
		t.Fatal("a limit of 0 was accepted")
	}
	// An input without a key runs unlimited: no slot is taken.
	e := submitTo(t, rt, "p.keyed", "", keyedOrder{Label: "nokey"})
	deliver(rt, c.queue)
	if row := c.get(e.ExecutionID); row.ConcurrencyKey != "" || row.SlotHeld || row.Status == store.WaitingKey {
		t.Fatalf("a keyless input: key %q held %v status %s", row.ConcurrencyKey, row.SlotHeld, row.Status)
	}
}

// bareStore hides every optional seam of a state store, as a user's
// backend that implements store.Store alone.
type bareStore struct{ store.Store }

// A keyed pipeline on a state store that keeps no concurrency keys is
// refused at start, naming the pipeline and the key: its limit would not
// hold.
func TestKeyedPipelineNeedsASlotStore(t *testing.T) {
	c := newCluster(t)
	var mu sync.Mutex
	var started []string
	reg, err := pipeline.NewRegistry(keyedPipeline(1, &started, &mu))
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.New(engine.Config{}, engine.Deps{Registry: reg, Store: bareStore{c.store}, Payloads: c.payloads,
		Dispatcher: c.queue, DeadLetter: c.dlq})
	if err == nil || !strings.Contains(err.Error(), "p.keyed") || !strings.Contains(err.Error(), "store.SlotStore") {
		t.Fatalf("New with a keyed pipeline on a store without keys: %v", err)
	}
	// Without a keyed pipeline the same store is fine.
	plain, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "p.plain", Steps: []pipeline.Step{pipeline.NewStep("a",
		func(context.Context, pipeline.StepInfo, struct{}) (struct{}, error) { return struct{}{}, nil })}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.New(engine.Config{}, engine.Deps{Registry: plain, Store: bareStore{c.store}, Payloads: c.payloads,
		Dispatcher: c.queue, DeadLetter: c.dlq}); err != nil {
		t.Fatalf("New without keyed pipelines: %v", err)
	}
}

// An execution waiting for its key's slot longer than the retention (the
// holder paused, or sleeping, awaiting, retrying: a holder keeps its slot)
// is kept alive by the sweeper's looks: waiting is not idleness. It
// expired at its retention, an accepted execution gone with no outcome
// and no dead letter (the simulation, seed 34 on memory: "no execution
// vanishes while it lives", two WAITING_KEY rows).
func TestConcurrencyKeyWaiterOutlastsRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		ttl := 2 * time.Hour
		rt := c.worker("w", engine.Config{ExecutionTTL: ttl}, nil, keyedPipeline(1, &started, &mu))
		holder := submitTo(t, rt, "p.keyed", "e1", keyedOrder{Customer: "c1", Label: "e1"})
		time.Sleep(time.Millisecond)
		waiter := submitTo(t, rt, "p.keyed", "e2", keyedOrder{Customer: "c1", Label: "e2"})
		deliver(rt, c.queue)
		if row := c.get(waiter.ExecutionID); row.Status != store.WaitingKey {
			t.Fatalf("waiter %s, want WAITING_KEY", row.Status)
		}
		if _, _, err := rt.Pause(context.Background(), holder.Key(), pauseOpts("hold the key")); err != nil {
			t.Fatal(err)
		}
		c.queue.msgs = nil
		// A retention and a half, a sweep every 10 minutes (the holder's
		// slot record lives two retentions past its last write).
		for range 3 * ttl / 2 / (10 * time.Minute) {
			time.Sleep(10 * time.Minute)
			c.sweep(rt)
			c.queue.msgs = nil
		}
		if _, err := c.store.Get(context.Background(), waiter.Key()); err != nil {
			t.Fatalf("the waiter after a retention and a half: %v (expired while it waited)", err)
		}
		if _, err := rt.Resume(context.Background(), holder.Key(), pauseOpts("")); err != nil {
			t.Fatal(err)
		}
		for range 6 {
			drainKeyed(t, c, rt, []string{waiter.ExecutionID}, 1)
			if c.get(waiter.ExecutionID).Status.Terminal() {
				break
			}
			time.Sleep(time.Hour + time.Minute)
			c.sweep(rt)
		}
		if row := c.get(waiter.ExecutionID); row.Status != store.Succeeded {
			t.Fatalf("the waiter ended %s; want SUCCEEDED", row.Status)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(started) != "[e1 e2]" {
			t.Fatalf("started %v, want [e1 e2]", started)
		}
	})
}

// TestPausedHolderOutlivesItsSlotRecord: a holder paused longer than its
// key's record lives (two retentions past its last write) lost its slot
// to a newcomer; resumed, it ran beside the newcomer, over the limit
// (found by the simulation of a pause past three retentions). Now its
// resume re-asserts the slot: the key being full, it waits (WAITING_KEY)
// and runs after the newcomer ends.
func TestPausedHolderOutlivesItsSlotRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		ttl := 2 * time.Hour
		rt := c.worker("w", engine.Config{ExecutionTTL: ttl}, nil, keyedPipeline(1, &started, &mu))
		holder := submitTo(t, rt, "p.keyed", "e1", keyedOrder{Customer: "c1", Label: "e1"})
		deliver(rt, c.queue) // e1 takes the slot, runs a and naps
		if row := c.get(holder.ExecutionID); !row.SlotHeld {
			t.Fatalf("holder %s without its slot", row.Status)
		}
		if _, _, err := rt.Pause(context.Background(), holder.Key(), pauseOpts("hold the key")); err != nil {
			t.Fatal(err)
		}
		c.queue.msgs = nil
		// Three retentions, a sweep every 10 minutes: the key's record
		// expires under the paused holder.
		for range 3 * ttl / (10 * time.Minute) {
			time.Sleep(10 * time.Minute)
			c.sweep(rt)
			c.queue.msgs = nil
		}
		if hs := holdersOf(t, c.store, "c1"); len(hs) != 0 {
			t.Fatalf("the key's record outlived three retentions: %v (the test no longer sets up the loss)", hs)
		}
		newcomer := submitTo(t, rt, "p.keyed", "e3", keyedOrder{Customer: "c1", Label: "e3"})
		deliver(rt, c.queue) // e3 finds the key free, takes it, runs a and naps
		if row := c.get(newcomer.ExecutionID); !row.SlotHeld {
			t.Fatalf("newcomer %s without a slot", row.Status)
		}
		if _, err := rt.Resume(context.Background(), holder.Key(), pauseOpts("")); err != nil {
			t.Fatal(err)
		}
		ids := []string{holder.ExecutionID, newcomer.ExecutionID}
		for range 6 {
			drainKeyed(t, c, rt, ids, 1)
			if c.get(holder.ExecutionID).Status.Terminal() && c.get(newcomer.ExecutionID).Status.Terminal() {
				break
			}
			time.Sleep(time.Hour + time.Minute)
			c.sweep(rt)
		}
		for _, id := range ids {
			if row := c.get(id); row.Status != store.Succeeded {
				t.Fatalf("%s ended %s; want SUCCEEDED", id, row.Status)
			}
		}
	})
}
