package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// The map pipeline (sim.map): spread writes one document per child, fan
// runs each as an execution of sim.kid (at most the settings' in-flight
// limit at once, the settings' failures tolerated), join checks what the
// map handed it. Its children are ordinary executions to the other
// invariants (each commit once, every step of a result once in order, no
// stall, no vanishing, a history); these add what a map promises.

// spreadStep records the parent's document (the join continues it) and
// returns the children's documents: child i's nonce is the parent's
// with "/i", and the script says which fail.
func (p *proc) spreadStep() pipeline.Step {
	return pipeline.NewStep("spread", func(ctx context.Context, info pipeline.StepInfo, in doc) ([]doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return nil, err
		}
		parent := doc{Nonce: in.Nonce, Amount: in.Amount, Path: append(slices.Clone(in.Path), "spread"), Script: in.Script}
		p.w.mu.Lock()
		p.w.spreads[info.ExecutionID] = parent
		p.w.mu.Unlock()
		kids := make([]doc, in.Script.Kids)
		for i := range kids {
			kids[i] = doc{Nonce: kidNonce(in.Nonce, i), Amount: i, Path: []string{},
				Script: script{Fail: slices.Contains(in.Script.KidFails, i), Reject: slices.Contains(in.Script.KidRejects, i),
					Heal: slices.Contains(in.Script.KidHeals, i), NapFor: in.Script.KidNap}}
			if kids[i].Script.Heal {
				// The map is the next step; its round-0 child of element i.
				kids[i].Script.First, _ = engine.ChildID(info.ExecutionID, store.Incarnation(info.ExecutionID), info.StepIndex+1, i)
			}
		}
		return kids, nil
	})
}

func kidNonce(parent string, i int) string { return fmt.Sprintf("%s/%d", parent, i) }

// kidStep is a child's last step: it fails non-retryably when its
// script says so (the child dead-letters; the map counts it failed), or
// rejects its item (the child ends FAILED as rejected, with no dead
// letter; the map counts it rejected, tolerated).
func (p *proc) kidStep() pipeline.Step {
	return pipeline.NewStep("k2", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		if in.Script.Fail {
			return doc{}, pipeline.NonRetryable("kid_refused", errors.New("this child is scripted to fail"))
		}
		if in.Script.Heal && info.ExecutionID == in.Script.First {
			return doc{}, pipeline.NonRetryable("kid_refused_once", errors.New("this child is scripted to fail in the map's first round"))
		}
		if in.Script.Reject {
			p.w.tracef(info.ExecutionID, "%s step k2 attempt %d rejects its item", p.name, info.Attempt)
			return doc{}, reject.Reject(ctx, info, in, errors.New("this child is scripted to be rejected"))
		}
		in.Path = append(in.Path, "k2")
		return in, nil
	})
}

// joinStep checks the map's result against the parent's script: every
// element once, in input order, each the child the runtime derives for
// it, with the outcome its script planned (a succeeded child's output
// its own document, its steps each once); then it continues the parent's
// document.
func (p *proc) joinStep() pipeline.Step {
	return pipeline.NewStep("join", func(ctx context.Context, info pipeline.StepInfo, r pipeline.MapResult) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		w := p.w
		w.mu.Lock()
		parent, ok := w.spreads[info.ExecutionID]
		w.mu.Unlock()
		if !ok {
			w.violate(invSetup, info.ExecutionID, "the join ran without a recorded spread")
			return doc{}, pipeline.NonRetryable("sim_setup", errors.New("no spread recorded"))
		}
		w.check(invJoinSawAll)
		if err := w.checkJoin(ctx, info, parent.Script, r); err != nil {
			return doc{}, err // reading an output failed (a fault): the step is retried
		}
		w.checkJoinRows(ctx, info, r)
		parent.Path = append(parent.Path, "join")
		return parent, nil
	})
}

// checkJoin compares a MapResult with the script the children ran.
func (w *world) checkJoin(ctx context.Context, info pipeline.StepInfo, sc script, r pipeline.MapResult) error {
	bad := func(format string, args ...any) {
		w.violate(invJoinSawAll, info.ExecutionID, "the join (attempt %d) saw "+format, append([]any{info.Attempt}, args...)...)
	}
	if r.Total != sc.Kids || len(r.Elements) != sc.Kids {
		bad("%d elements of a total %d, the map had %d children", len(r.Elements), r.Total, sc.Kids)
		return nil
	}
	token := store.Incarnation(info.ExecutionID)
	succeeded, failed, rejected := 0, 0, 0
	for i, el := range r.Elements {
		id, _ := engine.ChildID(info.ExecutionID, token, info.StepIndex-1, i)
		if el.Index != i || (el.ExecutionID != id && !w.laterRoundChild(ctx, info, token, el.ExecutionID, i)) {
			bad("element %d as index %d of child %s, want child %s or one of a later round", i, el.Index, el.ExecutionID, id)
			return nil
		}
		if slices.Contains(sc.KidFails, i) || (slices.Contains(sc.KidHeals, i) && el.ExecutionID == id) {
			failed++
			if el.Status != string(store.Failed) && el.Status != string(store.DLQ) || el.Rejected {
				bad("element %d %s (rejected %v), its child was scripted to fail", i, el.Status, el.Rejected)
			}
			continue
		}
		if slices.Contains(sc.KidRejects, i) {
			rejected++
			if el.Status != string(store.Failed) || !el.Rejected || el.ErrorCode != pipeline.CodeItemRejected {
				bad("element %d %s (rejected %v, %s), its child was scripted to reject its item", i, el.Status, el.Rejected, el.ErrorCode)
			}
			continue
		}
		succeeded++
		if el.Status != string(store.Succeeded) {
			bad("element %d %s (%s), its child was scripted to succeed", i, el.Status, el.ErrorCode)
			continue
		}
		var out doc
		if err := r.Decode(ctx, i, &out); err != nil {
			return err
		}
		if out.Nonce != kidNonce(w.spreadNonce(info.ExecutionID), i) || !slices.Equal(out.Path, stepNames(pipeKid, "")) {
			bad("element %d output of %s with path %v, want %s's with every step once", i, out.Nonce, out.Path, kidNonce(w.spreadNonce(info.ExecutionID), i))
		}
	}
	if r.Succeeded != succeeded || r.Failed+r.Cancelled != failed || r.Rejected != rejected {
		bad("counts %d succeeded, %d failed, %d cancelled, %d rejected; the children: %d succeeded, %d failed, %d rejected",
			r.Succeeded, r.Failed, r.Cancelled, r.Rejected, succeeded, failed, rejected)
	}
	return nil
}

// laterRoundChild reports whether child is the child of element i in a
// round after the first (a re-drive of the map's failed children) of the
// map of the parent the join step info runs in: its row says so, and its
// id is the one the runtime derives for its round and index.
func (w *world) laterRoundChild(ctx context.Context, info pipeline.StepInfo, token, child string, i int) bool {
	e, err := w.back.view().state.Get(ctx, store.Key{TenantID: tenant, ExecutionID: child})
	if err != nil || e.Parent == nil {
		return false
	}
	p := e.Parent
	want, _ := engine.RoundChildID(info.ExecutionID, token, info.StepIndex-1, p.Round, p.Index)
	if p.Round == 0 || p.Element != i || p.ExecutionID != info.ExecutionID || child != want {
		return false
	}
	// The element ran again: its round-0 child must have failed.
	w.check(invMapRerunsFailed)
	first, _ := engine.ChildID(info.ExecutionID, token, info.StepIndex-1, i)
	if f, err := w.back.view().state.Get(ctx, store.Key{TenantID: tenant, ExecutionID: first}); err == nil &&
		(f.Status == store.Succeeded || f.Status == store.Cancelled || !f.Status.Terminal() ||
			(f.Error != nil && f.Error.TerminalReason == store.ReasonRejected)) {
		w.violate(invMapRerunsFailed, info.ExecutionID, "element %d ran again in round %d, its first child %s ended %s", i, p.Round, first, f.Status)
	}
	return true
}

// childTally counts a map's children by outcome, as the runtime counts
// them for its tolerance: a rejected child apart, a missing (expired)
// one as failed.
type childTally struct {
	succeeded, failed, cancelled, rejected int
}

func (c *childTally) add(status store.Status, rejected bool) {
	switch {
	case status == store.Succeeded:
		c.succeeded++
	case status == store.Cancelled:
		c.cancelled++
	case rejected:
		c.rejected++
	default:
		c.failed++
	}
}

// isRejected reports whether a row ended as a rejected item.
func isRejected(e store.Execution) bool {
	return e.Error != nil && (e.Error.TerminalReason == store.ReasonRejected || e.Error.Code == pipeline.CodeItemRejected)
}

// checkJoinRows compares the MapResult the join got with its children's
// rows in the store: each element the outcome of its child's terminal
// row (EXPIRED when the row is gone: the runtime may have found it gone
// when it collected), and the counts those of the rows; the failures
// (rejected children apart) within the map's tolerance, since the join
// ran.
func (w *world) checkJoinRows(ctx context.Context, info pipeline.StepInfo, r pipeline.MapResult) {
	// Each element's own child: its round-0 child, or the child of the
	// later round that ran it again (checkJoin checked which).
	ids := make([]string, len(r.Elements))
	for i, el := range r.Elements {
		ids[i] = el.ExecutionID
	}
	kids, err := w.rowsOf(ctx, w.back.view(), ids)
	if err != nil {
		return
	}
	bad := func(inv, format string, args ...any) {
		w.violate(inv, info.ExecutionID, "the join (attempt %d) saw "+format, append([]any{info.Attempt}, args...)...)
	}
	w.check(invMapCounts)
	var rows, els childTally
	for i, el := range r.Elements {
		els.add(store.Status(el.Status), el.Rejected)
		k := kids[i]
		if k.ExecutionID == "" {
			// Gone since: its last row the simulator saw, unless the
			// runtime found it gone too.
			w.mu.Lock()
			if inc := w.latest[el.ExecutionID]; inc != nil {
				k = inc.last
			}
			w.mu.Unlock()
			if el.Status == "EXPIRED" {
				rows.add(store.DLQ, false) // counted failed, as the runtime does
				continue
			}
		}
		rejected := isRejected(k)
		code := ""
		if k.Error != nil {
			code = k.Error.Code
		}
		// A child counts (and may wake its parent) right at its FAILED
		// commit, before its dead letter is published and it is marked
		// DLQ: the join may have seen FAILED where the row says DLQ now.
		status := el.Status
		if status == string(store.Failed) && k.Status == store.DLQ && !el.Rejected {
			status = string(store.DLQ)
		}
		if !k.Status.Terminal() || status != string(k.Status) || el.Rejected != rejected || el.ErrorCode != code {
			bad(invMapCounts, "element %d %s (rejected %v, %q), its child's row is %s (rejected %v, %q) at version %d",
				i, el.Status, el.Rejected, el.ErrorCode, k.Status, rejected, code, k.Version)
		}
		rows.add(k.Status, rejected)
	}
	got := childTally{r.Succeeded, r.Failed, r.Cancelled, r.Rejected}
	if got != rows || got != els {
		bad(invMapCounts, "counts %+v; its elements %+v, its children's rows %+v", got, els, rows)
	}
	w.check(invRejectsTolerated)
	if n, tol := rows.failed+rows.cancelled, w.cfg.mapTolerates(len(r.Elements)); n > tol {
		bad(invRejectsTolerated, "%d children failed or cancelled, %d tolerated: the map should have failed", n, tol)
	}
}

// checkParentFailed runs when a map's parent fails at its map step with
// CodeChildrenFailed: its children's rows must hold more failures (or
// cancels) than the map tolerates, rejected children not counted.
func (w *world) checkParentFailed(inc *incarnation, e store.Execution) {
	w.mu.Lock()
	key := fmt.Sprintf("%d|%d", e.Attempt, e.StepIndex)
	done := inc.failChecked[key]
	if inc.failChecked == nil {
		inc.failChecked = map[string]bool{}
	}
	inc.failChecked[key] = true
	kids := w.spreads[e.ExecutionID].Script.Kids
	w.mu.Unlock()
	if done {
		return
	}
	step, total := e.StepIndex, kids
	if c := e.Children; c != nil {
		if c.Round > 0 {
			// A later round's failure counts the kept outcomes too
			// (Children.Kept*, not split by kind): the join's check of a
			// later round's outcomes covers it.
			return
		}
		step, total = c.StepIndex, c.Total
	}
	if total == 0 {
		return // the spread was not seen (an expired record): nothing to count
	}
	rows, err := w.children(context.Background(), w.back.view(), e.ExecutionID, e.CreateToken, step, 0, total)
	if err != nil {
		return
	}
	var t childTally
	for _, k := range rows {
		if k.ExecutionID == "" {
			t.add(store.DLQ, false) // expired: counted failed
			continue
		}
		t.add(k.Status, isRejected(k))
	}
	w.check(invRejectsTolerated)
	if n, tol := t.failed+t.cancelled, w.cfg.mapTolerates(total); n <= tol {
		w.violate(invRejectsTolerated, inc.exec, "the map failed (%s) with %d of its %d children failed or cancelled, %d tolerated, %d rejected: rejected children counted against the tolerance",
			e.Status, n, total, tol, t.rejected)
	}
}

// noteRejected follows a child that ended as a rejected item: the row
// that ended it (FAILED, code item_rejected, reason rejected, no dead
// letter pending, out of the sweep index) and, after it, no other row:
// it never runs, moves or dead-letters again (a write that only extends
// its expiry, its parent's map renewing it, moves nothing). Every row seen of an
// execution (commits, operator answers, audits) comes here.
func (w *world) noteRejected(inc *incarnation, e store.Execution) {
	w.mu.Lock()
	first := inc.rejected == 0 && isRejected(e)
	if first {
		inc.rejected, inc.rejectedAt = e.Version, time.Now()
		inc.rejectedStep, inc.rejectedAttempt = e.StepIndex, e.Attempt
		w.report.Faults["child_rejected"]++
	}
	was := inc.rejected
	// A later version still rejected where it was (no dead letter, out
	// of the sweep index) is the parent's map keeping the row alive.
	kept := isRejected(e) && e.StepIndex == inc.rejectedStep && e.Attempt == inc.rejectedAttempt &&
		!e.DLQPending && e.SweepAt.IsZero() && e.NextDueAt.IsZero()
	w.mu.Unlock()
	switch {
	case was == 0:
		return
	case first:
		w.check(invRejectedStays)
		code, reason := e.Error.Code, e.Error.TerminalReason
		if e.Status != store.Failed || code != pipeline.CodeItemRejected || reason != store.ReasonRejected || e.DLQPending || !e.SweepAt.IsZero() || !e.NextDueAt.IsZero() {
			w.violate(invRejectedStays, inc.exec, "ended as rejected as %s (code %s, reason %s, dead letter pending %v, sweep look %s, next due %s), want FAILED, %s, %s, none pending, out of the sweep index",
				e.Status, code, reason, e.DLQPending, fmtTime(w, e.SweepAt), fmtTime(w, e.NextDueAt), pipeline.CodeItemRejected, store.ReasonRejected)
		}
	case e.Version > was && !kept:
		w.check(invRejectedStays)
		w.violate(invRejectedStays, inc.exec, "rejected at version %d (+%s), then %s at version %d (step %d, attempt %d)",
			was, fmtDur(inc.rejectedAt.Sub(w.start)), e.Status, e.Version, e.StepIndex, e.Attempt)
	}
}

// rejectedRan is told that a step of exec starts: a child rejected
// before must not run again.
func (w *world) rejectedRan(info pipeline.StepInfo) {
	if info.PipelineID != pipeKid {
		return
	}
	w.mu.Lock()
	inc := w.latest[info.ExecutionID]
	var was int64
	var at time.Time
	if inc != nil {
		was, at = inc.rejected, inc.rejectedAt
	}
	w.mu.Unlock()
	w.check(invRejectedStays)
	if was != 0 {
		w.violate(invRejectedStays, info.ExecutionID, "step %s attempt %d started after the child was rejected at version %d (+%s)",
			info.StepName, info.Attempt, was, fmtDur(at.Sub(w.start)))
	}
}

// checkRejectedNoDeadLetter: at the end, a rejected child has no
// dead-letter record.
func (w *world) checkRejectedNoDeadLetter(ctx context.Context, v view, inc *incarnation, e store.Execution) {
	if !isRejected(e) {
		return
	}
	w.check(invRejectedStays)
	if rec, err := v.recorder.Get(ctx, e.LastTransitionKey); err == nil {
		w.violate(invRejectedStays, inc.exec, "rejected, and has a dead-letter record %s recorded at +%s", rec.ID, fmtDur(rec.RecordedAt.Sub(w.start)))
	}
}

func (w *world) spreadNonce(exec string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spreads[exec].Nonce
}

// children reads the rows of round round of the map at step of the
// parent (execution id and create token) with total children in the
// round, by index in the round (a zero row where none was read).
func (w *world) children(ctx context.Context, v view, parentID, token string, step, round, total int) ([]store.Execution, error) {
	ids := make([]string, total)
	for i := range ids {
		ids[i], _ = engine.RoundChildID(parentID, token, step, round, i)
	}
	return w.rowsOf(ctx, v, ids)
}

// rowsOf reads the rows of the executions ids, in their order (a zero
// row where none was read).
func (w *world) rowsOf(ctx context.Context, v view, ids []string) ([]store.Execution, error) {
	keys := make([]store.Key, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		keys[i] = store.Key{TenantID: tenant, ExecutionID: id}
		at[id] = i
	}
	rows, err := v.state.GetBatch(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]store.Execution, len(ids))
	for _, e := range rows {
		if i, ok := at[e.ExecutionID]; ok {
			out[i] = e
		}
	}
	return out, nil
}

// checkInFlight runs at every observed commit of a map's child: its
// siblings released and not ended are at most the map's limit.
func (w *world) checkInFlight(e store.Execution) {
	pr := e.Parent
	kids, err := w.children(context.Background(), w.back.view(), pr.ExecutionID, pr.CreateToken, pr.StepIndex, pr.Round, pr.Total)
	if err != nil {
		return
	}
	w.check(invMapInFlight)
	var running []int
	for i, k := range kids {
		if k.ExecutionID != "" && k.Status != store.Pending && !k.Status.Terminal() {
			running = append(running, i)
		}
	}
	if len(running) > pr.MaxInFlight {
		w.violate(invMapInFlight, pr.ExecutionID, "%d children in flight at once (elements %v), the map's limit is %d (seen at a commit of element %d, %s)",
			len(running), running, pr.MaxInFlight, pr.Index, e.Status)
	}
}

// checkParent runs at every audit of a parent waiting for its children
// and at the claim that ends the wait (the map step's run after its
// children): it tracks every child (the pending ones no runtime event
// reported yet) and, once all of them have ended, the parent must be
// claimed within its sweep look (engine ChildrenLook) and the claim
// bound of the last child's end.
func (w *world) checkParent(ctx context.Context, v view, inc *incarnation, e store.Execution, now time.Time) {
	c := e.Children
	if c == nil {
		return
	}
	kids, err := w.children(ctx, v, e.ExecutionID, e.CreateToken, c.StepIndex, c.Round, c.Total)
	if err != nil {
		return
	}
	var last time.Time
	ended := 0
	for _, k := range kids {
		if k.ExecutionID == "" {
			continue
		}
		w.saw(k)
		if k.Status.Terminal() {
			ended++
			last = maxT(last, k.UpdatedAt)
		}
	}
	if ended < c.Total {
		return
	}
	// From the later of the last child's end and the park it ends (a
	// parent re-driven after its children ended parks again: that wait
	// counts from then).
	w.mu.Lock()
	waitAt, waitAttempt := inc.waitAt, inc.waitAttempt
	w.mu.Unlock()
	if waitAt.IsZero() || waitAttempt != e.Attempt {
		return // its park at this attempt was never seen
	}
	resumed := w.resumedAt(inc, e) // a parent paused meanwhile waits from its resume
	since := maxT(maxT(last, waitAt), resumed).Add(w.cfg.rates.skew)
	if !now.After(since) || w.deployInProgress(e) {
		return
	}
	w.check(invParentWakes)
	bound := engine.DefaultConfig().ChildrenLook + w.stallBound(w.dropsSince(inc, since)) + w.downSince(since, now)
	if waited := now.Sub(since); waited > bound {
		w.violate(invParentWakes, inc.exec, "%s at step %d %s after its last child ended at +%s, not claimed (bound %s; sweep look %s, sweeps %d)",
			e.Status, e.StepIndex, fmtDur(waited), fmtDur(last.Sub(w.start)), bound, fmtTime(w, e.SweepAt), e.Sweeps)
	}
}

// wokenParent reports whether a row is a parent queued again at its map
// step after its children (the run that collects their outcomes).
func wokenParent(e store.Execution) bool {
	return e.Children != nil && e.Children.Done && e.StepIndex == e.Children.StepIndex && e.Status.Claimable()
}
