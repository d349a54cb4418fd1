// Package lifecycle sends executions' lifecycle events to Amazon
// EventBridge, so that consumers react to an execution finishing instead
// of polling its status.
//
// Sink is the outbox.Sink of EventBridge: each event becomes one entry
// with Source "qasync", the detail type of its type
// (outbox.DetailType: "Execution Succeeded", "Execution Dead-Lettered",
// "Execution Rejected", "Execution Outcome Unknown", "Execution
// Cancelled", ...), the commit time and the detail document
// (outbox.Detail: identifiers, status, timing, the error summary; never
// payload bytes), whose "eventId" is the event's deterministic id. Up to
// ten events go in one PutEvents request (ten entries cost as much as ten
// requests of one, $1 per million entries, but take one round trip).
//
// Delivery is at least once (package outbox says how each store carries
// the events from the commit to here): an entry EventBridge did not take
// (FailedEntryCount, its ErrorCode) is reported to the caller, which
// sends it again; a request that failed (throttled, unavailable, timed
// out) reports every entry. Only an entry EventBridge will never take (a
// malformed one, one too large) is reported as permanent, so that it is
// dead-lettered (logged) rather than retried forever. Consumers
// deduplicate on the detail's eventId: a redelivered event carries the
// same one. Before, the events were published by the worker after its
// commit, at most once: a crash between the commit and the publish, or a
// failed PutEvents, lost them.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qasync/qasync/shared/internal/outbox"
)

// Source is the EventBridge source of every lifecycle event.
const Source = "qasync"

// EventBridge detail types of the terminal event types (outbox.DetailType
// gives every type's).
const (
	// DetailTypeSucceeded: the execution finished successfully (SUCCEEDED).
	DetailTypeSucceeded = "Execution Succeeded"
	// DetailTypeDeadLettered: the execution failed and its dead letter was
	// published (DEAD_LETTERED; status DLQ).
	DetailTypeDeadLettered = "Execution Dead-Lettered"
	// DetailTypeRejected: a step ended the execution as a rejected item
	// (REJECTED; status FAILED, terminal reason rejected).
	DetailTypeRejected = "Execution Rejected"
	// DetailTypeOutcomeUnknown: the execution was parked because a remote
	// attempt's outcome is unknown (OUTCOME_UNKNOWN; status
	// REMOTE_OUTCOME_UNKNOWN); an operator must re-drive it.
	DetailTypeOutcomeUnknown = "Execution Outcome Unknown"
	// DetailTypeCancelled: an operator cancelled the execution (CANCELLED).
	DetailTypeCancelled = "Execution Cancelled"
)

// Detail is the JSON document in an event's detail field.
type Detail = outbox.Detail

// ErrorDetail summarizes an event's failure.
type ErrorDetail = outbox.ErrorDetail

// DefaultTimeout bounds each PutEvents call (the SDK's retries included)
// unless the context has an earlier deadline.
const DefaultTimeout = 5 * time.Second

// MaxEntries is the most entries one PutEvents request takes.
const MaxEntries = 10

// maxRequestBytes is EventBridge's limit of a request's entries (256 KB);
// a request is cut before it.
const maxRequestBytes = 256 * 1024

// PutEventsAPI is the call a Sink makes: *eventbridge.Client implements
// it.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Sink sends lifecycle events to an EventBridge bus; it is an
// outbox.Sink, safe for concurrent use.
type Sink struct {
	client PutEventsAPI
	bus    string
}

var _ outbox.Sink = (*Sink)(nil)

// NewSink returns a sink putting events on the bus named busName (a name
// or an ARN) through client.
func NewSink(client PutEventsAPI, busName string) *Sink {
	return &Sink{client: client, bus: busName}
}

// permanentCodes are the entry error codes EventBridge gives an entry it
// will never take; any other code (InternalFailure, ThrottlingException,
// ...) is worth a retry.
var permanentCodes = []string{"MalformedDetail", "InvalidArgument", "ValidationException", "DetailTooLarge", "InvalidEventPatternException"}

// Send implements outbox.Sink: evs go in requests of up to MaxEntries
// entries (and 256 KB); the entries EventBridge refused, and every entry
// of a request that failed, are reported in an *outbox.SendError.
func (s *Sink) Send(ctx context.Context, evs []outbox.Event) error {
	var se outbox.SendError
	for start := 0; start < len(evs); {
		end, size := start, 0
		for end < len(evs) && end-start < MaxEntries {
			n := len(evs[end].Detail) + len(Source) + len(outbox.DetailType(evs[end].Type)) + 64
			if end > start && size+n > maxRequestBytes {
				break
			}
			size += n
			end++
		}
		se.Failures = append(se.Failures, s.put(ctx, evs, start, end)...)
		start = end
	}
	if len(se.Failures) > 0 {
		return &se
	}
	return nil
}

// put sends evs[start:end] in one request and returns the entries not
// taken.
func (s *Sink) put(ctx context.Context, evs []outbox.Event, start, end int) []outbox.Failure {
	entries := make([]types.PutEventsRequestEntry, 0, end-start)
	for _, ev := range evs[start:end] {
		entries = append(entries, types.PutEventsRequestEntry{
			EventBusName: aws.String(s.bus),
			Source:       aws.String(Source),
			DetailType:   aws.String(outbox.DetailType(ev.Type)),
			Detail:       aws.String(string(ev.Detail)),
			Time:         aws.Time(ev.At),
		})
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	out, err := s.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
	var failed []outbox.Failure
	if err != nil {
		for i := start; i < end; i++ {
			failed = append(failed, outbox.Failure{Index: i, Err: fmt.Errorf("lifecycle: PutEvents: %w", err)})
		}
		return failed
	}
	if out.FailedEntryCount == 0 {
		return nil
	}
	for i := start; i < end; i++ {
		if i-start >= len(out.Entries) { // an answer without the entry's result: not taken
			failed = append(failed, outbox.Failure{Index: i, Err: errors.New("lifecycle: PutEvents answered without this entry")})
			continue
		}
		r := out.Entries[i-start]
		if r.ErrorCode == nil && aws.ToString(r.EventId) != "" {
			continue
		}
		code := aws.ToString(r.ErrorCode)
		failed = append(failed, outbox.Failure{Index: i, Permanent: slices.Contains(permanentCodes, code),
			Err: fmt.Errorf("lifecycle: PutEvents refused the entry: %s: %s", code, aws.ToString(r.ErrorMessage))})
	}
	return failed
}
