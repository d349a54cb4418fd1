package backendtest

// The concurrency-key cases of the state store suite (store.SlotStore):
// a key's slots (at most the limit held, an acquire repeated in one life
// is one, a hand-over keeps the count, a stale life refused), the index
// of waiting rows (submission order, the key's own, left when the row
// stops waiting) and the row's key and slot flag.

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// slotCases are the concurrency-key cases, run by runState on every store.
var slotCases = []struct {
	name string
	fn   func(*stateEnv, store.SlotStore)
}{
	{"SlotsUpToTheLimit", testSlotsUpToLimit},
	{"SlotReleaseHandsOver", testSlotReleaseHandsOver},
	{"SlotAcquireRaceKeepsTheLimit", testSlotRace},
	{"SlotsScopedByTenantPipelineKey", testSlotsScoped},
	{"SlotRecordExpires", testSlotsExpire},
	{"WaitingIndexInSubmissionOrder", testWaitingIndex},
	{"ConcurrencyKeyFixedAtCreate", testConcurrencyKeyFixed},
	{"WaitingIndexInRankOrder", testWaitingRank},
}

func (e *stateEnv) scope(key string) store.SlotScope {
	return store.SlotScope{TenantID: e.tenant, PipelineID: "p1", Key: key}
}

func holders(hs ...store.SlotHolder) []store.SlotHolder { return hs }

func h(id string, life int) store.SlotHolder { return store.SlotHolder{ExecutionID: id, Life: life} }

func (e *stateEnv) acquire(ss store.SlotStore, sc store.SlotScope, hd store.SlotHolder, limit int) ([]store.SlotHolder, bool) {
	e.t.Helper()
	got, ok, err := ss.AcquireSlot(e.ctx, sc, hd, limit, e.clock.Now().Add(time.Hour))
	if err != nil {
		e.t.Fatalf("AcquireSlot(%v): %v", hd, err)
	}
	return got, ok
}

func (e *stateEnv) slots(ss store.SlotStore, sc store.SlotScope) []store.SlotHolder {
	e.t.Helper()
	got, err := ss.Slots(e.ctx, sc)
	if err != nil {
		e.t.Fatalf("Slots: %v", err)
	}
	return sortHolders(got)
}

func sortHolders(hs []store.SlotHolder) []store.SlotHolder {
	out := append([]store.SlotHolder(nil), hs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].ExecutionID < out[i].ExecutionID {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func testSlotsUpToLimit(e *stateEnv, ss store.SlotStore) {
	sc := e.scope("k")
	if got := e.slots(ss, sc); len(got) != 0 {
		e.t.Fatalf("a new key holds %v", got)
	}
	for _, id := range []string{"a.1", "b.1"} {
		if _, ok := e.acquire(ss, sc, h(id, 0), 2); !ok {
			e.t.Fatalf("acquire %s under limit 2 refused", id)
		}
	}
	got, ok := e.acquire(ss, sc, h("c.1", 0), 2)
	if ok {
		e.t.Fatalf("a third holder acquired a key of limit 2")
	}
	if want := holders(h("a.1", 0), h("b.1", 0)); !reflect.DeepEqual(sortHolders(got), want) {
		e.t.Fatalf("refused acquire returned holders %v, want %v", got, want)
	}
	// The same holder in the same life acquires again (a retry, a
	// takeover): still two holders.
	if _, ok := e.acquire(ss, sc, h("a.1", 0), 2); !ok {
		e.t.Fatalf("a holder's repeated acquire was refused")
	}
	// Another life of a holder is not it: refused, even below the limit.
	if _, ok := e.acquire(ss, sc, h("a.1", 1), 3); ok {
		e.t.Fatalf("a re-driven holder acquired over its stale entry")
	}
	if got := e.slots(ss, sc); !reflect.DeepEqual(got, holders(h("a.1", 0), h("b.1", 0))) {
		e.t.Fatalf("Slots = %v", got)
	}
}

func testSlotReleaseHandsOver(e *stateEnv, ss store.SlotStore) {
	sc, exp := e.scope("k"), e.clock.Now().Add(time.Hour)
	e.acquire(ss, sc, h("a.1", 0), 2)
	e.acquire(ss, sc, h("b.1", 0), 2)
	next := h("c.1", 0)
	if ok, err := ss.ReleaseSlot(e.ctx, sc, h("a.1", 1), &next, exp); err != nil || ok {
		e.e(err, "release in another life = %v, want false", ok)
	}
	if ok, err := ss.ReleaseSlot(e.ctx, sc, h("a.1", 0), &next, exp); err != nil || !ok {
		e.e(err, "release with hand-over = %v, want true", ok)
	}
	if got := e.slots(ss, sc); !reflect.DeepEqual(got, holders(h("b.1", 0), next)) {
		e.t.Fatalf("after the hand-over Slots = %v, want b and c", got)
	}
	if _, ok := e.acquire(ss, sc, h("d.1", 0), 2); ok {
		e.t.Fatalf("a newcomer took the slot handed over")
	}
	// A release repeated (its first answer lost) writes nothing.
	other := h("d.1", 0)
	if ok, err := ss.ReleaseSlot(e.ctx, sc, h("a.1", 0), &other, exp); err != nil || ok {
		e.e(err, "second release = %v, want false", ok)
	}
	if ok, err := ss.ReleaseSlot(e.ctx, sc, h("b.1", 0), nil, exp); err != nil || !ok {
		e.e(err, "plain release = %v, want true", ok)
	}
	if got := e.slots(ss, sc); !reflect.DeepEqual(got, holders(next)) {
		e.t.Fatalf("Slots = %v, want only c", got)
	}
	if _, ok := e.acquire(ss, sc, h("d.1", 0), 2); !ok {
		e.t.Fatalf("acquire of a freed slot refused")
	}
}

func testSlotRace(e *stateEnv, ss store.SlotStore) {
	sc := e.scope("hot")
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := ss.AcquireSlot(e.ctx, sc, h(fmt.Sprintf("x%02d.1", i), 0), 3, e.clock.Now().Add(time.Hour))
			if err != nil {
				e.t.Errorf("AcquireSlot: %v", err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := e.slots(ss, sc); won != 3 || len(got) != 3 {
		e.t.Fatalf("%d of 12 racing acquires won, %d hold; want 3 under limit 3", won, len(got))
	}
}

func testSlotsScoped(e *stateEnv, ss store.SlotStore) {
	sc := e.scope("k")
	e.acquire(ss, sc, h("a.1", 0), 1)
	for _, other := range []store.SlotScope{e.scope("k2"), {TenantID: e.tenant, PipelineID: "p2", Key: "k"}, {TenantID: e.tenant + "x", PipelineID: "p1", Key: "k"}} {
		if _, ok := e.acquire(ss, other, h("b.1", 0), 1); !ok {
			e.t.Fatalf("scope %+v shares the slots of %+v", other, sc)
		}
	}
	if _, ok := e.acquire(ss, sc, h("b.1", 0), 1); ok {
		e.t.Fatalf("a full key acquired")
	}
}

func testSlotsExpire(e *stateEnv, ss store.SlotStore) {
	sc := e.scope("k")
	if _, ok, err := ss.AcquireSlot(e.ctx, sc, h("a.1", 0), 1, e.clock.Now().Add(2*time.Second)); err != nil || !ok {
		e.e(err, "acquire = %v", ok)
	}
	e.clock.Advance(3 * time.Second)
	if got := e.slots(ss, sc); len(got) != 0 {
		e.t.Fatalf("an expired key record holds %v", got)
	}
	if _, ok := e.acquire(ss, sc, h("b.1", 0), 1); !ok {
		e.t.Fatalf("acquire on an expired record refused")
	}
}

// waiter creates a WAITING_KEY row of key k created at the epoch plus ms.
func (e *stateEnv) waiter(id, key string, ms int, status store.Status) store.Execution {
	e.t.Helper()
	r := e.row(id)
	r.CreatedAt = stateEpoch.Add(time.Duration(ms) * time.Millisecond)
	r.ConcurrencyKey, r.Status, r.NextDueAt = key, status, time.Time{}
	got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: r})
	if err != nil || !created {
		e.e(err, "create %s: created %v", id, created)
	}
	return got
}

func (e *stateEnv) waitingIDs(ss store.SlotStore, key string, limit int) []string {
	e.t.Helper()
	keys, err := ss.Waiting(e.ctx, e.scope(key), limit)
	if err != nil {
		e.t.Fatalf("Waiting: %v", err)
	}
	rows, err := e.s.GetBatch(e.ctx, keys)
	if err != nil {
		e.t.Fatalf("GetBatch: %v", err)
	}
	byID := map[string]string{}
	for _, r := range rows {
		byID[store.Slot(r.ExecutionID)] = r.ExecutionID
	}
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, byID[store.Slot(k.ExecutionID)])
	}
	return ids
}

func testWaitingIndex(e *stateEnv, ss store.SlotStore) {
	e.waiter("w3.1", "k", 30, store.WaitingKey)
	w1 := e.waiter("w1.1", "k", 10, store.WaitingKey)
	e.waiter("w2.1", "k", 20, store.WaitingKey)
	e.waiter("q.1", "k", 5, store.Queued)         // not waiting
	e.waiter("o.1", "other", 1, store.WaitingKey) // another key
	if got, want := e.waitingIDs(ss, "k", 10), []string{"w1.1", "w2.1", "w3.1"}; !reflect.DeepEqual(got, want) {
		e.t.Fatalf("Waiting = %v, want %v (oldest first, the key's waiting rows only)", got, want)
	}
	if got := e.waitingIDs(ss, "k", 1); !reflect.DeepEqual(got, []string{"w1.1"}) {
		e.t.Fatalf("Waiting limit 1 = %v", got)
	}
	// Woken: the row leaves the index; its key stays on the row.
	next := w1
	next.Status, next.NextDueAt, next.SlotHeld = store.Queued, e.clock.Now(), true
	if _, err := e.s.Update(e.ctx, store.Guard{Key: w1.Key(), Version: w1.Version}, next); err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	if got := e.waitingIDs(ss, "k", 10); !reflect.DeepEqual(got, []string{"w2.1", "w3.1"}) {
		e.t.Fatalf("after the wake Waiting = %v", got)
	}
	got, err := e.s.Get(e.ctx, w1.Key())
	if err != nil || got.ConcurrencyKey != "k" || !got.SlotHeld {
		e.e(err, "woken row: key %q slot held %v", got.ConcurrencyKey, got.SlotHeld)
	}
	if got := e.waitingIDs(ss, "none", 10); len(got) != 0 {
		e.t.Fatalf("a key nobody waits for lists %v", got)
	}
}

func testConcurrencyKeyFixed(e *stateEnv, _ store.SlotStore) {
	x := e.waiter("a.1", "cust-7", 0, store.Queued)
	next := x
	next.ConcurrencyKey, next.Status = "", store.WaitingKey
	got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: x.Version}, next)
	if err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	if read, err := e.s.Get(e.ctx, x.Key()); err != nil || read.ConcurrencyKey != "cust-7" || got.ConcurrencyKey != "cust-7" {
		e.e(err, "ConcurrencyKey after an update = %q (returned %q), want it fixed at create", read.ConcurrencyKey, got.ConcurrencyKey)
	}
	plain := e.create("b.1")
	if plain.ConcurrencyKey != "" || plain.SlotHeld {
		e.t.Fatalf("a row without a key reads key %q held %v", plain.ConcurrencyKey, plain.SlotHeld)
	}
}

// testWaitingRank: the wait line is in rank order (a more urgent row
// submitted later goes before a less urgent one), a row written before
// priorities (no rank) ranks by its creation, a row enters the line by
// an update (as the runtime's waits do), and priority and rank are kept
// as created whatever an update says.
func testWaitingRank(e *stateEnv, ss store.SlotStore) {
	ranked := func(id string, createdMs, prio, rankMs int) store.Execution {
		e.t.Helper()
		r := e.row(id)
		r.CreatedAt = stateEpoch.Add(time.Duration(createdMs) * time.Millisecond)
		r.ConcurrencyKey, r.Priority = "k", prio
		if rankMs != 0 {
			r.Rank = stateEpoch.Add(time.Duration(rankMs) * time.Millisecond)
		}
		got, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: r})
		if err != nil || !created {
			e.e(err, "create %s: created %v", id, created)
		}
		if got.Priority != prio || !got.Rank.Equal(r.Rank) {
			e.t.Fatalf("created %s: priority %d rank %v, want %d %v", id, got.Priority, got.Rank, prio, r.Rank)
		}
		next := got
		next.Status, next.NextDueAt = store.WaitingKey, time.Time{}
		next.Priority = 1 // an update changes neither
		if rankMs != 0 {
			// (A row without a rank is written as read: DynamoDB gives it
			// its creation as the index's sort key when it begins to wait.)
			next.Rank = stateEpoch
		}
		w, err := e.s.Update(e.ctx, store.Guard{Key: got.Key(), Version: got.Version}, next)
		if err != nil {
			e.t.Fatalf("Update %s: %v", id, err)
		}
		if w.Priority != prio || !w.WaitRank().Equal(got.WaitRank()) {
			e.t.Fatalf("updated %s: priority %d rank %v, want them as created (%d %v)", id, w.Priority, w.WaitRank(), prio, got.WaitRank())
		}
		return w
	}
	ranked("low.1", 10, 5, 4010)
	ranked("urgent.1", 20, 1, 20)
	ranked("mid.1", 30, 3, 2030)
	ranked("old.1", 15, 0, 0) // before priorities: ranks at its creation
	if got, want := e.waitingIDs(ss, "k", 10), []string{"old.1", "urgent.1", "mid.1", "low.1"}; !reflect.DeepEqual(got, want) {
		e.t.Fatalf("Waiting = %v, want %v (smallest rank first)", got, want)
	}
	if got, err := e.s.Get(e.ctx, store.Key{TenantID: e.tenant, ExecutionID: "low.1"}); err != nil || got.Priority != 5 ||
		!got.Rank.Equal(stateEpoch.Add(4010*time.Millisecond)) {
		e.e(err, "read back low.1: priority %d rank %v", got.Priority, got.Rank)
	}
}
