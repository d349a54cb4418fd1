package sim

import (
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// submission is one logical request of the workload.
type submission struct {
	n        int
	at       time.Time
	pipeline string
	key      string // the client's idempotency key ("" for none)
	// tenant submits it ("" for the default tenant; keyed submissions
	// come from two).
	tenant string
	body   doc
	// priority is the priority it is submitted with (0: none given).
	priority int
	// reuseOf is the earlier submission whose key (or, key-less, whose
	// body) this one reuses.
	reuseOf *submission
	// what came of it
	outcome string
	inc     *incarnation
	tries   int
}

// incarnation is one execution the runtime created: an execution id and
// the create that made it (a key reused after the retention makes
// another incarnation, even where the old runtime reused the id).
type incarnation struct {
	key       string // execution id | create token
	exec      string
	tenant    string
	pipeline  string
	version   string
	sub       *submission // the submission that created it
	createdAt time.Time   // the true time of the create (the row's CreatedAt is the submitter's clock)

	last       store.Execution // the newest row seen
	lastAt     time.Time
	terminalAt time.Time
	parkedAt   time.Time // when it parked without a timeout
	// gone: the row expired as promised (after the retention).
	gone bool
	// cancelled: an operator's cancel was accepted.
	cancelled bool
	// redrives planned and done.
	redrives int
	// waitAt and waitAttempt: when (the row's time) and at which attempt
	// it last parked WAITING_CHILDREN (a map's parent).
	waitAt      time.Time
	waitAttempt int
	// drops are the times its work items were lost.
	drops []time.Time
	// checked terminal facts once.
	resultChecked, deadLetterChecked bool
	// inlineRead are the inline input and result last read and verified
	// (checkCheckpoints); only the main loop's audits use them.
	inlineRead [2]payload.Ref
	// rejected is the version of the row that ended it as a rejected
	// item (0: none seen), first seen at rejectedAt.
	rejected   int64
	rejectedAt time.Time
	// rejectedStep and rejectedAttempt are where it was rejected: a later
	// version of the row at the same place, still rejected, only kept
	// the row alive (its parent's map renewing it).
	rejectedStep, rejectedAttempt int
	// failChecked: the map failures (attempt|step) already counted.
	failChecked map[string]bool
}

const tenant = "t1"

func incKey(e *store.Execution) string { return e.ExecutionID + "|" + e.CreateToken }

func (i *incarnation) storeKey() store.Key {
	return store.Key{TenantID: i.tenant, ExecutionID: i.exec}
}

// created registers the incarnation a submit created: exact when this
// very call created it (the true time is now), else learnt later (a
// duplicate answering a create whose answer was lost, a commit seen
// first): its true creation time is then bounded below by the row's
// CreatedAt, read on the submitter's clock, less the largest skew.
func (w *world) created(s *submission, e store.Execution, exact bool) *incarnation {
	w.mu.Lock()
	defer w.mu.Unlock()
	if inc := w.incs[incKey(&e)]; inc != nil {
		if inc.sub == nil {
			inc.sub = s
		}
		return inc
	}
	at := time.Now()
	if !exact {
		at = e.CreatedAt.Add(-w.cfg.rates.skew - time.Millisecond)
	}
	inc := &incarnation{key: incKey(&e), exec: e.ExecutionID, tenant: e.TenantID, pipeline: e.PipelineID,
		version: e.PipelineVersion, sub: s, createdAt: at, last: e, lastAt: time.Now()}
	w.incs[inc.key] = inc
	w.incList = append(w.incList, inc)
	w.alive = append(w.alive, inc)
	if old := w.latest[e.ExecutionID]; old == nil || !old.createdAt.After(at) {
		w.latest[e.ExecutionID] = inc
	}
	return inc
}

// incOf returns the incarnation a row belongs to (nil when unknown).
func (w *world) incOf(e *store.Execution) *incarnation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.incs[incKey(e)]
}

// observed follows a runtime event: the row it carries is the newest.
// A commit is checked for being committed twice.
func (w *world) observed(p *proc, ev engine.Event) {
	e := ev.Execution
	inc := w.created(nil, e, false)
	w.mu.Lock()
	if e.Version >= inc.last.Version {
		inc.last, inc.lastAt = e, time.Now()
	}
	w.mu.Unlock()
	if ev.Kind == engine.EventTransitionCommitted {
		w.committed(p, inc, e)
		if e.Parent != nil {
			w.checkInFlight(e)
		}
		if e.PipelineID == pipeMap && e.Error != nil && e.Error.Code == pipeline.CodeChildrenFailed && (e.Status == store.Failed || e.Status == store.DLQ) {
			w.checkParentFailed(inc, e)
		}
	}
	w.noteRejected(inc, e)
	w.settledState(inc, e)
	if ev.Kind == engine.EventDeadLettered {
		w.onDeadLettered(inc, e)
	}
}

// saw notes a row the simulator got from an operator call (a re-drive, a
// cancel): its newest state, which no runtime event reported.
func (w *world) saw(e store.Execution) {
	inc := w.created(nil, e, false)
	w.mu.Lock()
	if e.Version >= inc.last.Version {
		inc.last, inc.lastAt = e, time.Now()
	}
	w.mu.Unlock()
	w.noteRejected(inc, e)
	w.settledState(inc, e)
}

// settledState notes a terminal or parked state and runs the checks due
// then.
func (w *world) settledState(inc *incarnation, e store.Execution) {
	w.notePause(inc, e)
	w.mu.Lock()
	first := false
	switch {
	case e.Status.Terminal() && inc.terminalAt.IsZero():
		inc.terminalAt, first = e.UpdatedAt, true
	case !e.Status.Terminal():
		inc.terminalAt = time.Time{}
	}
	if e.Status == store.WaitingChildren && (inc.waitAt.IsZero() || inc.waitAttempt != e.Attempt) {
		inc.waitAt, inc.waitAttempt = e.UpdatedAt, e.Attempt
	}
	if e.Status.Parked() && (e.Await == nil || e.Await.TimeoutAt.IsZero()) {
		if inc.parkedAt.IsZero() {
			inc.parkedAt = e.UpdatedAt
		}
	} else {
		inc.parkedAt = time.Time{}
	}
	w.mu.Unlock()
	if first && e.Status == store.Succeeded {
		w.checkResult(inc, e)
	}
}

// committed notes a commit: the same transition (key) committed twice
// with the same outcome (status and step) is a transition committed twice.
func (w *world) committed(p *proc, inc *incarnation, e store.Execution) {
	if w.pauseCommit(inc, e) {
		return // a pause or a resume: no step's transition
	}
	key := fmt.Sprintf("%s|%s|%s|%d", inc.key, e.LastTransitionKey, e.Status, e.StepIndex)
	w.mu.Lock()
	prev, dup := w.commits[key]
	w.commits[key] = fmt.Sprintf("%s at version %d", p.name, e.Version)
	w.report.Checks[invExactlyOnce]++
	w.mu.Unlock()
	if dup {
		w.violate(invExactlyOnce, inc.exec, "transition %s committed twice with status %s at step %d: by %s and by %s at version %d",
			e.LastTransitionKey, e.Status, e.StepIndex, prev, p.name, e.Version)
	}
}

// noteDrop notes a lost work item of exec.
func (w *world) noteDrop(exec string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if inc := w.latest[exec]; inc != nil {
		inc.drops = append(inc.drops, time.Now())
	}
}

// dropsSince counts the work items of inc lost at or after t.
func (w *world) dropsSince(inc *incarnation, t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, d := range inc.drops {
		if !d.Before(t) {
			n++
		}
	}
	return n
}
