package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// Derive returns the events that the write turning row version old into
// row version new committed, in the order they happened. old is nil for
// the create (the row's first version). It is pure: it reads the two rows
// only, so every provider derives the same history from the writes it
// makes, whenever and wherever it looks at them (in the write itself, or
// later from a change stream carrying both images).
//
// What each write yields:
//
//   - the create (old nil, or a row created anew under the key of an
//     expired one: another create token, a lower version): SUBMITTED;
//   - a write that leaves the version as it was (a lease renewal, the
//     sweeper moving its next look), and a row deleted (new nil): nothing;
//   - a claim: STEP_STARTED, or LEASE_TAKEN_OVER when it takes a RUNNING
//     row whose lease lapsed (a new attempt by another worker);
//   - a step's commit: STEP_SUCCEEDED (and SUCCEEDED after the last step;
//     a commit that also claims the next step, one write, adds that
//     step's STEP_STARTED), STEP_FAILED (with RetryAt when it is retried;
//     a terminal failure is followed by DEAD_LETTERED once its envelope
//     is published), AWAITING (parked for an external completion) or
//     OUTCOME_UNKNOWN;
//   - an await's completion: AWAIT_COMPLETED (also a late one, kept for
//     reconciliation); its timeout: STEP_FAILED with AWAIT_TIMEOUT;
//   - a sleep step's commit (the next step scheduled later than the
//     write): STEP_SUCCEEDED and SLEEPING, with WakeAt;
//   - a map step's fan-out (the row parked WAITING_CHILDREN):
//     CHILDREN_STARTED; the end of its last child (the row queued at the
//     map step again): CHILDREN_FINISHED;
//   - an operator's re-drive (RedriveCount grows): REDRIVEN; a cancel
//     request (CancelRequestedAt set): CANCEL_REQUESTED; the row becoming
//     CANCELLED: CANCELLED (a cancel of a row that is not running is one
//     write: CANCEL_REQUESTED then CANCELLED);
//   - an operator's pause: PAUSED when the row became PAUSED (at once, or
//     by the commit of the attempt that was running, after that commit's
//     own events), PAUSE_REQUESTED when it was asked of a RUNNING or
//     WAITING_CHILDREN row; a resume: RESUMED (also the withdrawal of a
//     request). A PAUSED row is read as the status it resumes to
//     (PausedFrom) for every other event, so that an attempt that parks
//     PAUSED reports its success or failure as any other;
//   - a hand-back of an unfinished step (a release) and the record of a
//     wait for a pipeline version: nothing (the next claim's STEP_STARTED,
//     or the failure, shows what followed).
//
// Every event carries new's version and update time, and its position
// among the write's events (Index).
func Derive(old, new *store.Execution) []Event {
	if new == nil {
		return nil
	}
	d := deriver{old: old, new: new, status: new.Status}
	if old == nil || old.CreateToken != new.CreateToken || new.Version < old.Version {
		d.add(Submitted, new, "")
		return d.out
	}
	if new.Version == old.Version {
		return nil
	}
	realOld, realNew := old, new
	old, new = resumeView(old), resumeView(new)
	d.old, d.new = old, new
	switch {
	case realOld.Status == store.Paused && realNew.Status != store.Paused:
		d.add(Resumed, new, "resumed to "+string(realNew.Status))
	case !realOld.PauseRequestedAt.IsZero() && realNew.PauseRequestedAt.IsZero() && realOld.Status == realNew.Status && !realNew.Status.Terminal():
		d.add(Resumed, new, "pause request withdrawn")
	case realNew.Status != store.Paused && !realNew.PauseRequestedAt.IsZero() && !realNew.PauseRequestedAt.Equal(realOld.PauseRequestedAt):
		d.add(PauseRequested, new, realNew.PauseReason)
	}
	// What the write was asked to do by someone outside the step.
	if !new.CancelRequestedAt.IsZero() && !new.CancelRequestedAt.Equal(old.CancelRequestedAt) {
		d.add(CancelRequested, new, new.CancelReason)
	}
	if new.RedriveCount > old.RedriveCount {
		d.add(Redriven, new, new.Note)
	}
	if a := new.Await; a != nil {
		switch {
		case a.Status == store.AwaitCompleted && !awaitIs(old.Await, a.ID, func(o *store.Await) bool { return o.Status == store.AwaitCompleted }):
			d.add(AwaitCompleted, new, "await "+a.ID+" completed")
		case a.Late && !awaitIs(old.Await, a.ID, func(o *store.Await) bool { return o.Late }):
			d.add(AwaitCompleted, new, "await "+a.ID+" completed late, after its timeout: kept for reconciliation, nothing else changed")
		}
	}
	// How the attempt that old was in ended.
	switch {
	case old.Status == store.Running && (new.StepIndex > old.StepIndex || new.Status == store.Succeeded):
		d.ended(StepSucceeded, "")
	case d.failed():
		e := d.ended(StepFailed, "")
		e.Error = failure(new.Error)
		if new.Status == store.WaitRetry {
			e.RetryAt = new.NextDueAt
		}
	case new.Status == store.RemoteOutcomeUnknown && old.Status != store.RemoteOutcomeUnknown:
		e := d.ended(OutcomeUnknown, "")
		e.Error = failure(new.Error)
		if e.Error != nil {
			e.Reason = e.Error.Message
		}
	case new.Status == store.WaitingExternal && (old.Status != store.WaitingExternal || !awaitIs(old.Await, awaitID(new.Await), nil)):
		reason := ""
		if a := new.Await; a != nil {
			reason = "await " + a.ID
			if !a.TimeoutAt.IsZero() {
				reason += ", times out at " + a.TimeoutAt.UTC().Format(time.RFC3339Nano)
			}
		}
		d.ended(Awaiting, reason)
	case new.Status == store.WaitingChildren && old.Status != store.WaitingChildren && new.Children != nil:
		d.ended(ChildrenStarted, fmt.Sprintf("%d children, at most %d at a time", new.Children.Total, new.Children.MaxInFlight))
	case old.Status == store.WaitingChildren && new.Status != store.WaitingChildren && new.Children != nil && new.Children.Done:
		d.add(ChildrenFinished, new, fmt.Sprintf("%d children ended", new.Children.Total))
	}
	if new.Status == store.Queued && new.StepIndex > old.StepIndex && new.NextDueAt.After(new.UpdatedAt) {
		e := d.add(Sleeping, d.old, "until "+new.NextDueAt.UTC().Format(time.RFC3339Nano))
		e.WakeAt = new.NextDueAt
	}
	if new.Status == store.DLQ && old.Status != store.DLQ {
		d.add(DeadLettered, new, "").Error = failure(new.Error)
	}
	// The attempt the write started.
	if new.Status == store.Running {
		switch {
		case old.Status == store.Running && new.StepIndex == old.StepIndex && (new.Attempt != old.Attempt || new.LeaseOwner != old.LeaseOwner):
			reason := "the lease of " + old.LeaseOwner + " lapsed"
			if !old.LeaseExpiresAt.IsZero() {
				reason += " at " + old.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)
			}
			d.add(LeaseTakenOver, new, reason).Worker = new.LeaseOwner
		case old.Status != store.Running || new.StepIndex != old.StepIndex:
			d.add(StepStarted, new, "").Worker = new.LeaseOwner
		}
	}
	if new.Status == store.Succeeded && old.Status != store.Succeeded {
		d.add(Succeeded, new, "")
	}
	if new.Status == store.Cancelled && old.Status != store.Cancelled {
		d.add(Cancelled, new, new.CancelReason)
	}
	if realNew.Status == store.Paused && realOld.Status != store.Paused {
		d.add(Paused, new, realNew.PauseReason)
	}
	return d.out
}

// resumeView is e as the status it resumes to when it is PAUSED (its
// PausedFrom), else e itself.
func resumeView(e *store.Execution) *store.Execution {
	if e.Status != store.Paused || e.PausedFrom == "" {
		return e
	}
	v := *e
	v.Status = e.PausedFrom
	return &v
}

// deriver collects the events of one write.
type deriver struct {
	old, new *store.Execution
	// status is the row's status after the write (new may be a PAUSED
	// row's resumeView).
	status store.Status
	out    []Event
}

// add appends an event about row's current step (the step before or
// after the write) and returns it for the caller to complete.
func (d *deriver) add(t Type, row *store.Execution, reason string) *Event {
	d.out = append(d.out, Event{
		Type: t, At: d.new.UpdatedAt, StepIndex: row.StepIndex, StepName: row.StepName, Attempt: row.Attempt,
		Status: d.status, Reason: reason, Version: d.new.Version, Index: len(d.out),
	})
	return &d.out[len(d.out)-1]
}

// ended appends an event ending old's attempt, naming the worker that
// ran it.
func (d *deriver) ended(t Type, reason string) *Event {
	e := d.add(t, d.old, reason)
	e.Worker = d.old.LeaseOwner
	return e
}

// failed reports whether the write failed old's attempt: a retry was
// scheduled (WAIT_RETRY with a new attempt), or a live execution ended
// FAILED or DLQ.
func (d *deriver) failed() bool {
	old, new := d.old, d.new
	switch new.Status {
	case store.WaitRetry:
		return old.Status != store.WaitRetry || new.Attempt != old.Attempt
	case store.Failed, store.DLQ:
		return !old.Status.Terminal()
	}
	return false
}

// awaitIs reports whether a is the await with id and, when cond is set,
// satisfies it.
func awaitIs(a *store.Await, id string, cond func(*store.Await) bool) bool {
	return a != nil && a.ID == id && (cond == nil || cond(a))
}

func awaitID(a *store.Await) string {
	if a == nil {
		return ""
	}
	return a.ID
}

// failure copies f (nil stays nil), so that events never share the row's.
func failure(f *store.Failure) *store.Failure {
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

// Number returns the history of one execution from its events: ordered
// by commit (version, then the order Derive gave them; the order of the
// input does not matter), each (Version, Index) once however often it was
// given (a stream record delivered again, pages written twice), and
// numbered with Seq from 1 without gaps. The input is not changed.
func Number(events []Event) []Event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b Event) int {
		return cmp.Or(cmp.Compare(a.Version, b.Version), cmp.Compare(a.Index, b.Index))
	})
	out = slices.CompactFunc(out, func(a, b Event) bool { return a.Version == b.Version && a.Index == b.Index })
	for i := range out {
		out[i].Seq = i + 1
	}
	return out
}
