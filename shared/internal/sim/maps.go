package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
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
				Script: script{Fail: slices.Contains(in.Script.KidFails, i), Heal: slices.Contains(in.Script.KidHeals, i)}}
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
// script says so (the child dead-letters; the map counts it failed).
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
	succeeded, failed := 0, 0
	for i, el := range r.Elements {
		id, _ := engine.ChildID(info.ExecutionID, token, info.StepIndex-1, i)
		if el.Index != i || (el.ExecutionID != id && !w.laterRoundChild(ctx, info, token, el.ExecutionID, i)) {
			bad("element %d as index %d of child %s, want child %s or one of a later round", i, el.Index, el.ExecutionID, id)
			return nil
		}
		if slices.Contains(sc.KidFails, i) || (slices.Contains(sc.KidHeals, i) && el.ExecutionID == id) {
			failed++
			if el.Status != string(store.Failed) && el.Status != string(store.DLQ) {
				bad("element %d %s, its child was scripted to fail", i, el.Status)
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
	if r.Succeeded != succeeded || r.Failed+r.Cancelled != failed {
		bad("counts %d succeeded, %d failed, %d cancelled; the children: %d succeeded, %d failed", r.Succeeded, r.Failed, r.Cancelled, succeeded, failed)
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

func (w *world) spreadNonce(exec string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spreads[exec].Nonce
}

// children reads the rows of round round of the map at step of the
// parent (execution id and create token) with total children in the
// round, by index in the round (a zero row where none was read).
func (w *world) children(ctx context.Context, v view, parentID, token string, step, round, total int) ([]store.Execution, error) {
	keys := make([]store.Key, total)
	ids := make(map[string]int, total)
	for i := range keys {
		id, _ := engine.RoundChildID(parentID, token, step, round, i)
		keys[i] = store.Key{TenantID: tenant, ExecutionID: id}
		ids[id] = i
	}
	rows, err := v.state.GetBatch(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]store.Execution, total)
	for _, e := range rows {
		if i, ok := ids[e.ExecutionID]; ok {
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
	since := maxT(last, waitAt).Add(w.cfg.rates.skew)
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
