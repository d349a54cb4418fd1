// Package outbox makes executions' lifecycle events at least once: every
// event a committed row write yields, of the types a deployment opts into
// (Types, key pipeline.orchestrator.events.types), reaches the event sink
// (EventBridge, or a local one) at least once, with an id that stays the
// same however often it is delivered.
//
// The events are derived, like the history (shared/history), from the
// row writes the engine already makes: Of turns the history events of one
// write (history.Derive) into lifecycle events. What carries them from
// the commit to the sink depends on the store:
//
//   - DynamoDB: the commit is the outbox. The execution table's stream
//     carries every committed row image in order; its consumer (the
//     history function, or qasync serve's stream feed) derives the events
//     from the images after it stored the batch's history and publishes
//     them, failing the batch until the sink acknowledged every one. No
//     write is added to a step.
//   - embedded and memory: the store writes an outbox record per event in
//     the same transaction (under the same lock) as the row, and a
//     Drainer sends them to the sink, deleting each record only once it
//     was acknowledged.
//
// Delivery is at least once, not exactly once, and not ordered across
// executions: a crash after the sink accepted an event and before its
// record was deleted (or the stream position stored) sends it again, with
// the same ID. Consumers deduplicate on ID (the detail's "eventId"). A
// failure the sink reports as transient (throttling, an unavailable
// service, a failed entry of a batch) is retried, with backoff, until it
// is acknowledged; a failure it reports as permanent (an entry it will
// never take, such as a malformed one) is retried no more: the event is
// logged as lifecycle_event_dead_lettered (an error naming its id, type
// and execution) and dropped, so that a poison event never blocks the
// events after it.
package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// Rejected is the lifecycle event of a step ending its execution as a
// rejected item (status FAILED, terminal reason rejected). The history has
// no event of its own for it (its STEP_FAILED says so); Of gives it beside
// that STEP_FAILED.
const Rejected history.Type = "REJECTED"

// Terminal is the default set of published types, the events that end an
// execution (or park it for an operator): SUCCEEDED, DEAD_LETTERED,
// REJECTED, OUTCOME_UNKNOWN and CANCELLED.
var Terminal = []history.Type{history.Succeeded, history.DeadLettered, Rejected, history.OutcomeUnknown, history.Cancelled}

// Known lists every type a deployment may opt into: the history's event
// types and Rejected.
var Known = []history.Type{
	history.Submitted, history.StepStarted, history.StepSucceeded, history.StepFailed, history.LeaseTakenOver,
	history.Awaiting, history.AwaitCompleted, history.Sleeping, history.ChildrenStarted, history.ChildrenFinished,
	history.OutcomeUnknown, history.Redriven, history.CancelRequested, history.Cancelled, history.DeadLettered,
	history.Succeeded, Rejected,
}

// Types is the set of event types a deployment publishes; the empty set
// publishes (and writes) nothing.
type Types map[history.Type]bool

// ParseTypes reads a comma-separated list of event types (case and spaces
// ignored); "" and "none" are the empty set.
func ParseTypes(s string) (Types, error) {
	t := Types{}
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "none") {
		return t, nil
	}
	for name := range strings.SplitSeq(s, ",") {
		typ := history.Type(strings.ToUpper(strings.TrimSpace(name)))
		if !slices.Contains(Known, typ) {
			return nil, fmt.Errorf("outbox: unknown event type %q (known: %s, or none)", name, joinTypes(Known))
		}
		t[typ] = true
	}
	return t, nil
}

// String lists the set in Known's order ("none" when empty).
func (t Types) String() string {
	var in []history.Type
	for _, k := range Known {
		if t[k] {
			in = append(in, k)
		}
	}
	if len(in) == 0 {
		return "none"
	}
	return joinTypes(in)
}

func joinTypes(ts []history.Type) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// Event is one lifecycle event, as an outbox keeps it and a sink sends it.
type Event struct {
	// ID identifies the event: ID(tenant, execution id, version, type).
	// A redelivered event has the same one.
	ID string `json:"id"`
	// Type is the event's type.
	Type history.Type `json:"type"`
	// At is the commit time of the row version the event came from.
	At time.Time `json:"at"`
	// Detail is the JSON document a sink sends (a Detail); it never holds
	// payload bytes.
	Detail json.RawMessage `json:"detail"`
	// Seq is the event's position in a store's outbox (0 on the stream
	// path): what the drainer acknowledges.
	Seq uint64 `json:"-"`
}

// ID is the deterministic id of the event of type typ that the write of
// version of execution executionID (which holds its incarnation) of
// tenant committed: 32 hex digits of a SHA-256 of the four.
func ID(tenant, executionID string, version int64, typ history.Type) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + executionID + "\x00" + strconv.FormatInt(version, 10) + "\x00" + string(typ)))
	return hex.EncodeToString(h[:16])
}

// Detail is the JSON document of an event's detail. It never holds
// payload bytes: neither the input nor the result, only identifiers,
// status, timing and the error summary.
type Detail struct {
	// EventID is the event's ID: consumers deduplicate on it.
	EventID string `json:"eventId"`
	// EventType is the event's type (SUCCEEDED, DEAD_LETTERED, ...).
	EventType   history.Type `json:"eventType"`
	TenantID    string       `json:"tenantId"`
	ExecutionID string       `json:"executionId"`
	PipelineID  string       `json:"pipelineId"`
	// Status is the execution's status after the event.
	Status string `json:"status"`
	// StepIndex, StepName and Attempt describe the step the event is
	// about.
	StepIndex int    `json:"stepIndex"`
	StepName  string `json:"stepName"`
	Attempt   int    `json:"attempt"`
	// Version is the execution's OCC version after the event.
	Version int64 `json:"version"`
	// SubmittedAt is when the execution was accepted.
	SubmittedAt time.Time `json:"submittedAt"`
	// FinishedAt is when the event's write committed (for a terminal
	// event, when the execution finished).
	FinishedAt time.Time `json:"finishedAt"`
	// LatencyMs is submit-to-event time in milliseconds.
	LatencyMs int64 `json:"latencyMs"`
	// Error is the failure the event reports; absent when it has none.
	Error *ErrorDetail `json:"error,omitempty"`
	// CancelReason is the operator's reason of a cancelled execution;
	// absent otherwise.
	CancelReason string `json:"cancelReason,omitempty"`
}

// ErrorDetail summarizes a failure.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// TerminalReason is retry_exhausted, non_retryable or rejected when the
	// failure ended the execution; absent otherwise.
	TerminalReason string `json:"terminalReason,omitempty"`
}

// Derive returns the lifecycle events of types that the write turning
// old into new committed (old nil for the create): Of over
// history.Derive(old, new).
func Derive(old, new *store.Execution, types Types) []Event {
	if len(types) == 0 || new == nil {
		return nil
	}
	return Of(new, history.Derive(old, new), types)
}

// Of returns the lifecycle events of types among evs, the history events
// of the write that made row (history.Derive's answer, which a store
// computes anyway for its history): each event of a type in types, and
// Rejected after the STEP_FAILED that rejected the item.
func Of(row *store.Execution, evs []history.Event, types Types) []Event {
	if len(types) == 0 {
		return nil
	}
	var out []Event
	for _, ev := range evs {
		if types[ev.Type] {
			out = append(out, newEvent(row, ev, ev.Type))
		}
		if ev.Type == history.StepFailed && types[Rejected] && ev.Status == store.Failed &&
			ev.Error != nil && ev.Error.TerminalReason == store.ReasonRejected {
			out = append(out, newEvent(row, ev, Rejected))
		}
	}
	return out
}

// newEvent builds the event of type typ from history event ev of row.
func newEvent(row *store.Execution, ev history.Event, typ history.Type) Event {
	id := ID(row.TenantID, row.ExecutionID, ev.Version, typ)
	d := Detail{
		EventID: id, EventType: typ, TenantID: row.TenantID, ExecutionID: row.ExecutionID, PipelineID: row.PipelineID,
		Status: string(ev.Status), StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt,
		Version: ev.Version, SubmittedAt: row.CreatedAt.UTC(), FinishedAt: ev.At.UTC(),
		LatencyMs: ev.At.Sub(row.CreatedAt).Milliseconds(),
	}
	if typ == history.Cancelled {
		d.CancelReason = row.CancelReason
	}
	if f := ev.Error; f != nil {
		d.Error = &ErrorDetail{Code: f.Code, Message: f.Message, TerminalReason: f.TerminalReason}
	} else if typ != history.Succeeded && typ != history.Submitted && row.Error != nil && ev.Status.Terminal() {
		d.Error = &ErrorDetail{Code: row.Error.Code, Message: row.Error.Message, TerminalReason: row.Error.TerminalReason}
	}
	body, _ := json.Marshal(d) // plain values only: cannot fail
	return Event{ID: id, Type: typ, At: ev.At.UTC(), Detail: body}
}

// DetailType is the EventBridge detail type of an event type: "Execution
// Succeeded", "Execution Dead-Lettered", "Execution Rejected", "Execution
// Outcome Unknown", "Execution Cancelled", "Execution Submitted", and for
// the others the type's words ("Step Started", "Await Completed", ...).
func DetailType(t history.Type) string {
	switch t {
	case history.Succeeded:
		return "Execution Succeeded"
	case history.DeadLettered:
		return "Execution Dead-Lettered"
	case Rejected:
		return "Execution Rejected"
	case history.OutcomeUnknown:
		return "Execution Outcome Unknown"
	case history.Cancelled:
		return "Execution Cancelled"
	case history.Submitted:
		return "Execution Submitted"
	}
	words := strings.Split(strings.ToLower(string(t)), "_")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}

// Configured is the set of types a store's outbox records under c: those
// of events.types when the events go anywhere (config.LifecycleEvents),
// else none, so that a process without a sink writes no record.
func Configured(c config.Config) Types {
	if !c.LifecycleEvents() {
		return nil
	}
	t, _ := ParseTypes(c.EventsTypes) // validated with the configuration
	return t
}
