// Package lifecycle publishes executions' terminal lifecycle events to
// Amazon EventBridge, so that consumers react to an execution finishing
// instead of polling its status.
//
// A Publisher is a engine.Observer. For each terminal event (succeeded,
// dead-lettered, outcome unknown, cancelled) it sends one event to the
// configured bus with Source "qasync", a detail type per kind
// (DetailTypeSucceeded, DetailTypeDeadLettered, DetailTypeOutcomeUnknown,
// DetailTypeCancelled) and a Detail JSON
// document describing the execution. The detail never carries payload
// bytes: neither the input nor the result is sent, only identifiers,
// status, timing and the error summary. Other event kinds are ignored.
//
// Delivery is best-effort and at most once. The event is sent after the
// runtime has committed the terminal state, synchronously but bounded by a
// timeout (DefaultTimeout, see WithTimeout); a failed or timed-out
// PutEvents call, or an entry EventBridge rejects, is logged
// (lifecycle_publish_failed, at warn) and dropped, never retried and never
// returned to the runtime. A crash between the commit and the publish
// loses the event. Consumers must therefore treat these events as a
// prompt, not as a record: the execution's status, read through the
// status API, remains the source of truth, and a consumer that must not
// miss a terminal execution reconciles by querying status.
package lifecycle

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qasync/qasync/shared/internal/engine"
)

// Source is the EventBridge source of every lifecycle event.
const Source = "qasync"

// EventBridge detail types, one per terminal event kind.
const (
	// DetailTypeSucceeded: the execution finished successfully
	// (engine.EventSucceeded; status SUCCEEDED).
	DetailTypeSucceeded = "Execution Succeeded"
	// DetailTypeDeadLettered: the execution failed and its dead letter was
	// published (engine.EventDeadLettered; status DLQ).
	DetailTypeDeadLettered = "Execution Dead-Lettered"
	// DetailTypeRejected: a step ended the execution as a rejected item
	// (engine.EventRejected; status FAILED, terminal reason rejected).
	DetailTypeRejected = "Execution Rejected"
	// DetailTypeOutcomeUnknown: the execution was parked because a remote
	// attempt's outcome is unknown (engine.EventOutcomeUnknown; status
	// REMOTE_OUTCOME_UNKNOWN); an operator must re-drive it.
	DetailTypeOutcomeUnknown = "Execution Outcome Unknown"
	// DetailTypeCancelled: an operator cancelled the execution
	// (engine.EventCancelled; status CANCELLED).
	DetailTypeCancelled = "Execution Cancelled"
)

// DefaultTimeout bounds each PutEvents call unless WithTimeout says
// otherwise.
const DefaultTimeout = 2 * time.Second

// Log event names.
const (
	// LogPublished is logged at debug level for each event EventBridge
	// accepted.
	LogPublished = "lifecycle_event_published"
	// LogPublishFailed is logged at warn level for each event that was not
	// delivered (call failed, timed out, or the entry was rejected).
	LogPublishFailed = "lifecycle_publish_failed"
)

// Detail is the JSON document in an event's detail field. It never holds
// payload bytes.
type Detail struct {
	TenantID    string `json:"tenantId"`
	ExecutionID string `json:"executionId"`
	PipelineID  string `json:"pipelineId"`
	// Status is the execution's status after the event: SUCCEEDED, DLQ,
	// REMOTE_OUTCOME_UNKNOWN or CANCELLED.
	Status string `json:"status"`
	// StepIndex, StepName and Attempt describe the last step run.
	StepIndex int    `json:"stepIndex"`
	StepName  string `json:"stepName"`
	Attempt   int    `json:"attempt"`
	// Version is the execution's OCC version after the event; with
	// ExecutionID it identifies the event for consumers that deduplicate.
	Version int64 `json:"version"`
	// SubmittedAt is when the execution was accepted.
	SubmittedAt time.Time `json:"submittedAt"`
	// FinishedAt is when the terminal event happened.
	FinishedAt time.Time `json:"finishedAt"`
	// LatencyMs is submit-to-terminal time in milliseconds.
	LatencyMs int64 `json:"latencyMs"`
	// Error is the last failure; absent when the execution has none.
	Error *ErrorDetail `json:"error,omitempty"`
	// CancelReason is the operator's reason of a cancelled execution;
	// absent otherwise.
	CancelReason string `json:"cancelReason,omitempty"`
}

// ErrorDetail summarizes an execution's last failure.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// TerminalReason is retry_exhausted, non_retryable or rejected when the failure
	// ended the execution; absent otherwise.
	TerminalReason string `json:"terminalReason,omitempty"`
}

// DetailType returns the detail type of a terminal event kind; ok is
// false for kinds that are not published.
func DetailType(kind engine.EventKind) (detailType string, ok bool) {
	switch kind {
	case engine.EventSucceeded:
		return DetailTypeSucceeded, true
	case engine.EventDeadLettered:
		return DetailTypeDeadLettered, true
	case engine.EventRejected:
		return DetailTypeRejected, true
	case engine.EventOutcomeUnknown:
		return DetailTypeOutcomeUnknown, true
	case engine.EventCancelled:
		return DetailTypeCancelled, true
	}
	return "", false
}

// NewDetail builds the detail document of ev from its execution row,
// leaving the payload references out.
func NewDetail(ev engine.Event) Detail {
	e := &ev.Execution
	d := Detail{
		TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID,
		Status: string(e.Status), StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt,
		Version: e.Version, SubmittedAt: e.CreatedAt.UTC(), FinishedAt: ev.At.UTC(),
		LatencyMs: ev.Latency.Milliseconds(), CancelReason: e.CancelReason,
	}
	if e.Error != nil {
		d.Error = &ErrorDetail{Code: e.Error.Code, Message: e.Error.Message, TerminalReason: e.Error.TerminalReason}
	}
	return d
}

// Option configures a Publisher.
type Option func(*Publisher)

// WithTimeout bounds each PutEvents call (retries included) to d; d <= 0
// keeps DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(p *Publisher) {
		if d > 0 {
			p.timeout = d
		}
	}
}

// WithLogger sets the logger for publish outcomes (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(p *Publisher) {
		if l != nil {
			p.log = l
		}
	}
}

// Publisher sends terminal lifecycle events to an EventBridge bus. It is a
// engine.Observer, safe for concurrent use. A nil *Publisher ignores
// every event.
type Publisher struct {
	client  *eventbridge.Client
	bus     string
	timeout time.Duration
	log     *slog.Logger
}

var _ engine.Observer = (*Publisher)(nil)

// New returns a Publisher sending to the bus named busName (a name or an
// ARN) through client.
func New(client *eventbridge.Client, busName string, opts ...Option) *Publisher {
	p := &Publisher{client: client, bus: busName, timeout: DefaultTimeout, log: slog.Default()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Observe implements engine.Observer: a terminal event is sent with one
// PutEvents call, bounded by the publisher's timeout; other kinds are
// ignored. The call runs even when ctx is already cancelled (the state it
// reports is committed), but never longer than the timeout. Failures are
// logged, never returned.
func (p *Publisher) Observe(ctx context.Context, ev engine.Event) {
	if p == nil || p.client == nil {
		return
	}
	detailType, ok := DetailType(ev.Kind)
	if !ok {
		return
	}
	e := &ev.Execution
	log := p.log.With(
		slog.String("detail_type", detailType),
		slog.String("bus", p.bus),
		slog.String("tenant", e.TenantID),
		slog.String("execution_id", e.ExecutionID),
		slog.String("pipeline", e.PipelineID),
		slog.String("status", string(e.Status)),
	)
	detail, err := json.Marshal(NewDetail(ev))
	if err != nil { // plain values only: cannot happen
		log.LogAttrs(ctx, slog.LevelWarn, LogPublishFailed, slog.String("event", LogPublishFailed), slog.String("error", err.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	out, err := p.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{{
		EventBusName: aws.String(p.bus),
		Source:       aws.String(Source),
		DetailType:   aws.String(detailType),
		Detail:       aws.String(string(detail)),
		Time:         aws.Time(ev.At),
	}}})
	switch {
	case err != nil:
		log.LogAttrs(ctx, slog.LevelWarn, LogPublishFailed, slog.String("event", LogPublishFailed),
			slog.String("error", err.Error()))
	case out.FailedEntryCount > 0:
		var code, msg string
		if len(out.Entries) > 0 {
			code, msg = aws.ToString(out.Entries[0].ErrorCode), aws.ToString(out.Entries[0].ErrorMessage)
		}
		log.LogAttrs(ctx, slog.LevelWarn, LogPublishFailed, slog.String("event", LogPublishFailed),
			slog.Int("failed_entry_count", int(out.FailedEntryCount)),
			slog.String("error_code", code), slog.String("error_message", msg))
	default:
		var id string
		if len(out.Entries) > 0 {
			id = aws.ToString(out.Entries[0].EventId)
		}
		log.LogAttrs(ctx, slog.LevelDebug, LogPublished, slog.String("event", LogPublished),
			slog.String("event_id", id))
	}
}
