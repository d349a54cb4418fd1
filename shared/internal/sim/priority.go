package sim

// Priorities in the simulation: the keyed submissions draw a priority
// (none, or 1 to 5), so that a key's wait line holds executions of
// several priorities submitted close together. The simulator ranks each
// waiter itself, from its own record (the priority it submitted with,
// the row's creation and the runtime's aging), and checks every read of
// a key's wait line (store.SlotStore.Waiting, what a release hands the
// slot from, and the sweeper's look) at the instant the store answers
// it: the waiters it lists are in the simulator's rank order, and none
// that has been waiting since before the read (its WAITING_KEY write
// landed earlier; the stores the simulator runs keep the line in step
// with the rows, no index lag) is left out while a waiter ranked after
// it is listed, or while the answer is shorter than asked. So a waiter
// is never passed over by one whose rank is larger than its own: its
// wait is bounded by the waiters ranked before it, which are those
// submitted before it or more urgent ones submitted at most four agings
// after it.

import (
	"sort"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// invKeyRankOrder: a key's wait line is read in rank order and
// complete, so no waiter is passed over by one ranked after it.
const invKeyRankOrder = "a waiter is never passed over by one ranked after it"

// waiter is the simulator's record of an execution waiting for a slot:
// since when (its WAITING_KEY write landed) and its rank.
type waiter struct {
	exec  string
	scope store.SlotScope
	since time.Time
	rank  time.Time
}

// drawPriority gives a keyed submission a priority: none (the
// pipeline's default, 3) or 1 to 5, each a sixth of the time. It is
// hashed from the seed and the submission's number rather than drawn
// from the run's generator, so that every seed's workload and faults are
// what they were before priorities (a seed that found a break finds it
// again).
func (w *world) drawPriority(s *submission) {
	h := (w.o.Seed ^ uint64(s.n)*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	s.priority = int((h ^ h>>31) % 6)
}

// simRank is the rank the simulator gives e: the priority its submission
// asked for (the default when none), aged from its creation. (An
// execution whose submission the simulator has not matched yet, its
// answer lost, is ranked by the priority on its row.)
func (w *world) simRank(e *store.Execution) time.Time {
	prio := pipeline.PriorityOf(nil, e.Priority)
	w.mu.Lock()
	if inc := w.incs[incKey(e)]; inc != nil && inc.sub != nil {
		prio = pipeline.PriorityOf(nil, inc.sub.priority)
	}
	w.mu.Unlock()
	return pipeline.Rank(e.CreatedAt, prio, w.cfg.engineConfig("").PriorityAging)
}

// keyWaitLanded notes a write of a keyed row that landed: a WAITING_KEY
// one puts it in the simulator's wait line of its key (from now, unless
// it was there already), any other takes it out. Callers hold no lock.
func (w *world) keyWaitLanded(e store.Execution) {
	if keyLimitOf(e.PipelineID) == 0 {
		return
	}
	id := store.Slot(e.ExecutionID)
	if e.Status != store.WaitingKey {
		w.mu.Lock()
		delete(w.keys.line, id)
		w.mu.Unlock()
		return
	}
	rank := w.simRank(&e)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys.line == nil {
		w.keys.line = map[string]*waiter{}
	}
	if _, ok := w.keys.line[id]; !ok {
		w.keys.line[id] = &waiter{exec: e.ExecutionID, scope: e.SlotScope(), since: time.Now(), rank: rank}
	}
}

// checkWaitRead checks one answer of the store to Waiting(sc, limit),
// at the instant it was given (see the file comment).
func (w *world) checkWaitRead(sc store.SlotScope, limit int, keys []store.Key) {
	now := time.Now()
	w.mu.Lock()
	var listed []*waiter
	in := map[string]bool{}
	for _, k := range keys {
		id := store.Slot(k.ExecutionID)
		in[id] = true
		if wt := w.keys.line[id]; wt != nil && wt.scope == sc {
			listed = append(listed, wt) // entries no longer waiting are the reader's to skip
		}
	}
	var missed []*waiter
	for id, wt := range w.keys.line {
		if wt.scope == sc && !in[id] && wt.since.Before(now) {
			missed = append(missed, wt)
		}
	}
	w.report.Checks[invKeyRankOrder]++
	w.mu.Unlock()
	for i := 1; i < len(listed); i++ {
		if a, b := listed[i-1], listed[i]; b.rank.Before(a.rank) {
			w.violate(invKeyRankOrder, b.exec, "the wait line of %s lists %s (rank %s) before it (rank %s)", sc.ID(), a.exec, fmtTime(w, a.rank), fmtTime(w, b.rank))
		}
	}
	sort.Slice(missed, func(i, j int) bool { return missed[i].exec < missed[j].exec })
	for _, m := range missed {
		switch {
		case len(keys) < max(limit, 1):
			w.violate(invKeyRankOrder, m.exec, "waiting since %s, left out of a read of the wait line of %s that listed %d of %d", fmtTime(w, m.since), sc.ID(), len(keys), limit)
		case len(listed) > 0 && m.rank.Before(listed[len(listed)-1].rank):
			last := listed[len(listed)-1]
			w.violate(invKeyRankOrder, m.exec, "waiting since %s (rank %s), left out of a read of the wait line of %s that listed %s (rank %s)",
				fmtTime(w, m.since), fmtTime(w, m.rank), sc.ID(), last.exec, fmtTime(w, last.rank))
		}
	}
}

// byCreation is the broken variant's wait line: the store's answer
// re-sorted by creation, as a store that ignores the rank would give it
// (Options.ignoreRank; the check must then find violations).
func (w *world) byCreation(keys []store.Key) []store.Key {
	created := map[string]time.Time{}
	v := w.back.view().state
	for _, k := range keys {
		if e, err := v.Get(w.ctx, k); err == nil {
			created[k.ExecutionID] = e.CreatedAt
		}
	}
	out := append([]store.Key(nil), keys...)
	sort.SliceStable(out, func(i, j int) bool { return created[out[i].ExecutionID].Before(created[out[j].ExecutionID]) })
	return out
}
