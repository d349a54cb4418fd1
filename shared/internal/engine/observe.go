package engine

import (
	"context"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// EventKind names what an Observer hears.
type EventKind string

// Event kinds.
const (
	// EventTransitionCommitted: a step's outcome was committed (any outcome).
	EventTransitionCommitted EventKind = "transition_committed"
	// EventRetryScheduled: a failed step will be retried.
	EventRetryScheduled EventKind = "retry_scheduled"
	// EventSucceeded: the execution finished successfully (terminal).
	EventSucceeded EventKind = "execution_succeeded"
	// EventDeadLettered: the execution's dead letter was published and it
	// is DLQ (terminal).
	EventDeadLettered EventKind = "execution_dead_lettered"
	// EventRejected: a step ended the execution as a rejected item
	// (pipeline.RejectedError; FAILED with reason rejected, no dead
	// letter; terminal).
	EventRejected EventKind = "execution_rejected"
	// EventOutcomeUnknown: the execution was parked as REMOTE_OUTCOME_UNKNOWN.
	EventOutcomeUnknown EventKind = "execution_outcome_unknown"
	// EventCancelled: an operator's cancel ended the execution CANCELLED
	// (terminal; Execution.CancelReason says why).
	EventCancelled EventKind = "execution_cancelled"
	// EventLeaseTakeover: a worker claimed an execution whose lease had lapsed.
	EventLeaseTakeover EventKind = "lease_takeover"
	// EventSweepCompleted: a sweep finished; Sweep holds its counts.
	EventSweepCompleted EventKind = "sweep_completed"
	// EventVersionUnavailable: a worker left a work item because it does
	// not serve the execution's pipeline definition (a rolling deploy).
	EventVersionUnavailable EventKind = "pipeline_version_unavailable"
)

// Event is one thing the runtime did.
type Event struct {
	Kind EventKind
	// Execution is the row after the event (zero for sweeps).
	Execution store.Execution
	// Latency is submit-to-terminal time for terminal events.
	Latency time.Duration
	// Sweep holds a sweep's counts.
	Sweep SweepResult
	// At is when the event happened.
	At time.Time
}

// Terminal reports whether the event ends an execution.
func (e Event) Terminal() bool {
	return e.Kind == EventSucceeded || e.Kind == EventDeadLettered || e.Kind == EventRejected || e.Kind == EventOutcomeUnknown || e.Kind == EventCancelled
}

// Observer hears runtime events: metrics and lifecycle notifications plug
// in here. Observe is called synchronously after the fact it reports is
// committed; it must be quick and must not fail the runtime (an observer
// logs its own errors).
type Observer interface {
	Observe(ctx context.Context, ev Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, ev Event)

// Observe implements Observer.
func (f ObserverFunc) Observe(ctx context.Context, ev Event) { f(ctx, ev) }

// notify tells every observer.
func (r *Runtime) notify(ctx context.Context, kind EventKind, e store.Execution, sweep SweepResult) {
	if len(r.deps.Observers) == 0 {
		return
	}
	now := r.deps.Clock.Now()
	ev := Event{Kind: kind, Execution: e, Sweep: sweep, At: now}
	if ev.Terminal() {
		ev.Latency = now.Sub(e.CreatedAt)
	}
	for _, o := range r.deps.Observers {
		o.Observe(ctx, ev)
	}
}
