package sim

// Concurrency keys in the simulation: two keyed pipelines (limit 1 and
// limit 2 per customer), submitted in bursts by two tenants that share
// customer names (their keys must not interfere), under every fault the
// run draws. The simulator keeps its own record of which executions of a
// key are started (a claim of theirs landed) and not ended (no terminal
// write of theirs landed yet), taken at the store calls themselves, not
// from the store's slot records: at every claim that starts one, the
// started executions of its key must not exceed the limit. At the end no
// execution may be left WAITING_KEY.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// The keyed pipelines: doze, nap (a durable sleep, which keeps the slot),
// rise, kdone; the key is the document's customer.
const (
	pipeKey1 = "sim.key1" // one execution per customer at once
	pipeKey2 = "sim.key2" // two executions per customer at once
)

// The invariants of concurrency keys.
const (
	// invKeyLimit: at every moment, the executions of one key (tenant,
	// pipeline, customer) that have started (a claim landed) and not
	// ended (no terminal write landed) are at most the pipeline's limit.
	invKeyLimit = "a concurrency limit is never exceeded"
	// invKeyWaitersRun: no execution is left WAITING_KEY once the run
	// settled; every execution that waited ended.
	invKeyWaitersRun = "every waiting execution eventually runs"
)

// keyTenants are the tenants keyed submissions come from: the same
// customer name under both is two keys.
var keyTenants = []string{tenant, "t2"}

// keyLimitOf is the concurrency limit of a simulated pipeline (0: none).
func keyLimitOf(pipelineID string) int {
	switch pipelineID {
	case pipeKey1:
		return 1
	case pipeKey2:
		return 2
	}
	return 0
}

// keyBook is the simulator's own record of the keyed executions.
type keyBook struct {
	// started maps an incarnation key to its key's scope while it is
	// started and not ended.
	started map[string]string
	// waited are the incarnations seen committed WAITING_KEY.
	waited map[string]bool
	// bursts are the instants keyed submissions crowd around.
	bursts []time.Time
	// line is the simulator's wait line of every key: the executions
	// (by slot) whose last landed write is WAITING_KEY (priority.go).
	line map[string]*waiter
}

// keyedPipelines are the keyed pipelines a process serves.
func (p *proc) keyedPipelines() []pipeline.Pipeline {
	mk := func(id string) pipeline.Pipeline {
		return pipeline.Pipeline{ID: id, Steps: []pipeline.Step{p.dozeStep(), napStep(), p.riseStep(), p.plainStep("kdone")},
			Concurrency: pipeline.ConcurrencyKey("customer", keyLimitOf(id), func(d doc) string { return d.Customer })}
	}
	return []pipeline.Pipeline{mk(pipeKey1), mk(pipeKey2)}
}

// drawKeyed turns about a fifth of the fresh submissions into keyed
// ones: a tenant, one of two customers, a nap of a second to half an
// hour (the slot is held through it), and most of them crowded into
// bursts so that several executions of one key overlap.
func (w *world) drawKeyed(s *submission) {
	if !w.chance(0.2) {
		return
	}
	s.pipeline = []string{pipeKey1, pipeKey2}[w.intn(2)]
	s.tenant = keyTenants[w.intn(len(keyTenants))]
	s.body.Customer = fmt.Sprintf("cust%d", w.intn(2))
	s.body.Script.NapFor = w.between(time.Second, 30*time.Minute).Milliseconds()
	w.mu.Lock()
	if w.keys.bursts == nil {
		span := time.Duration(w.o.VirtualDays) * day
		for range 1 + w.o.VirtualDays/5 {
			w.draws++
			w.keys.bursts = append(w.keys.bursts, w.start.Add(time.Duration(w.rng.Int64N(int64(span*9/10)))+time.Minute))
		}
	}
	bursts := w.keys.bursts
	w.mu.Unlock()
	if w.chance(0.75) {
		s.at = bursts[w.intn(len(bursts))].Add(w.between(0, 5*time.Minute))
	}
	w.drawPriority(s)
}

// keyScope names the key of a keyed row as the simulator knows it: the
// customer of the body it submitted (the row's own key only for an
// execution whose submission it has not matched yet). It also checks
// that the row carries the key its input gives.
func (w *world) keyScope(e *store.Execution) string {
	w.mu.Lock()
	inc := w.incs[incKey(e)]
	w.mu.Unlock()
	customer := e.ConcurrencyKey
	if inc != nil && inc.sub != nil {
		customer = inc.sub.body.Customer
		if e.ConcurrencyKey != customer {
			w.violate(invKeyLimit, e.ExecutionID, "the row's concurrency key is %q, its input's %q", e.ConcurrencyKey, customer)
		}
	}
	return e.TenantID + "|" + e.PipelineID + "|" + customer
}

// keyClaimLanded notes a claim that landed in the store (its answer may
// still be lost): the execution has started; the executions of its key
// started and not ended must not exceed the limit.
func (w *world) keyClaimLanded(e store.Execution) {
	limit := keyLimitOf(e.PipelineID)
	if limit == 0 {
		return
	}
	scope, ik := w.keyScope(&e), incKey(&e)
	w.mu.Lock()
	if w.keys.started == nil {
		w.keys.started = map[string]string{}
	}
	if _, ok := w.keys.started[ik]; ok {
		w.mu.Unlock()
		return
	}
	w.keys.started[ik] = scope
	var with []string
	for k, sc := range w.keys.started {
		if sc == scope {
			with = append(with, k)
		}
	}
	w.report.Checks[invKeyLimit]++
	w.mu.Unlock()
	if len(with) > limit {
		sort.Strings(with)
		w.violate(invKeyLimit, e.ExecutionID, "key %s (limit %d) has %d executions started and not ended: %v", scope, limit, len(with), with)
	}
}

// keyWriteLanded notes a row write that landed in the store: a terminal
// one ends the execution's hold on its key; a WAITING_KEY one marks it as
// having waited.
func (w *world) keyWriteLanded(e store.Execution) {
	if keyLimitOf(e.PipelineID) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case e.Status.Terminal():
		delete(w.keys.started, incKey(&e))
	case e.Status == store.WaitingKey:
		if w.keys.waited == nil {
			w.keys.waited = map[string]bool{}
		}
		w.keys.waited[incKey(&e)] = true
	}
}

// checkKeyWaiters is the final check of the keyed executions: none is
// left WAITING_KEY, and every one that waited ended.
func (w *world) checkKeyWaiters(incs []*incarnation) {
	for _, inc := range incs {
		if keyLimitOf(inc.pipeline) == 0 {
			continue
		}
		w.mu.Lock()
		gone, last, waited := inc.gone, inc.last, w.keys.waited[inc.key]
		if waited {
			w.report.Outcomes["keyed_waited"]++
		}
		w.report.Outcomes["keyed"]++
		w.mu.Unlock()
		w.check(invKeyWaitersRun)
		if gone {
			continue // ended: a live row never expires (invNoVanish)
		}
		if last.Status == store.WaitingKey || (waited && !last.Status.Terminal()) {
			w.violate(invKeyWaitersRun, inc.exec, "still %s (key %q) after the run settled (sweep look %s)", last.Status, last.ConcurrencyKey, fmtTime(w, last.SweepAt))
		}
	}
}

// The gated store keeps the slots of the store it wraps, behind the
// process's fault gate like any I/O.
var _ store.SlotStore = (*gatedStore)(nil)

func (g *gatedStore) slots() store.SlotStore { return g.s.(store.SlotStore) }

// AcquireSlot implements store.SlotStore behind the gate.
func (g *gatedStore) AcquireSlot(ctx context.Context, s store.SlotScope, h store.SlotHolder, limit int, expires time.Time) (holders []store.SlotHolder, acquired bool, err error) {
	err = g.p.do("acquire_slot", ioWrite, h.ExecutionID, func() error {
		holders, acquired, err = g.slots().AcquireSlot(ctx, s, h, limit, expires)
		return err
	})
	return holders, acquired, err
}

// ReleaseSlot implements store.SlotStore behind the gate.
func (g *gatedStore) ReleaseSlot(ctx context.Context, s store.SlotScope, h store.SlotHolder, next *store.SlotHolder, expires time.Time) (released bool, err error) {
	err = g.p.do("release_slot", ioWrite, h.ExecutionID, func() error {
		released, err = g.slots().ReleaseSlot(ctx, s, h, next, expires)
		return err
	})
	return released, err
}

// Slots implements store.SlotStore behind the gate.
func (g *gatedStore) Slots(ctx context.Context, s store.SlotScope) (holders []store.SlotHolder, err error) {
	err = g.p.do("slots", ioRead, "", func() error { holders, err = g.slots().Slots(ctx, s); return err })
	return holders, err
}

// Waiting implements store.SlotStore behind the gate.
func (g *gatedStore) Waiting(ctx context.Context, s store.SlotScope, limit int) (keys []store.Key, err error) {
	err = g.p.do("waiting", ioRead, "", func() error {
		if g.p.w.o.ignoreRank {
			// The broken variant: a store that ignores the rank.
			if keys, err = g.slots().Waiting(ctx, s, 1000); err == nil {
				keys = g.p.w.byCreation(keys)
				keys = keys[:min(len(keys), max(limit, 1))]
			}
		} else {
			keys, err = g.slots().Waiting(ctx, s, limit)
		}
		if err == nil {
			g.p.w.checkWaitRead(s, limit, keys)
		}
		return err
	})
	return keys, err
}
