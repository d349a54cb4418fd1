// Concurrency keys: at most a pipeline's limit of one key's executions
// hold a slot (pipeline.Concurrency); the others wait as WAITING_KEY and
// are woken in rank order (submission order aged by priority: priority.go).
//
// The design, and what each part costs on DynamoDB (docs/cost.md):
//
//   - A slot belongs to the execution, from its first claim until it ends
//     (sleeps, awaits, retries, map waits and worker takeovers keep it):
//     "at most N executions RUNNING per key" counts started executions,
//     and a hand-over between steps costs nothing. The row records it
//     (SlotHeld), written by the first commit, so later steps never look
//     at the key.
//   - Acquire: one conditional write of the key's record (its holders,
//     bounded by the limit), before the first claim. A crash between the
//     acquire and the claim leaves the slot with the execution, whose
//     work item or sweep look comes back and acquires again (the same
//     holder in the same life: no new slot).
//   - Full: the row is committed WAITING_KEY (one row write, which also
//     puts it in the sparse waiting index), out of the queue; the sweeper
//     looks at it a grace later (a release that raced the wait) and then
//     every KeyWaitLook.
//   - Release: right after the terminal commit, one conditional write of
//     the key's record that removes the holder and, when a row waits,
//     hands the slot to the first waiter (smallest rank) in the same write (a newcomer
//     cannot take it first); the waiter is then woken (one row write,
//     QUEUED with SlotHeld) and dispatched. A crash between the terminal
//     commit and the release, or a lost wake-up, is repaired by the
//     sweeper's look at a waiter: it wakes a waiter that holds a slot,
//     evicts holders whose rows ended (or were re-driven: another life),
//     and hands free slots to the first waiters.

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// checkKeys refuses a registry with a keyed pipeline on a state store
// that keeps no concurrency keys (a user's backend without
// store.SlotStore): its limit would not hold, and a limit that silently
// does not hold is worse than none.
func checkKeys(s store.Store, reg *pipeline.Registry) error {
	_, kept := s.(store.SlotStore)
	return refuseUnkept(reg, kept, "concurrency key", "concurrency keys (store.SlotStore)", func(p *pipeline.Pipeline) string {
		if p.Concurrency == nil {
			return ""
		}
		return p.Concurrency.Name
	})
}

// refuseUnkept returns an error naming the first pipeline of reg that
// declares a feature (named by name, "" for none) when the state store
// does not keep it (kept false); what names the feature, storeLacks what
// the store lacks.
func refuseUnkept(reg *pipeline.Registry, kept bool, what, storeLacks string, name func(*pipeline.Pipeline) string) error {
	if kept {
		return nil
	}
	for _, p := range reg.All() {
		if n := name(p); n != "" {
			return fmt.Errorf("engine: pipeline %s declares the %s %s, but the state store keeps no %s", p.ID, what, n, storeLacks)
		}
	}
	return nil
}

// slotStore is the state store's concurrency keys (every state store of
// this repository keeps them; nil for a user's backend that does not,
// which New refuses for keyed pipelines: see checkKeys).
func (r *Runtime) slotStore() store.SlotStore {
	ss, _ := r.deps.Store.(store.SlotStore)
	return ss
}

// keyLimit is the concurrency limit of p (0: none).
func keyLimit(p *pipeline.Pipeline) int {
	if p == nil || p.Concurrency == nil {
		return 0
	}
	return p.Concurrency.Limit
}

// slotExpires is the TTL a write of a key's record sets: a record in use
// is written at every acquire and release, and a holder lives at most a
// retention past its last commit; two retentions keep a record whose
// holders are all long-running from expiring under them.
func (r *Runtime) slotExpires(now time.Time) time.Time { return now.Add(2 * r.cfg.ExecutionTTL) }

// takeSlot acquires the slot the row needs before its claim: it reports
// whether the claim may go ahead (acquired says the row holds a slot only
// since this call: its first commit records SlotHeld). A row without a
// key, or that holds its slot already, needs nothing. When the key is
// full the row is committed WAITING_KEY and ok is false.
func (r *Runtime) takeSlot(ctx context.Context, row *store.Execution, p *pipeline.Pipeline) (ok, acquired bool, err error) {
	limit, ss := keyLimit(p), r.slotStore()
	if row.ConcurrencyKey == "" || row.SlotHeld || limit == 0 || ss == nil {
		return true, false, nil
	}
	sc, h, now := row.SlotScope(), row.Holder(), r.deps.Clock.Now()
	holders, got, err := ss.AcquireSlot(ctx, sc, h, limit, r.slotExpires(now))
	if err != nil {
		return false, false, err
	}
	if !got {
		// A slot of the execution's earlier life (a re-drive of a parked
		// execution) is its own to drop: then try again.
		if i := slices.IndexFunc(holders, func(o store.SlotHolder) bool { return o.ExecutionID == h.ExecutionID }); i >= 0 {
			if _, err := ss.ReleaseSlot(ctx, sc, holders[i], nil, r.slotExpires(now)); err != nil {
				return false, false, err
			}
			if _, got, err = ss.AcquireSlot(ctx, sc, h, limit, r.slotExpires(now)); err != nil {
				return false, false, err
			}
		}
	}
	if got {
		r.execLogger(row).LogAttrs(ctx, slog.LevelInfo, "key_slot_acquired", slog.String("event", "key_slot_acquired"),
			slog.Int("limit", limit))
		return true, true, nil
	}
	return false, false, r.waitForKey(ctx, *row, limit)
}

// waitForKey commits row WAITING_KEY: not due, out of the queue, in the
// waiting index; the sweeper's first look comes a grace later.
func (r *Runtime) waitForKey(ctx context.Context, row store.Execution, limit int) error {
	now := r.deps.Clock.Now()
	next := row
	next.Status, next.NextDueAt, next.UpdatedAt = store.WaitingKey, time.Time{}, now
	next.LeaseOwner, next.LeaseExpiresAt = "", time.Time{}
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	next.ExpiresAt = r.keepAlive(&row, now)
	got, err := r.update(ctx, store.Guard{Key: row.Key(), Version: row.Version, LeaseOwner: row.LeaseOwner}, next)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound) {
		return nil // changed meanwhile: whoever changed it goes on
	}
	if err != nil {
		return err
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelInfo, "key_wait_started", slog.String("event", "key_wait_started"),
		slog.Int("limit", limit))
	r.notify(ctx, EventKeyWaiting, got, SweepResult{})
	return nil
}

// keyEnded releases the slot of an execution that just ended, handing it
// to the key's first waiter (woken at once). Failures are logged: the
// sweeper's look at a waiter evicts a holder whose row ended.
func (r *Runtime) keyEnded(ctx context.Context, e store.Execution) {
	ss := r.slotStore()
	if e.ConcurrencyKey == "" || !e.SlotHeld || !e.Status.Terminal() || ss == nil {
		return
	}
	r.passSlot(ctx, ss, e)
}

// waiterPaused is what a pause of a WAITING_KEY execution (e, now PAUSED)
// does to its key: it left the waiting index with the pause's write; a
// slot a releaser handed it just before is handed on to the key's next
// waiter (one read when it holds none). A hand-over that lands after
// this read is evicted by the sweeper's look at a waiter: a paused
// waiter's slot is stale (store.SlotStale).
func (r *Runtime) waiterPaused(ctx context.Context, e store.Execution) {
	ss := r.slotStore()
	if e.ConcurrencyKey == "" || ss == nil {
		return
	}
	holders, err := ss.Slots(ctx, e.SlotScope())
	if err != nil || !slices.Contains(holders, e.Holder()) {
		return
	}
	r.passSlot(ctx, ss, e)
}

// slotKept re-asserts the slot of a paused holder e as it resumes (one
// conditional write; nothing for a row without a key or whose definition
// is not served here): it reports whether e still holds it. A holder
// paused longer than its key's record lives (slotExpires: two retentions
// past the record's last write) finds the record gone, and a newcomer may
// have taken the slot meanwhile: e then gets it back if the key has room,
// or resumes without it, and its next claim waits for a slot
// (WAITING_KEY) instead of running beside the newcomer over the limit.
func (r *Runtime) slotKept(ctx context.Context, e store.Execution) (bool, error) {
	ss := r.slotStore()
	p, ok := r.deps.Registry.Version(e.PipelineID, e.PipelineVersion)
	limit := keyLimit(p)
	if e.ConcurrencyKey == "" || ss == nil || !ok || limit == 0 {
		return e.SlotHeld, nil
	}
	_, got, err := ss.AcquireSlot(ctx, e.SlotScope(), e.Holder(), limit, r.slotExpires(r.deps.Clock.Now()))
	if err != nil {
		return false, err
	}
	if !got {
		r.execLogger(&e).LogAttrs(ctx, slog.LevelWarn, "key_slot_lost_while_paused", slog.String("event", "key_slot_lost_while_paused"),
			slog.Int("limit", limit))
	}
	return got, nil
}

// passSlot releases e's slot, handing it to the key's first waiter (smallest rank)
// (woken at once) when one waits.
func (r *Runtime) passSlot(ctx context.Context, ss store.SlotStore, e store.Execution) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DispatchTimeout+5*time.Second)
	defer cancel()
	sc, now := e.SlotScope(), r.deps.Clock.Now()
	var next *store.Execution
	if ws, err := r.waiters(ctx, ss, sc, 1, nil); err == nil && len(ws) > 0 {
		next = &ws[0]
	}
	var to *store.SlotHolder
	if next != nil {
		h := next.Holder()
		to = &h
	}
	released, err := ss.ReleaseSlot(ctx, sc, e.Holder(), to, r.slotExpires(now))
	log := r.execLogger(&e)
	if err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "key_slot_release_failed", slog.String("event", "key_slot_release_failed"), slog.String("error", err.Error()))
		return
	}
	log.LogAttrs(ctx, slog.LevelInfo, "key_slot_released", slog.String("event", "key_slot_released"),
		slog.Bool("released", released), slog.Bool("handed_over", released && next != nil))
	if released && next != nil {
		r.wake(ctx, *next)
	}
}

// waiters returns up to n of the key's waiting rows, smallest rank first,
// leaving out those in skip.
func (r *Runtime) waiters(ctx context.Context, ss store.SlotStore, sc store.SlotScope, n int, skip map[string]bool) ([]store.Execution, error) {
	keys, err := ss.Waiting(ctx, sc, n+len(skip))
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	rows, err := r.deps.Store.GetBatch(ctx, keys)
	if err != nil {
		return nil, err
	}
	byID := map[string]store.Execution{}
	for _, row := range rows {
		byID[store.Slot(row.ExecutionID)] = row
	}
	var out []store.Execution
	for _, k := range keys {
		row, ok := byID[store.Slot(k.ExecutionID)]
		if ok && row.Status == store.WaitingKey && !skip[row.ExecutionID] && len(out) < n {
			out = append(out, row)
		}
	}
	return out, nil
}

// wake moves a waiter that holds a slot (handed over, or acquired for
// it) to QUEUED with SlotHeld, and dispatches it.
func (r *Runtime) wake(ctx context.Context, w store.Execution) bool {
	now := r.deps.Clock.Now()
	next := w
	next.Status, next.NextDueAt, next.UpdatedAt, next.SlotHeld = store.Queued, now, now, true
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	next.ExpiresAt = r.keepAlive(&w, now)
	got, err := r.update(ctx, store.Guard{Key: w.Key(), Version: w.Version}, next)
	if err != nil {
		// Changed meanwhile (cancelled: its slot is stale and evicted by
		// the sweeper), or the write failed: the sweeper's look wakes it.
		r.execLogger(&w).LogAttrs(ctx, slog.LevelWarn, "key_wake_failed", slog.String("event", "key_wake_failed"), slog.String("error", err.Error()))
		return false
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelInfo, "key_wait_ended", slog.String("event", "key_wait_ended"),
		slog.Duration("waited", now.Sub(w.UpdatedAt)))
	r.dispatch(ctx, &got, 0)
	return true
}

// lookAtKeyWait is the sweeper's look at a WAITING_KEY row: it repairs
// what a crash or a lost message left (a waiter handed a slot but not
// woken, a holder whose row ended without releasing, a slot freed while
// no one was waiting yet) and hands free slots to the first waiters.
// It returns the row's next look (zero when it was woken).
func (r *Runtime) lookAtKeyWait(ctx context.Context, e store.Execution) time.Time {
	now := r.deps.Clock.Now()
	later := now.Add(r.cfg.KeyWaitLook)
	ss := r.slotStore()
	p, ok := r.deps.Registry.Version(e.PipelineID, e.PipelineVersion)
	limit := keyLimit(p)
	if ss == nil || !ok || limit == 0 {
		// Its definition is not served here, or has no limit any more:
		// queue it; the worker decides.
		if r.wake(ctx, e) {
			return time.Time{}
		}
		return later
	}
	sc := e.SlotScope()
	holders, err := ss.Slots(ctx, sc)
	if err != nil {
		return later
	}
	held := map[string]bool{}
	for _, h := range holders {
		held[h.ExecutionID] = true
	}
	if held[e.ExecutionID] && slices.Contains(holders, e.Holder()) {
		if r.wake(ctx, e) {
			return time.Time{}
		}
		return later
	}
	free := limit - len(holders) + r.evictStale(ctx, ss, sc, holders)
	if free <= 0 {
		return later
	}
	ws, err := r.waiters(ctx, ss, sc, free, held)
	if err != nil {
		return later
	}
	woken := false
	for _, w := range ws {
		if _, got, err := ss.AcquireSlot(ctx, sc, w.Holder(), limit, r.slotExpires(now)); err == nil && got && r.wake(ctx, w) {
			woken = woken || w.ExecutionID == e.ExecutionID
		}
	}
	if woken {
		return time.Time{}
	}
	return later
}

// renewWaiter keeps a WAITING_KEY row alive while it waits: its key's
// holders may hold their slots longer than the retention (a holder keeps
// its slot while it sleeps, awaits, retries, waits for a map, or is
// paused), and waiting is not idleness. Once its expiry is less than half
// a retention away, the look extends it (its payloads with it: update) to
// a retention from now, moving its next look to look in the same write.
// It expired at its retention before: an accepted execution gone with no
// outcome and no dead letter. Cost: nothing until a row has waited half a
// retention; then one write per half retention.
//
// It reports whether it wrote the row (and so moved its next look); false
// leaves the look to the caller.
func (r *Runtime) renewWaiter(ctx context.Context, e store.Execution, look time.Time) bool {
	now := r.deps.Clock.Now()
	if e.Status != store.WaitingKey || !e.ExpiresAt.Before(now.Add(r.cfg.ExecutionTTL/2)) {
		return false
	}
	next := e
	next.ExpiresAt = now.Add(r.cfg.ExecutionTTL)
	next.SweepAt, next.Sweeps = look, 0
	got, err := r.update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
	if err != nil {
		return false // woken, paused or cancelled meanwhile: the caller's reschedule decides
	}
	r.execLogger(&got).LogAttrs(ctx, slog.LevelInfo, "key_wait_kept_alive", slog.String("event", "key_wait_kept_alive"),
		slog.Time("expires_at", got.ExpiresAt))
	return true
}

// evictStale releases the slots of holders whose rows ended, are gone or
// live another life (store.SlotStale), and returns how many it freed.
func (r *Runtime) evictStale(ctx context.Context, ss store.SlotStore, sc store.SlotScope, holders []store.SlotHolder) int {
	if len(holders) == 0 {
		return 0
	}
	keys := make([]store.Key, len(holders))
	for i, h := range holders {
		keys[i] = store.Key{TenantID: sc.TenantID, ExecutionID: h.ExecutionID}
	}
	rows, err := r.deps.Store.GetBatch(ctx, keys)
	if err != nil {
		return 0
	}
	byID := map[string]*store.Execution{}
	for i := range rows {
		byID[rows[i].ExecutionID] = &rows[i]
	}
	freed := 0
	for _, h := range holders {
		if !store.SlotStale(h, byID[h.ExecutionID]) {
			continue
		}
		if ok, err := ss.ReleaseSlot(ctx, sc, h, nil, r.slotExpires(r.deps.Clock.Now())); err == nil && ok {
			freed++
			r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "key_slot_evicted", slog.String("event", "key_slot_evicted"),
				slog.String("tenant", sc.TenantID), slog.String("pipeline", sc.PipelineID), slog.String("holder", h.ExecutionID))
		}
	}
	return freed
}

// EventKeyWaiting: the execution's concurrency key was full at its first
// claim; it waits (WAITING_KEY) for a slot.
const EventKeyWaiting EventKind = "execution_key_waiting"
