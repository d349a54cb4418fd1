package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Pause and resume join the simulated operators: an operator pauses one
// execution now and then (in whatever state it is: queued, retrying,
// running, waiting for an await or for its children) and resumes it a
// while later (minutes, days, or past the retention), now and then
// cancels it while paused (not a map's child: the join checks its
// children's scripted outcomes); bulk pauses and resumes by filter (one
// pipeline's executions, keyed or not, a keyed start sent again) run as
// bulk jobs under the sweeper. All under the usual faults. Whatever is
// still paused when the load ends is resumed at the settle phase (single
// resumes, until nothing is paused nor asked to be), and must then finish
// as an execution never paused would.
//
// The promises, checked from the simulator's own observations (the rows
// it reads from the stores' true view, the claims, renewals and sweeps it
// sees go through the processes' gates):
//
//   - invPausedNotClaimed: no claim lands on a PAUSED row, no step starts
//     while its execution is PAUSED, no lease is renewed on a PAUSED row,
//     and a PAUSED row holds no lease.
//   - invPausedNotSwept: a PAUSED row is not in the sweep index (a due
//     page never holds one, a PAUSED row has no sweep look), and the
//     sweeper never dispatches an execution that was PAUSED before the
//     sweep began.
//   - invPausedKept: a paused execution does not expire while paused,
//     however long past its retention it stays paused.

// The pause invariants, as the report's table names them.
const (
	invPausedNotClaimed = "a paused execution is never claimed and holds no lease"
	invPausedNotSwept   = "a paused execution is not swept"
	invPausedKept       = "a paused execution does not expire while paused"
)

// Pause rates: single pauses per virtual day, bulk pauses per virtual day.
const (
	pausesPerDay     = 4.0
	bulkPausesPerDay = 0.4
)

// pauseState is what the simulator knows of the pauses of the run.
type pauseState struct {
	marks map[*incarnation]*pauseMark
	// jobsUntil: a bulk pause or resume may still be running until then.
	jobsUntil time.Time
	// resuming: the settle phase's resume loop is scheduled.
	resuming bool
	keys     int
}

// pauseMark is one execution's pause as seen.
type pauseMark struct {
	// since is when it was first seen PAUSED (zero: not paused now), at
	// version.
	since   time.Time
	version int64
	// resumedAt is when it was last seen leave PAUSED.
	resumedAt time.Time
	// pastRetention: seen PAUSED longer than the retention (counted once).
	pastRetention bool
	// transition is the paused row's last transition key.
	transition string
}

// pauseCommit reports whether a commit of inc is a pause (the row
// PAUSED) or the resume of one (the first row out of PAUSED, at the
// paused row's transition): these restate a step's transition (the
// resume puts the row back as it was), so they are not checked as the
// transition committed again.
func (w *world) pauseCommit(inc *incarnation, e store.Execution) bool {
	if e.Status == store.Paused {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.pz.mark(inc)
	return m != nil && !m.since.IsZero() && e.Version > m.version && e.LastTransitionKey == m.transition
}

// pauses returns the run's pause state (made on first use). Callers hold w.mu.
func (w *world) pausesLocked() *pauseState {
	if w.pz == nil {
		w.pz = &pauseState{marks: map[*incarnation]*pauseMark{}}
	}
	return w.pz
}

// planPauses schedules the operators' single and bulk pauses until end.
func (w *world) planPauses(end time.Time) {
	w.poisson(time.Duration(float64(day)/pausesPerDay), "op_pause", end, w.pauseOne)
	w.poisson(time.Duration(float64(day)/bulkPausesPerDay), "op_bulk_pause", end, w.bulkPause)
}

// pauseFor draws how long an operator keeps an execution paused: minutes,
// hours to days, or past the retention.
func (w *world) pauseFor() time.Duration {
	switch n := w.intn(10); {
	case n < 4:
		return w.between(time.Minute, 2*time.Hour)
	case n < 8:
		return w.between(2*time.Hour, 2*day)
	default:
		return w.cfg.ttl + w.between(day, 3*day)
	}
}

// pauseOne is an operator pausing one execution in progress.
func (w *world) pauseOne() {
	p := w.liveProc()
	if p == nil {
		return
	}
	w.mu.Lock()
	var inc *incarnation
	for range 10 {
		if len(w.alive) == 0 {
			break
		}
		c := w.alive[w.rng.IntN(len(w.alive))]
		if !c.gone && !c.last.Status.Terminal() {
			inc = c
			break
		}
	}
	w.mu.Unlock()
	if inc == nil {
		return
	}
	e, changed, err := p.rt.Pause(context.Background(), inc.storeKey(), engine.PauseOptions{Reason: "sim: operator pause"})
	if err != nil {
		w.tracef(inc.exec, "operator pause refused: %v", err)
		return
	}
	w.saw(e)
	w.fault("operator_pause")
	w.tracef(inc.exec, "operator pause accepted (status %s, changed %v, requested %v)", e.Status, changed, !e.PauseRequestedAt.IsZero())
	switch {
	case e.Parent == nil && w.chance(0.1): // a map's child cancelled would fail the join's script check
		w.after(w.between(time.Minute, time.Hour), "cancel", func() { w.cancel(inc) })
	default:
		if d := w.pauseFor(); time.Now().Add(d).Before(w.stopLoad()) {
			w.after(d, "op_resume", func() { w.resumeOne(inc, "sim: operator resume") })
		}
	}
}

// resumeOne resumes one execution (or withdraws its pause request); it
// reports whether the call was answered (changed or not applicable).
func (w *world) resumeOne(inc *incarnation, reason string) bool {
	p := w.liveProc()
	if p == nil {
		return false
	}
	e, err := p.rt.Resume(context.Background(), inc.storeKey(), engine.PauseOptions{Reason: reason})
	switch {
	case err == nil:
		w.saw(e)
		w.tracef(inc.exec, "operator resume accepted (status %s)", e.Status)
		return true
	case errors.Is(err, engine.ErrNotPaused), errors.Is(err, store.ErrNotFound):
		return true
	default:
		w.tracef(inc.exec, "operator resume failed: %v", err)
		return false
	}
}

// bulkPause starts a bulk pause of one pipeline's executions (now and
// then the map children's), keyed half the time and a keyed start sent
// again now and then, and plans its bulk resume.
func (w *world) bulkPause() {
	pid := append(pipelineIDs, pipeKid)[w.intn(len(pipelineIDs)+1)]
	if w.startBulk(engine.BulkPause, pid) {
		if d := w.pauseFor(); time.Now().Add(d).Before(w.stopLoad()) {
			w.after(d, "op_bulk_resume", func() { w.startBulk(engine.BulkResume, pid) })
		}
	}
}

// startBulk starts a bulk pause or resume of pipeline pid's executions.
func (w *world) startBulk(action engine.BulkAction, pid string) bool {
	p := w.liveProc()
	if p == nil {
		return false
	}
	opts := engine.RedrivesOptions{Filter: engine.RedriveFilter{PipelineID: pid}, Action: action,
		Reason: "sim: bulk " + action.String(), RatePerSecond: 50}
	if w.chance(0.5) {
		w.mu.Lock()
		pz := w.pausesLocked()
		pz.keys++
		opts.IdempotencyKey = fmt.Sprintf("bulk-%s-%d", action, pz.keys)
		w.mu.Unlock()
	}
	job, err := p.rt.StartRedrivesWith(context.Background(), tenant, opts)
	if err != nil {
		w.tracef("", "bulk %s of %s not started: %v", action, pid, err)
		return false
	}
	w.mu.Lock()
	w.jobsUntil = time.Now().Add(time.Hour)
	w.pausesLocked().jobsUntil = w.jobsUntil
	w.mu.Unlock()
	w.fault("bulk_" + action.String())
	w.tracef("", "bulk %s %s of %s started (key %q): %d matched", action, job.ID, pid, opts.IdempotencyKey, job.Matched)
	if opts.IdempotencyKey != "" && w.chance(0.5) {
		w.fault("bulk_" + action.String() + "_retried")
		w.after(w.between(time.Second, 10*time.Minute), "bulk_redrive_retry", func() { w.bulkRedriveRetry(opts, job.ID) })
	}
	return true
}

// notePause follows an execution's pause from a row seen (a commit, an
// operator's answer, an audit): a PAUSED row must hold no lease and no
// sweep look; its mark starts then and ends at the first newer row that
// is not PAUSED (the resume, or a cancel).
func (w *world) notePause(inc *incarnation, e store.Execution) {
	if e.Status != store.Paused {
		w.mu.Lock()
		m := w.pz.mark(inc)
		left := m != nil && !m.since.IsZero() && e.Version > m.version
		if left {
			m.since, m.resumedAt = time.Time{}, time.Now()
		}
		w.mu.Unlock()
		if left {
			w.tracef(inc.exec, "seen out of PAUSED: %s at version %d", e.Status, e.Version)
		}
		return
	}
	w.check(invPausedNotClaimed)
	if e.LeaseOwner != "" || !e.LeaseExpiresAt.IsZero() {
		w.violate(invPausedNotClaimed, inc.exec, "PAUSED at version %d holds the lease of %q until %s", e.Version, e.LeaseOwner, fmtTime(w, e.LeaseExpiresAt))
	}
	w.check(invPausedNotSwept)
	if !e.SweepAt.IsZero() {
		w.violate(invPausedNotSwept, inc.exec, "PAUSED at version %d has a sweep look at %s", e.Version, fmtTime(w, e.SweepAt))
	}
	now := time.Now()
	w.mu.Lock()
	pz := w.pausesLocked()
	m := pz.marks[inc]
	if m == nil {
		m = &pauseMark{}
		pz.marks[inc] = m
	}
	if e.Version >= m.version {
		if m.since.IsZero() {
			m.since = now
			defer w.tracef(inc.exec, "seen PAUSED at version %d (from %s, reason %q)", e.Version, e.PausedFrom, e.PauseReason)
		}
		m.version, m.transition = e.Version, e.LastTransitionKey
	}
	long := now.Sub(m.since) > w.cfg.ttl
	over := !m.pastRetention && long
	if over {
		m.pastRetention = true
		w.report.Outcomes["paused_past_retention"]++
	}
	start := w.settling && !pz.resuming
	if start {
		pz.resuming = true
	}
	w.mu.Unlock()
	if long {
		w.check(invPausedKept) // alive, paused past its retention
	}
	if over {
		w.tracef(inc.exec, "paused for %s, past the retention (%s)", fmtDur(now.Sub(m.since)), w.cfg.ttl)
	}
	if start {
		w.after(time.Minute, "resume_all", w.resumeAll)
	}
}

// mark returns inc's pause mark (nil when never paused). Callers hold w.mu.
func (pz *pauseState) mark(inc *incarnation) *pauseMark {
	if pz == nil {
		return nil
	}
	return pz.marks[inc]
}

// pausedSince is when inc was first seen PAUSED (zero when it is not
// paused now), and when it was last seen resumed.
func (w *world) pausedSince(inc *incarnation) (since, resumed time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.pz.mark(inc); m != nil {
		return m.since, m.resumedAt
	}
	return time.Time{}, time.Time{}
}

// resumedAt is when inc, seen as e (not PAUSED), was last resumed (zero:
// never paused). A resume whose commit the simulator did not see (its
// answer lost) is placed at e's UpdatedAt, on the resumer's clock: the
// row's newest write, the resume's or a later one.
func (w *world) resumedAt(inc *incarnation, e store.Execution) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.pz.mark(inc)
	switch {
	case m == nil:
		return time.Time{}
	case !m.since.IsZero() && e.Status != store.Paused && e.Version > m.version:
		return e.UpdatedAt.Add(w.cfg.rates.skew)
	}
	return m.resumedAt
}

// resumeAll is the settle phase's operator: every execution PAUSED, or
// with a pause request, is resumed (its row read from the true view), on
// and on until none is left and no bulk pause may still be running.
func (w *world) resumeAll() {
	ctx := context.Background()
	w.mu.Lock()
	var keys []store.Key
	var incs []*incarnation
	for _, inc := range w.alive {
		if !inc.gone && !inc.last.Status.Terminal() {
			keys, incs = append(keys, inc.storeKey()), append(incs, inc)
		}
	}
	jobs := time.Now().Before(w.pausesLocked().jobsUntil)
	w.mu.Unlock()
	rows := readRows(ctx, w.back.view().state, keys)
	left := jobs
	for _, inc := range incs {
		r := rows[inc.storeKey()]
		if r.err != nil || incKey(&r.e) != inc.key || (r.e.Status != store.Paused && r.e.PauseRequestedAt.IsZero()) {
			continue
		}
		if !w.resumeOne(inc, "sim: resume at settle") {
			left = true
			continue
		}
		w.mu.Lock()
		w.report.Outcomes["resumed_at_settle"]++
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.pz.resuming = left
	w.mu.Unlock()
	if left {
		w.after(5*time.Minute, "resume_all", w.resumeAll)
	}
}

// pausedLeft reports whether the run may not end yet for a pause: an
// execution last seen PAUSED, or a bulk pause that may still be running.
func (w *world) pausedLeftLocked() bool {
	if w.pz == nil {
		return false
	}
	if time.Now().Before(w.pz.jobsUntil) {
		return true
	}
	for inc, m := range w.pz.marks {
		if !m.since.IsZero() && !inc.gone {
			return true
		}
	}
	return false
}

// checkClaimNotPaused: a claim landed on before (the row as it was).
func (w *world) checkClaimNotPaused(inc *incarnation, before store.Execution) {
	w.check(invPausedNotClaimed)
	if before.Status == store.Paused {
		w.violate(invPausedNotClaimed, inc.exec, "a claim landed on the PAUSED row at version %d (paused from %s)", before.Version, before.PausedFrom)
	}
}

// checkNotPausedNow: what (a step's start, a lease renewal) happened to
// the execution of key just now; its row must not be PAUSED. Only an
// execution ever paused is read.
func (w *world) checkNotPausedNow(key store.Key, what string) {
	w.mu.Lock()
	inc := w.latest[key.ExecutionID]
	paused := inc != nil && w.pz.mark(inc) != nil
	w.mu.Unlock()
	if !paused {
		return
	}
	e, err := w.back.view().state.Get(context.Background(), key)
	if err != nil {
		return
	}
	w.check(invPausedNotClaimed)
	if e.Status == store.Paused {
		w.violate(invPausedNotClaimed, inc.exec, "%s while the row is PAUSED at version %d", what, e.Version)
	}
}

// checkStepNotPaused is a step's start.
func (w *world) checkStepNotPaused(info pipeline.StepInfo) {
	w.checkNotPausedNow(store.Key{TenantID: info.TenantID, ExecutionID: info.ExecutionID},
		fmt.Sprintf("step %s attempt %d started", info.StepName, info.Attempt))
}

// sweepStarted is the context value a sweep's calls carry: when it began.
type sweepStarted struct{}

// checkDuePage: a page of the sweep index holds no PAUSED row.
func (w *world) checkDuePage(ctx context.Context, page store.DuePage) {
	w.mu.Lock()
	any := w.pz != nil && len(w.pz.marks) > 0
	w.mu.Unlock()
	if !any || len(page.Refs) == 0 {
		return
	}
	keys := make([]store.Key, len(page.Refs))
	for i, r := range page.Refs {
		keys[i] = r.Key
	}
	rows, err := w.back.view().state.GetBatch(ctx, keys)
	if err != nil {
		return
	}
	for _, e := range rows {
		w.check(invPausedNotSwept)
		if e.Status == store.Paused {
			w.violate(invPausedNotSwept, e.ExecutionID, "the sweep index's due page holds the PAUSED row at version %d", e.Version)
		}
	}
}

// checkSweepDispatch: the sweeper dispatches no execution that was
// PAUSED before its sweep began (one paused while the sweep ran may be
// sent: its worker finds it not claimable).
func (w *world) checkSweepDispatch(ctx context.Context, exec string) {
	began, ok := ctx.Value(sweepStarted{}).(time.Time)
	if !ok {
		return
	}
	w.mu.Lock()
	inc := w.latest[exec]
	var since time.Time
	if m := w.pz.mark(inc); inc != nil && m != nil {
		since = m.since
	}
	w.mu.Unlock()
	if since.IsZero() || !since.Before(began) {
		return
	}
	e, err := w.back.view().state.Get(ctx, inc.storeKey())
	if err != nil {
		return
	}
	w.check(invPausedNotSwept)
	if e.Status == store.Paused {
		w.violate(invPausedNotSwept, exec, "the sweeper dispatched the execution PAUSED since +%s (version %d), before its sweep began at +%s",
			fmtDur(since.Sub(w.start)), e.Version, fmtDur(began.Sub(w.start)))
	}
}

// checkVanishedPaused: a row gone while it was last seen PAUSED expired
// while paused.
func (w *world) checkVanishedPaused(inc *incarnation, last store.Execution) bool {
	since, _ := w.pausedSince(inc)
	if since.IsZero() && last.Status != store.Paused {
		return false
	}
	w.check(invPausedKept)
	w.violate(invPausedKept, inc.exec, "the row is gone while PAUSED (paused since +%s, %s; retention %s)",
		fmtDur(since.Sub(w.start)), fmtDur(time.Since(since)), w.cfg.ttl)
	return true
}
