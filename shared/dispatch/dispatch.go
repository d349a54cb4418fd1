// Package dispatch defines the work dispatcher seam: how the runtime hands
// "run the next transition of this execution" to a worker. Delivery is
// at-least-once; duplicates are harmless because every claim is
// OCC-guarded. Implementations (in-process, SQS) pass the dispatcher
// suite of package backendtest (Provider.Dispatcher).
package dispatch

import (
	"context"
	"errors"
	"time"
)

// WorkItem is the body of one dispatched message. It carries no payload:
// a worker reads everything else from the state store.
type WorkItem struct {
	TenantID    string `json:"tenantId"`
	ExecutionID string `json:"executionId"`
	// PipelineID is routing information only.
	PipelineID string `json:"pipelineId,omitempty"`
	// Rank is the execution's rank (store.Execution.WaitRank, epoch
	// milliseconds; 0 when unknown): a transport that orders its due
	// items delivers the smaller rank first (the embedded and in-process
	// queues do; SQS has no order).
	Rank int64 `json:"rank,omitempty"`
	// Priority is the execution's priority, 1 (most urgent) to 5
	// (store.Execution.Priority; 0 when unknown): the SQS dispatcher
	// sends an item of priority at most its urgent threshold to the
	// urgent work queue when one is configured (queue.urgent-url), so
	// that every dispatch of an urgent execution (submit, hand-over,
	// retry, sweeper re-dispatch, resume, re-drive, a deferred item's
	// hand-back) takes the urgent lane.
	Priority int `json:"priority,omitempty"`
	// TraceParent is the W3C traceparent of the span that dispatched the
	// item (package tracing), so that the worker's spans join the
	// submitter's trace; empty when tracing is off. Transports carry it
	// beside the body where they can (SQS: a message attribute).
	TraceParent string `json:"traceParent,omitempty"`
}

// Message is a work item with its delivery delay.
type Message struct {
	Item WorkItem
	// Delay postpones delivery (retry backoff). Implementations may cap it
	// (SQS: 900 s); longer waits are left to the row's NextDueAt and the
	// sweeper.
	Delay time.Duration
}

// Dispatcher sends work items to workers.
type Dispatcher interface {
	// Dispatch enqueues the messages. It returns once they are accepted by
	// the transport; an error means some may not have been.
	Dispatch(ctx context.Context, msgs ...Message) error
}

// Handler processes one delivered work item. A nil return acknowledges
// it; an error asks the transport to deliver it again later.
type Handler func(ctx context.Context, item WorkItem) error

// ErrClosed is returned by Dispatch after the dispatcher was closed.
var ErrClosed = errors.New("dispatch: dispatcher closed")

// RetryAfterError is a Handler's answer for a work item that arrived
// before its execution can use it (a retry time not reached yet, a clock
// behind the submitter's, a pipeline definition this worker does not
// serve): the transport must keep the item and deliver it again after
// Delay, not acknowledge it.
type RetryAfterError struct {
	// Delay is how long the item should stay invisible.
	Delay time.Duration
	// Reason names why, for logs ("not_due", "pipeline_version_unavailable").
	Reason string
}

// Error implements error.
func (e *RetryAfterError) Error() string {
	return "dispatch: deliver again in " + e.Delay.String() + " (" + e.Reason + ")"
}

// RetryAfter returns a RetryAfterError.
func RetryAfter(d time.Duration, reason string) error {
	return &RetryAfterError{Delay: max(d, 0), Reason: reason}
}

// AsRetryAfter reports whether err is (or wraps) a RetryAfterError.
func AsRetryAfter(err error) (*RetryAfterError, bool) {
	var ra *RetryAfterError
	ok := errors.As(err, &ra)
	return ra, ok
}
