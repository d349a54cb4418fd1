// The SQS dead-letter publisher (NewDLQ): each envelope becomes
// one message on the DLQ queue, its body the JSON of deadletter.Envelope,
// with String message attributes "tenant" and "terminal_reason" so that
// operators and consumers can filter without parsing the body.
//
// Publication is at-least-once: consumers must treat envelopes
// idempotently, keyed by TransitionKey.

package sqsbackend

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/deadletter"
)

// Message attribute names.
const (
	// AttrTerminalReason carries the envelope's TerminalReason.
	AttrTerminalReason = "terminal_reason"
)

// DLQ is a deadletter.Publisher sending envelopes to an SQS queue.
// A nil error from Publish means SQS accepted (stored) the message. It is
// safe for concurrent use.
type DLQ struct {
	client   *sqs.Client
	queueURL string
}

var _ deadletter.Publisher = (*DLQ)(nil)

// NewDLQ returns a publisher sending to the queue at queueURL.
func NewDLQ(client *sqs.Client, queueURL string) *DLQ {
	return &DLQ{client: client, queueURL: queueURL}
}

// Publish implements deadletter.Publisher with one SendMessage call. SQS
// refuses empty attribute values, so an empty TenantID or TerminalReason
// leaves its attribute out (the body still has every field).
func (p *DLQ) Publish(ctx context.Context, env deadletter.Envelope) error {
	attrs := map[string]string{AttrTenant: env.TenantID, AttrTerminalReason: env.TerminalReason}
	if err := Send(ctx, p.client, p.queueURL, env, attrs); err != nil {
		return fmt.Errorf("sqsbackend: publish %s: %w", env.TransitionKey, err)
	}
	return nil
}
