// The SQS work dispatcher: Dispatcher sends work
// items to an SQS standard queue and Poller receives them and calls the
// runtime's handler.
//
// A message body is the JSON of a dispatch.WorkItem
// ({"tenantId","executionId","pipelineId","rank","priority"}); it carries a String message
// attribute "tenant" (the tenant id) for routing and observability, and
// with tracing on a String attribute "traceparent" (WorkItem.TraceParent).
// Delivery is at-least-once; duplicates are harmless because every claim
// is OCC-guarded.
//
// Delays: SQS delays a message by at most 900 s (15 min). Dispatch rounds
// a delay up to whole seconds and caps it there, so an item may arrive
// before a longer backoff has elapsed; the worker then finds the row not
// yet due and defers the item (dispatch.RetryAfter), which its consumer
// hands back without counting a receive towards the poison queue: a
// fresh message delayed by up to 900 s, or, for a longer wait on a
// message's first receive, the received message kept invisible for up to
// 12 h (Deferral.HandBack).

package sqsbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/dispatch"
)

// MaxDelay is the longest delivery delay SQS supports; Dispatch caps
// longer delays to it.
const MaxDelay = 900 * time.Second

// MaxBatch is the most entries one SendMessageBatch call takes.
const MaxBatch = 10

// AttrTenant is the String message attribute carrying the tenant id.
const AttrTenant = "tenant"

// DispatcherOption configures a Dispatcher.
type DispatcherOption func(*Dispatcher)

// WithLogger makes the dispatcher log each entry SQS refused
// (event dispatch_entry_failed, at warn level, with the execution id,
// tenant and SQS error code). The returned *SendError carries the same
// detail; by default nothing is logged.
func WithLogger(l *slog.Logger) DispatcherOption {
	return func(d *Dispatcher) {
		if l != nil {
			d.log = l
		}
	}
}

// WithUrgentLane makes the dispatcher send a work item of priority 1 to
// urgentAt (dispatch.WorkItem.Priority) to the urgent queue at url
// instead of the work queue: the one place that routes every dispatch of
// an urgent execution (submit, hand-over, retry, sweeper re-dispatch,
// resume, re-drive, a deferred item handed back). An empty url (or
// urgentAt below 1) leaves everything on the work queue.
func WithUrgentLane(url string, urgentAt int) DispatcherOption {
	return func(d *Dispatcher) {
		if url != "" && urgentAt >= 1 {
			d.urgentURL, d.urgentAt = url, urgentAt
		}
	}
}

// Dispatcher is a dispatch.Dispatcher that sends work items to an SQS
// queue (and urgent ones to a second queue, WithUrgentLane): one
// SendMessage call for a single message, SendMessageBatch calls of up to
// MaxBatch entries for several. It is safe for concurrent use.
type Dispatcher struct {
	client    *sqs.Client
	queueURL  string
	urgentURL string // "" without an urgent lane
	urgentAt  int
	log       *slog.Logger
}

var _ dispatch.Dispatcher = (*Dispatcher)(nil)

// NewDispatcher returns a dispatcher sending to the queue at queueURL.
func NewDispatcher(client *sqs.Client, queueURL string, opts ...DispatcherOption) *Dispatcher {
	d := &Dispatcher{client: client, queueURL: queueURL, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Defer makes a message received from the dispatcher's work queue
// invisible for d (see the package function Defer): the worker function
// keeps a record that is not due yet in the queue it came from.
func (d *Dispatcher) Defer(ctx context.Context, receiptHandle string, wait time.Duration) error {
	return Defer(ctx, d.client, d.queueURL, receiptHandle, wait)
}

// DeferFrom is Defer for a message received from the queue whose ARN is
// sourceARN (a Lambda SQS record's eventSourceARN): the urgent queue's
// when the ARN names it (its last part is the urgent queue URL's last
// path element), else the work queue's.
func (d *Dispatcher) DeferFrom(ctx context.Context, sourceARN, receiptHandle string, wait time.Duration) error {
	url := d.queueURL
	if d.urgentURL != "" && sourceARN != "" && queueName(sourceARN, ":") == queueName(d.urgentURL, "/") {
		url = d.urgentURL
	}
	return Defer(ctx, d.client, url, receiptHandle, wait)
}

// queueName is the last element of a queue ARN (sep ":") or URL (sep
// "/").
func queueName(s, sep string) string {
	return s[strings.LastIndex(s, sep)+1:]
}

// QueueFor is the URL of the queue an item is sent to: the urgent queue
// for an Urgent item when the dispatcher has an urgent lane, else the
// work queue.
func (d *Dispatcher) QueueFor(item dispatch.WorkItem) string {
	if d.urgentURL != "" && Urgent(item, d.urgentAt) {
		return d.urgentURL
	}
	return d.queueURL
}

// Urgent reports whether item takes the urgent lane under the threshold
// urgentAt (priority.urgent-at): its priority is 1 to urgentAt. An item
// without a priority (0) is not urgent.
func Urgent(item dispatch.WorkItem, urgentAt int) bool {
	return item.Priority >= 1 && item.Priority <= urgentAt
}

// SendError reports messages that SQS did not accept: entries it refused
// in a batch response, or every message of a call that failed as a whole.
// Messages not listed were accepted.
type SendError struct {
	// Failed is how many of Total messages were not accepted.
	Failed, Total int
	// Items are the work items not accepted.
	Items []dispatch.WorkItem
	// Codes are the SQS error codes of refused batch entries (one per
	// entry, "" when SQS gave none).
	Codes []string
	// Err joins the errors of calls that failed as a whole (nil when SQS
	// only refused entries).
	Err error
}

// Error implements error.
func (e *SendError) Error() string {
	msg := fmt.Sprintf("sqsbackend: %d of %d messages not accepted", e.Failed, e.Total)
	if len(e.Codes) > 0 {
		msg += fmt.Sprintf(" (%d refused, first code %q)", len(e.Codes), e.Codes[0])
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause of calls that failed as a whole.
func (e *SendError) Unwrap() error { return e.Err }

// Dispatch implements dispatch.Dispatcher. It returns nil when SQS
// accepted every message and a *SendError naming how many it did not
// otherwise. After a call fails it goes on with the remaining batches
// unless ctx has ended. A cancelled ctx sends nothing.
func (d *Dispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqsbackend: %w", err)
	}
	switch len(msgs) {
	case 0:
		return nil
	case 1:
		return d.sendOne(ctx, d.QueueFor(msgs[0].Item), msgs[0])
	}
	se := &SendError{Total: len(msgs)}
	var errs []error
	for _, lane := range d.lanes(msgs) {
		for start := 0; start < len(lane.msgs); start += MaxBatch {
			group := lane.msgs[start:min(start+MaxBatch, len(lane.msgs))]
			if err := ctx.Err(); err != nil {
				errs = append(errs, err)
				se.fail(group...)
				continue
			}
			if err := d.sendBatch(ctx, lane.url, group, se); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if se.Failed == 0 {
		return nil
	}
	se.Err = errors.Join(errs...)
	return se
}

// lane is the messages bound for one queue.
type lane struct {
	url  string
	msgs []dispatch.Message
}

// lanes splits msgs by queue, urgent ones first, keeping their order
// within a queue. Without an urgent lane it is msgs as they are.
func (d *Dispatcher) lanes(msgs []dispatch.Message) []lane {
	if d.urgentURL == "" {
		return []lane{{url: d.queueURL, msgs: msgs}}
	}
	urgent, work := lane{url: d.urgentURL}, lane{url: d.queueURL}
	for _, m := range msgs {
		if d.QueueFor(m.Item) == d.urgentURL {
			urgent.msgs = append(urgent.msgs, m)
		} else {
			work.msgs = append(work.msgs, m)
		}
	}
	return []lane{urgent, work}
}

func (e *SendError) fail(msgs ...dispatch.Message) {
	for _, m := range msgs {
		e.Failed++
		e.Items = append(e.Items, m.Item)
	}
}

func (d *Dispatcher) sendOne(ctx context.Context, url string, m dispatch.Message) error {
	body, err := encode(m.Item)
	if err != nil {
		return err
	}
	_, err = d.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:          aws.String(url),
		MessageBody:       aws.String(body),
		DelaySeconds:      DelaySeconds(m.Delay),
		MessageAttributes: attributes(m.Item),
	})
	if err != nil {
		se := &SendError{Total: 1, Err: fmt.Errorf("send message: %w", err)}
		se.fail(m)
		return se
	}
	return nil
}

// sendBatch sends up to MaxBatch messages to the queue at url in one
// call, recording what was not accepted in se. It returns the error of a
// call that failed as a whole.
func (d *Dispatcher) sendBatch(ctx context.Context, url string, group []dispatch.Message, se *SendError) error {
	entries := make([]types.SendMessageBatchRequestEntry, len(group))
	for i, m := range group {
		body, err := encode(m.Item)
		if err != nil {
			se.fail(group...)
			return err
		}
		entries[i] = types.SendMessageBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			MessageBody:       aws.String(body),
			DelaySeconds:      DelaySeconds(m.Delay),
			MessageAttributes: attributes(m.Item),
		}
	}
	out, err := d.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		se.fail(group...)
		return fmt.Errorf("send message batch: %w", err)
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(group) {
			// Not an id we sent: count it, though we cannot tell which item.
			se.Failed++
			se.Codes = append(se.Codes, aws.ToString(f.Code))
			continue
		}
		se.fail(group[i])
		se.Codes = append(se.Codes, aws.ToString(f.Code))
		d.log.LogAttrs(ctx, slog.LevelWarn, "dispatch_entry_failed", slog.String("event", "dispatch_entry_failed"),
			slog.String("execution_id", group[i].Item.ExecutionID), slog.String("tenant", group[i].Item.TenantID),
			slog.String("error_code", aws.ToString(f.Code)), slog.Bool("sender_fault", f.SenderFault),
			slog.String("error", aws.ToString(f.Message)))
	}
	return nil
}

func encode(item dispatch.WorkItem) (string, error) {
	item.TraceParent = "" // a message attribute (AttrTraceParent), not the body
	b, err := json.Marshal(item)
	if err != nil {
		return "", fmt.Errorf("sqsbackend: encode work item: %w", err)
	}
	return string(b), nil
}

// attributes are a message's attributes. SQS refuses empty attribute
// values, so an item without a tenant gets none.
func attributes(item dispatch.WorkItem) map[string]types.MessageAttributeValue {
	return Attributes(map[string]string{AttrTenant: item.TenantID, AttrTraceParent: item.TraceParent})
}

// DelaySeconds is the SQS DelaySeconds for a delay: rounded up to whole
// seconds (a delay is a lower bound), 0 for none or a negative one, and at
// most MaxDelay.
func DelaySeconds(delay time.Duration) int32 {
	if delay <= 0 {
		return 0
	}
	if delay >= MaxDelay {
		return int32(MaxDelay / time.Second)
	}
	return int32((delay + time.Second - 1) / time.Second)
}

// Decode parses the body of a work queue message into a work item, as the
// poller does. Its errors never quote the body.
func Decode(body string) (dispatch.WorkItem, error) { return decode(body) }

// decode parses a message body. Its errors never quote the body.
func decode(body string) (dispatch.WorkItem, error) {
	var item dispatch.WorkItem
	if err := json.Unmarshal([]byte(body), &item); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			return item, fmt.Errorf("body is not JSON (syntax error at offset %d)", syntax.Offset)
		case errors.As(err, &typ):
			return item, fmt.Errorf("body field %q has the wrong type", typ.Field)
		default:
			return item, errors.New("body is not a JSON work item")
		}
	}
	switch {
	case item.TenantID == "":
		return item, errors.New("work item has no tenantId")
	case item.ExecutionID == "":
		return item, errors.New("work item has no executionId")
	}
	return item, nil
}
