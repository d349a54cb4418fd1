package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// The invariants, as the report's table names them.
const (
	// invSettles: every accepted execution ends terminal or visibly
	// parked once the faults stop.
	invSettles = "every execution ends terminal or parked"
	// invNoStall: a claimable execution is claimed within the stated
	// bound (a lease, the tolerance, the sweeper's grace and interval,
	// doubled for every work item of it that was lost meanwhile).
	invNoStall = "claimable work is claimed within the bound"
	// invNoVanish: a live execution's row is never deleted (a terminal
	// one is kept its retention).
	invNoVanish = "no execution vanishes while it lives"
	// invExactlyOnce: no transition committed twice; every step of a
	// result ran exactly once, in order.
	invExactlyOnce = "no transition committed twice"
	// invEffectIsolation: no effect of one execution satisfies another's
	// (a result carries its own execution's charge), and no side effect
	// is dispatched twice for one execution.
	invEffectIsolation = "effects belong to their own execution"
	// invDeadLetterIsolation: a dead-lettered execution has its own
	// dead-letter record.
	invDeadLetterIsolation = "dead letters belong to their own execution"
	// invDeadLetterViews: at the end, the operator's dead-letter list
	// (engine.DeadLetterViews) shows each record with its execution's
	// row as it is (none once expired) and marks outstanding exactly the
	// record of each execution still DLQ or FAILED at that failure; the
	// counts by code agree with it.
	invDeadLetterViews = "the dead-letter list tells what became of each execution"
	// invSignedOut: a console session signed out at one process is
	// refused at every other until it expires.
	invSignedOut = "a signed-out console session stays signed out"
	// invAwaitIsolation: a token completes only the await it was issued for.
	invAwaitIsolation = "tokens complete only their own await"
	// invCheckpointReadable: a live row's input and result can be read.
	invCheckpointReadable = "no checkpoint unreadable while its row lives"
	// invHistory: the history is complete and in order.
	invHistory = "history complete and in order"
	// invRefusedStoresNothing: a refused request stores nothing.
	invRefusedStoresNothing = "a refused request stores nothing"
	// invKeylessIsNew: without a client key each submit is a new execution.
	invKeylessIsNew = "without a client key each submit is new"
	// invNoFalsePoison: a work item is poisoned only when a worker crashed
	// or failed on it.
	invNoFalsePoison = "no work item poisoned by deferrals alone"
	// invBackupNoPin: a stalled backup reader holds no read transaction of
	// the serving store.
	invBackupNoPin = "a stalled backup reader pins nothing"
	// invOneJobPerKey: a bulk re-drive started again with its idempotency
	// key (a client retry after a lost answer) answers the key's job and
	// starts no other.
	invOneJobPerKey = "a keyed bulk re-drive starts one job"
	// invSleepOnTime: the step after a durable sleep never runs before
	// the wake-up (less the clock-skew tolerance and a worker's skew).
	invSleepOnTime = "sleeps end no earlier than their wake-up"
	// invJoinSawAll: a map's join step gets every element's outcome once,
	// in input order, each the outcome its child had (its output its own).
	invJoinSawAll = "the join saw every child's outcome once, in order"
	// invMapRerunsFailed: a re-drive of a map that failed beyond its
	// tolerance runs again only elements whose earlier child failed (a
	// later round's child of an element that succeeded, was rejected or
	// cancelled is a violation).
	invMapRerunsFailed = "a re-driven map runs only its failed elements again"
	// invMapInFlight: a map never has more children released and not
	// ended than its in-flight limit.
	invMapInFlight = "a map runs no more children at once than its limit"
	// invParentWakes: once a map's last child has ended, its parent waits
	// no longer than its sweep look and the claim bound.
	invParentWakes = "a parent wakes within the bound after its last child ended"
	// invRejectedStays: a child that rejected its item ends FAILED as
	// rejected (code item_rejected, reason rejected, out of the sweep
	// index) and never gets a dead letter nor runs again.
	invRejectedStays = "a rejected child never gets a dead letter nor runs again"
	// invMapCounts: the MapResult a join gets holds each child's terminal
	// row's outcome, and counts (succeeded, failed, cancelled, rejected)
	// that are those rows'.
	invMapCounts = "a map's counts match its children's terminal rows"
	// invRejectsTolerated: rejected children never count against a map's
	// tolerance (a map fails only when its failed and cancelled children
	// exceed it, and succeeds only when they do not).
	invRejectsTolerated = "rejected children never fail the parent's tolerance"
	// invConfigRefused: a configuration that cannot hold is refused.
	invConfigRefused = "impossible configuration refused"
	// invSetup: the simulator itself could not do something.
	invSetup = "simulator setup"
)

var invariantNames = []string{invSettles, invNoStall, invNoVanish, invExactlyOnce, invEffectIsolation, invDeadLetterIsolation,
	invDeadLetterViews, invSignedOut, invAwaitIsolation, invCheckpointReadable, invHistory, invRefusedStoresNothing, invKeylessIsNew, invNoFalsePoison,
	invBackupNoPin, invOneJobPerKey, invSleepOnTime, invJoinSawAll, invMapRerunsFailed, invMapInFlight, invParentWakes, invRejectedStays, invMapCounts,
	invRejectsTolerated, invEvents, invKeyLimit, invKeyWaitersRun, invRateLimit, invKeyRankOrder, invUrgentLane,
	invPausedNotClaimed, invPausedNotSwept, invPausedKept, invScheduleOnce, invSpans,
	invConfigRefused, invSetup}

// stallBound is how long an execution may stay claimable without a claim:
// a lost lease lapses (lease + tolerance), the sweeper looks within its
// interval and acts after its grace, a crashed invocation's item comes
// back after the visibility timeout; each work item lost meanwhile (the
// sweeper's own re-dispatch included) doubles the sweeper's spacing.
func (w *world) stallBound(drops int) time.Duration {
	c := w.cfg
	spacing := c.grace
	for range drops + 1 {
		spacing *= 2
	}
	return c.lease + c.tolerance + 2*c.sweepInterval + c.visibility + min(spacing, 15*time.Minute) + time.Minute
}

// audit looks at every execution not known to be gone: it must exist
// while it lives, its checkpoints must be readable, a claimable one must
// not stall.
//
// Every audit looks at the executions in progress; a full audit (every
// sixth, and the last) at the finished ones too, which can only vanish
// early or lose a checkpoint, both slower things.
func (w *world) audit() {
	w.scanSchedules()
	ctx := context.Background()
	v := w.back.view()
	w.mu.Lock()
	w.alive = slices.DeleteFunc(w.alive, func(i *incarnation) bool { return i.gone })
	incs := slices.Clone(w.alive)
	w.audits++
	full := w.audits%6 == 0 || w.finishing
	w.mu.Unlock()
	now := time.Now()
	w.progress(now, len(incs))
	audited := func(inc *incarnation) bool {
		w.mu.Lock()
		gone, last := inc.gone, inc.last
		w.mu.Unlock()
		return !gone && (full || !(last.Status.Terminal() || last.Status.Parked()))
	}
	var keys []store.Key
	for _, inc := range incs {
		if audited(inc) {
			keys = append(keys, inc.storeKey())
		}
	}
	rows := readRows(ctx, v.state, keys)
	for _, inc := range incs {
		if !audited(inc) {
			continue
		}
		w.mu.Lock()
		last := inc.last
		w.mu.Unlock()
		r, ok := rows[inc.storeKey()]
		if !ok {
			// Not read ahead (its state changed since the audit began).
			r.e, r.err = v.state.Get(ctx, inc.storeKey())
		}
		e, err := r.e, r.err
		if err == nil && incKey(&e) != inc.key {
			err = store.ErrNotFound // the key's row is another incarnation's
		}
		if errors.Is(err, store.ErrNotFound) {
			w.vanished(inc, last, now)
			continue
		}
		if err != nil {
			continue
		}
		w.mu.Lock()
		if e.Version >= inc.last.Version {
			inc.last, inc.lastAt = e, now
		}
		w.mu.Unlock()
		w.noteRejected(inc, e)
		w.settledState(inc, e)
		w.checkStall(inc, e, now)
		if e.Status == store.WaitingChildren {
			w.checkParent(ctx, v, inc, e, now)
		}
		w.checkCheckpoints(ctx, v, inc, e)
		if e.Status == store.DLQ {
			w.checkDeadLetter(ctx, v, inc, e, false)
		}
	}
}

// readResult is one row an audit read: the row or Get's error.
type readResult struct {
	e   store.Execution
	err error
}

// readRows reads the rows of keys for an audit, as Get would read each:
// with GetBatch, a hundred at a time, each batch of distinct slots (two
// incarnations of one slot go in different batches, each answered by its
// own row), and with Get for the keys of a batch that failed. Nothing
// changes a store while an audit runs (it runs in the main loop, with
// every invocation waiting, at one virtual instant), so the rows are what
// one Get after another would read, at a hundredth of the requests: an
// audit reads every live execution, and over a long retention that is
// most of what the simulation does.
func readRows(ctx context.Context, s store.Store, keys []store.Key) map[store.Key]readResult {
	out := make(map[store.Key]readResult, len(keys))
	for len(keys) > 0 {
		var batch, later []store.Key
		slots := map[string]bool{}
		for _, k := range keys {
			slot := k.TenantID + "\x00" + store.Slot(k.ExecutionID)
			if slots[slot] || len(batch) == 100 {
				later = append(later, k)
				continue
			}
			slots[slot] = true
			batch = append(batch, k)
		}
		rows, err := s.GetBatch(ctx, batch)
		if err != nil {
			for _, k := range batch {
				e, err := s.Get(ctx, k)
				out[k] = readResult{e, err}
			}
		} else {
			bySlot := make(map[string]store.Execution, len(rows))
			for _, e := range rows {
				bySlot[e.TenantID+"\x00"+store.Slot(e.ExecutionID)] = e
			}
			for _, k := range batch {
				e, found := bySlot[k.TenantID+"\x00"+store.Slot(k.ExecutionID)]
				if !found || !store.Answers(k.ExecutionID, e.ExecutionID) {
					out[k] = readResult{err: store.ErrNotFound}
					continue
				}
				out[k] = readResult{e: e}
			}
		}
		keys = later
	}
	return out
}

// vanished judges a row that is gone: fine after its retention (from the
// terminal state, or from a park without a timeout), a violation before.
func (w *world) vanished(inc *incarnation, last store.Execution, now time.Time) {
	ttl := w.cfg.ttl
	w.mu.Lock()
	terminalAt, parkedAt := inc.terminalAt, inc.parkedAt
	inc.gone = true
	w.mu.Unlock()
	w.check(invNoVanish)
	slack := time.Second + w.cfg.tolerance
	switch {
	case w.checkVanishedPaused(inc, last):
		return
	case !terminalAt.IsZero() && !now.Before(terminalAt.Add(ttl-slack)):
		w.tracef(inc.exec, "expired %s after it ended (%s)", fmtDur(now.Sub(terminalAt)), last.Status)
	case !parkedAt.IsZero() && !now.Before(parkedAt.Add(ttl-slack)):
		w.tracef(inc.exec, "expired %s after it parked without a timeout (%s)", fmtDur(now.Sub(parkedAt)), last.Status)
	default:
		w.violate(invNoVanish, inc.exec, "the execution's row is gone while it lived: last seen %s (step %d attempt %d, next due %s, expires %s) at +%s",
			last.Status, last.StepIndex, last.Attempt, fmtTime(w, last.NextDueAt), fmtTime(w, last.ExpiresAt), fmtDur(inc.lastAt.Sub(w.start)))
		return
	}
	// Expired as promised: its trace is forgotten (a run of months keeps
	// the lines of the executions alive only).
	w.mu.Lock()
	w.trace.forget(inc.exec)
	delete(w.spreads, inc.exec)
	w.mu.Unlock()
}

// sameInline reports whether two inline payload references are equal:
// the same descriptor, length, digest and bytes.
func sameInline(a, b payload.Ref) bool {
	return a.SHA256 != "" && a.SHA256 == b.SHA256 && a.Length == b.Length && a.Encoding == b.Encoding &&
		a.ContentType == b.ContentType && a.Message == b.Message && a.ManifestID == "" && b.ManifestID == "" &&
		!a.Whole && !b.Whole && bytes.Equal(a.Inline, b.Inline) && a.Inline != nil
}

func fmtTime(w *world, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + fmtDur(t.Sub(w.start))
}

// claimed checks, at the moment a claim lands, how long the row had
// been claimable.
func (w *world) claimed(before store.Execution) {
	if inc := w.incOf(&before); inc != nil {
		w.checkClaimNotPaused(inc, before)
		w.checkStall(inc, before, time.Now())
		if wokenParent(before) {
			w.checkParent(context.Background(), w.back.view(), inc, before, time.Now())
		}
	}
}

// checkStall: a claimable row (due and not leased, or leased by a lapsed
// lease) must be claimed within stallBound of when it became claimable.
func (w *world) checkStall(inc *incarnation, e store.Execution, now time.Time) {
	var since time.Time
	switch e.Status {
	case store.Queued, store.WaitRetry:
		since = e.NextDueAt
	case store.Running:
		since = e.LeaseExpiresAt.Add(w.cfg.tolerance)
		if e.LeaseExpiresAt.IsZero() {
			w.mu.Lock()
			since = w.reopenedAt // a lease broken when the store was opened again
			w.mu.Unlock()
		}
	default:
		return
	}
	if since.IsZero() || since.After(now) {
		return
	}
	if resumed := w.resumedAt(inc, e); resumed.After(since) {
		since = resumed // not claimable while it was paused
	}
	if w.deployInProgress(e) {
		return // no worker serves its definition yet: the version wait applies
	}
	w.check(invNoStall)
	drops := w.dropsSince(inc, since)
	down := w.downSince(since, now)
	if os.Getenv("SIM_DEBUG_STALL") != "" && e.Sweeps >= 3 {
		fmt.Fprintf(os.Stderr, "stall-debug %s sweeps=%d waited=%s drops=%d\n", inc.exec, e.Sweeps, now.Sub(since), drops)
	}
	if bound := w.stallBound(drops) + down; now.Sub(since) > bound {
		w.violate(invNoStall, inc.exec, "%s at step %d (lease %s) claimable since +%s, not claimed for %s (bound %s with %d work items lost and %s of outage since; sweeps counted on the row: %d, next sweep look %s)",
			e.Status, e.StepIndex, fmtTime(w, e.LeaseExpiresAt), fmtDur(since.Sub(w.start)), fmtDur(now.Sub(since)), bound, drops, down, e.Sweeps, fmtTime(w, e.SweepAt))
	}
}

// deployInProgress reports whether some live process does not serve e's
// definition (a rolling deploy under way): then a stall is the version
// wait, not a lost work item.
func (w *world) deployInProgress(e store.Execution) bool {
	for _, p := range w.procs {
		if p == nil || p.isCrashed() {
			return true
		}
		if _, ok := p.rt.Registry().Version(e.PipelineID, e.PipelineVersion); !ok {
			return true
		}
	}
	return false
}

// outage notes a time the workers could do nothing (the embedded
// process restarting, its disk full).
func (w *world) outage(from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outages = append(w.outages, [2]time.Time{from, to})
}

// downSince sums the outages within [from, to].
func (w *world) downSince(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, o := range w.outages {
		a, b := maxT(o[0], from), minT(o[1], to)
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// checkCheckpoints reads the row's input and result. A payload inline in
// the row is read from the row itself: one whose bytes and digest are
// those read and verified at an earlier audit verifies alike, and is
// not hashed again (a payload in the payload store is read every time:
// the store may lose it).
func (w *world) checkCheckpoints(ctx context.Context, v view, inc *incarnation, e store.Execution) {
	for i, ref := range []struct {
		name string
		ref  payload.Ref
	}{{"input", e.Input}, {"result", e.Result}} {
		if ref.ref.IsZero() {
			continue
		}
		w.check(invCheckpointReadable)
		if ref.ref.ManifestID == "" && sameInline(inc.inlineRead[i], ref.ref) {
			continue
		}
		if _, err := payload.Read(ctx, v.payloads, ref.ref); err != nil {
			w.violate(invCheckpointReadable, inc.exec, "%s row (expires %s) has an unreadable %s: %v", e.Status, fmtTime(w, e.ExpiresAt), ref.name, err)
			return
		}
		if ref.ref.ManifestID == "" {
			inc.inlineRead[i] = ref.ref
		}
	}
	if e.Error != nil && e.Error.Code == store.CodePayloadUnreadable && !inc.deadLetterChecked {
		w.check(invCheckpointReadable)
		w.violate(invCheckpointReadable, inc.exec, "%s with %s: %s", e.Status, e.Error.Code, e.Error.Message)
		w.mu.Lock()
		inc.deadLetterChecked = true
		w.mu.Unlock()
	}
}

// checkResult checks a SUCCEEDED execution's result: every step of its
// definition once, in order; a charge of its own (made after it was
// created, for its own body), dispatched once.
func (w *world) checkResult(inc *incarnation, e store.Execution) {
	w.mu.Lock()
	if inc.resultChecked {
		w.mu.Unlock()
		return
	}
	inc.resultChecked = true
	w.mu.Unlock()
	ctx := context.Background()
	p, err := payload.Read(ctx, w.back.view().payloads, e.Result)
	if err != nil {
		w.check(invCheckpointReadable)
		w.violate(invCheckpointReadable, inc.exec, "SUCCEEDED with an unreadable result: %v", err)
		return
	}
	var out doc
	if err := p.DecodeJSON(&out); err != nil {
		w.violate(invSetup, inc.exec, "result is not a document: %v", err)
		return
	}
	w.check(invExactlyOnce)
	if want := stepNames(inc.pipeline, e.PipelineVersion); !slices.Equal(out.Path, want) {
		w.violate(invExactlyOnce, inc.exec, "result path %v, want every step of %s once in order: %v", out.Path, e.PipelineVersion, want)
	}
	if inc.pipeline != pipePay || inc.sub == nil {
		return
	}
	w.check(invEffectIsolation)
	body := inc.sub.body
	switch c := out.Charged; {
	case c == nil:
		w.violate(invEffectIsolation, inc.exec, "SUCCEEDED without a charge")
	case c.Nonce != body.Nonce || c.Amount != body.Amount || c.At < inc.createdAt.UnixMilli():
		w.violate(invEffectIsolation, inc.exec, "the result carries a charge of %d for %s made at +%s, but this execution was created at +%s for %d (%s): another execution's recorded effect was replayed, its own charge never made",
			c.Amount, c.Nonce, fmtDur(time.UnixMilli(c.At).Sub(w.start)), fmtDur(inc.createdAt.Sub(w.start)), body.Amount, body.Nonce)
	}
	key := store.StepIdempotencyKey(inc.tenant, inc.exec, "charge")
	if n := w.bank.chargesSince(key, inc.createdAt); n > 1 {
		w.violate(invEffectIsolation, inc.exec, "the charge was dispatched %d times for one execution", n)
	}
}

// checkDeadLetter checks a DLQ execution's dead-letter record: its own
// (recorded after it was created, for its last failure). final: at the
// end, a missing record is a violation too (the consumer had time).
func (w *world) checkDeadLetter(ctx context.Context, v view, inc *incarnation, e store.Execution, final bool) {
	w.mu.Lock()
	done := inc.deadLetterChecked
	w.mu.Unlock()
	if done {
		return
	}
	rec, err := v.recorder.Get(ctx, e.LastTransitionKey)
	if errors.Is(err, deadletter.ErrNotFound) && !final {
		return // the consumer may not have run yet
	}
	w.check(invDeadLetterIsolation)
	w.mu.Lock()
	inc.deadLetterChecked = true
	w.mu.Unlock()
	switch {
	case err != nil:
		w.violate(invDeadLetterIsolation, inc.exec, "DLQ without a dead-letter record %s: %v", e.LastTransitionKey, err)
	case rec.RecordedAt.Before(inc.createdAt.Add(-w.cfg.rates.skew - time.Millisecond)):
		w.violate(invDeadLetterIsolation, inc.exec, "DLQ (%s), but its dead-letter record %s was recorded at +%s, before this execution existed (+%s): no new record, no alert; the list still shows the old failure",
			e.LastTransitionKey, rec.ID, fmtDur(rec.RecordedAt.Sub(w.start)), fmtDur(inc.createdAt.Sub(w.start)))
	}
}

// settled reports whether every execution is terminal, parked or gone,
// and every dead letter published is consumed (the settle phase ends
// then: the last execution to end may be a DLQ one, whose record the
// final checks read).
func (w *world) settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dlq != nil && len(w.dlq.msgs) > 0 {
		return false
	}
	// A history batch that failed (its pages and lifecycle events) is
	// retried before the run ends.
	if b, ok := w.back.(*dynamoBackend); ok && b.feed.Retrying() {
		return false
	}
	if w.pausedLeftLocked() {
		return false // resumed at the settle phase (pause.go)
	}
	for _, inc := range w.incList {
		if inc.gone {
			continue
		}
		s := inc.last.Status
		if !s.Terminal() && !s.Parked() {
			return false
		}
	}
	return true
}

// finish runs the final checks: everything settled, terminal facts,
// histories.
func (w *world) finish() {
	w.mu.Lock()
	w.finishing = true
	w.mu.Unlock()
	switch b := w.back.(type) {
	case *dynamoBackend:
		b.catchUp()
	case *memoryBackend:
		drainAll(b.state, w.eventSink())
	case *embeddedBackend:
		drainAll(b.db.State(systemClock), w.eventSink())
	}
	w.audit()
	w.checkSchedules()
	ctx := context.Background()
	v := w.back.view()
	w.mu.Lock()
	incs := slices.Clone(w.incList)
	w.mu.Unlock()
	for _, inc := range incs {
		w.mu.Lock()
		gone, last, cancelled := inc.gone, inc.last, inc.cancelled
		w.mu.Unlock()
		if gone {
			w.report.Outcomes["expired"]++
			continue
		}
		w.report.Outcomes[string(last.Status)]++
		w.check(invSettles)
		if !last.Status.Terminal() && !last.Status.Parked() {
			w.violate(invSettles, inc.exec, "still %s at step %d after the faults stopped %s ago (next due %s, sweep look %s, sweeps %d)",
				last.Status, last.StepIndex, fmtDur(time.Since(w.stopLoad())), fmtTime(w, last.NextDueAt), fmtTime(w, last.SweepAt), last.Sweeps)
		}
		if last.Status == store.Paused {
			w.violate(invSettles, inc.exec, "still PAUSED at the end, though every pause was resumed at the settle phase")
		}
		if cancelled && last.Status != store.Cancelled {
			w.check(invSettles)
			w.violate(invSettles, inc.exec, "an operator's cancel was accepted, but it ended %s", last.Status)
		}
		switch last.Status {
		case store.Succeeded:
			w.checkResult(inc, last)
		case store.DLQ:
			w.checkDeadLetter(ctx, v, inc, last, true)
		case store.Failed:
			w.checkRejectedNoDeadLetter(ctx, v, inc, last)
		}
		w.checkHistory(ctx, v, inc, last)
	}
	w.checkEvents(incs)
	w.checkKeyWaiters(incs)
	w.checkDeadLetterViews(ctx)
	w.checkSpans()
}

// checkDeadLetterViews reads the tenant's whole dead-letter list as an
// operator sees it (engine.DeadLetterViews, every page) once everything
// has settled, and holds each record against what the simulator knows of
// its execution: the row it last saw (Current is that row; nil only for
// an execution whose row expired) and whether the record is still the
// execution's failure (outstanding: the row is DLQ or FAILED and its last
// transition is the record's). Every DLQ execution has exactly one
// outstanding record, and DeadLetterCounts counts as many outstanding
// records as the list marks.
func (w *world) checkDeadLetterViews(ctx context.Context) {
	p := w.liveProc()
	if p == nil {
		return
	}
	outstanding := map[string]int{} // execution id -> outstanding records
	marked := 0
	q := engine.DeadLetterViewQuery{ListQuery: deadletter.ListQuery{TenantID: tenant, Limit: deadletter.MaxListLimit}}
	for pages := 0; pages < 1000; pages++ {
		page, err := p.rt.DeadLetterViews(ctx, q)
		if err != nil {
			w.tracef("", "dead-letter views not read: %v", err)
			return
		}
		for _, v := range page.DeadLetters {
			w.check(invDeadLetterViews)
			w.mu.Lock()
			inc := w.latest[v.ExecutionID]
			var gone bool
			var last store.Execution
			if inc != nil {
				gone, last = inc.gone, inc.last
			}
			w.mu.Unlock()
			switch {
			case inc == nil:
				continue // an execution the simulator never saw commit (a poison record's)
			case gone && v.Current != nil:
				w.violate(invDeadLetterViews, v.ExecutionID, "record %s shows a row (%s) for an execution whose row expired", v.ID, v.Current.Status)
				continue
			case gone:
				if v.Outstanding {
					w.violate(invDeadLetterViews, v.ExecutionID, "record %s is outstanding, but its execution's row expired", v.ID)
				}
				continue
			case v.Current == nil:
				w.violate(invDeadLetterViews, v.ExecutionID, "record %s shows no row, but the execution is %s", v.ID, last.Status)
				continue
			case v.Current.Status != last.Status || v.Current.Version != last.Version:
				w.violate(invDeadLetterViews, v.ExecutionID, "record %s shows the row %s at version %d, the execution is %s at version %d",
					v.ID, v.Current.Status, v.Current.Version, last.Status, last.Version)
			}
			want := (last.Status == store.DLQ || last.Status == store.Failed) && last.LastTransitionKey == v.Envelope.TransitionKey
			if v.Outstanding != want {
				w.violate(invDeadLetterViews, v.ExecutionID, "record %s (failure %s) outstanding %v, want %v: the execution is %s after %s",
					v.ID, v.Envelope.TransitionKey, v.Outstanding, want, last.Status, last.LastTransitionKey)
			}
			if v.Outstanding {
				outstanding[v.ExecutionID]++
				marked++
			}
		}
		if page.Cursor == "" {
			break
		}
		q.Cursor = page.Cursor
	}
	w.mu.Lock()
	incs := slices.Clone(w.incList)
	w.mu.Unlock()
	for _, inc := range incs {
		w.mu.Lock()
		gone, last := inc.gone, inc.last
		w.mu.Unlock()
		if gone || last.Status != store.DLQ {
			continue
		}
		w.check(invDeadLetterViews)
		if n := outstanding[inc.exec]; n != 1 {
			w.violate(invDeadLetterViews, inc.exec, "DLQ with %d outstanding records in the dead-letter list, want 1", n)
		}
	}
	counts, err := p.rt.DeadLetterCounts(ctx, deadletter.ListQuery{TenantID: tenant})
	if err != nil {
		w.tracef("", "dead-letter counts not read: %v", err)
		return
	}
	if counts.Complete {
		w.check(invDeadLetterViews)
		n := 0
		for _, c := range counts.Outstanding {
			n += c
		}
		if n != marked {
			w.violate(invDeadLetterViews, "", "the counts by code hold %d outstanding records, the list marks %d", n, marked)
		}
	}
}

// stopLoad is when the load phase ended.
func (w *world) stopLoad() time.Time {
	return w.start.Add(time.Duration(w.o.VirtualDays) * day)
}

// checkHistory: the events are numbered 1..n with no gap, their versions
// never go back, and the last tells the row's status.
func (w *world) checkHistory(ctx context.Context, v view, inc *incarnation, e store.Execution) {
	if v.history == nil {
		return
	}
	evs, err := v.history.History(ctx, inc.storeKey())
	if err != nil {
		return
	}
	w.check(invHistory)
	for i, ev := range evs {
		if ev.Seq != i+1 {
			w.violate(invHistory, inc.exec, "history event %d is numbered %d", i+1, ev.Seq)
			return
		}
		if i > 0 && ev.Version < evs[i-1].Version {
			w.violate(invHistory, inc.exec, "history event %d (version %d) comes after version %d", ev.Seq, ev.Version, evs[i-1].Version)
			return
		}
	}
	if len(evs) == 0 {
		w.violate(invHistory, inc.exec, "no history for a %s execution", e.Status)
		return
	}
	// Read page by page (as the API serves it, in small pages here), the
	// history is the same events, each once, numbered alike.
	var paged []history.Event
	var after history.Cursor
	for range len(evs) + 1 {
		p := history.PageOf(evs, after, 7)
		paged = append(paged, p.Events...)
		if p.Next == nil {
			break
		}
		after = *p.Next
	}
	if !slices.EqualFunc(paged, evs, func(a, b history.Event) bool { return a.Seq == b.Seq && a.Version == b.Version && a.Index == b.Index }) {
		w.violate(invHistory, inc.exec, "read in pages of 7, the history has %d events, read whole %d", len(paged), len(evs))
		return
	}
	if last := evs[len(evs)-1]; last.Version > e.Version {
		w.violate(invHistory, inc.exec, "history reaches version %d, the row is at %d (another execution's events?)", last.Version, e.Version)
	} else if last.Status != e.Status && last.Version == e.Version {
		w.violate(invHistory, inc.exec, "history ends %s at version %d, the row is %s", last.Status, last.Version, e.Status)
	}
}
