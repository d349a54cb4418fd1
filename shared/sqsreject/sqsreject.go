// Package sqsreject is the SQS provider of the Item Reject Sink
// (pipeline.item-reject.provider=sqs): each envelope becomes one message
// on the reject queue, its body the JSON of reject.Envelope, with String
// message attributes "tenant", "scope" and "pipeline" for filtering
// without parsing the body. Publication is at-least-once.
package sqsreject

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/reject"
)

// Message attribute names.
const (
	AttrTenant   = "tenant"
	AttrScope    = "scope"
	AttrPipeline = "pipeline"
)

// Publisher is a reject.Publisher sending envelopes to an SQS queue. A
// nil error from Publish means SQS stored the message. Safe for
// concurrent use.
type Publisher struct {
	client   *sqs.Client
	queueURL string
}

var _ reject.Publisher = (*Publisher)(nil)

// New returns a publisher sending to the queue at queueURL.
func New(client *sqs.Client, queueURL string) *Publisher {
	return &Publisher{client: client, queueURL: queueURL}
}

// Publish implements reject.Publisher with one SendMessage call. An
// envelope over SQS's message size (an included payload too large) fails.
func (p *Publisher) Publish(ctx context.Context, env reject.Envelope) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqsreject: %w", err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("sqsreject: encode envelope: %w", err)
	}
	attrs := map[string]types.MessageAttributeValue{}
	for name, v := range map[string]string{AttrTenant: env.TenantID, AttrScope: string(env.Scope), AttrPipeline: env.PipelineID} {
		if v != "" { // SQS refuses empty attribute values
			attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	if len(attrs) == 0 {
		attrs = nil
	}
	if _, err := p.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(p.queueURL), MessageBody: aws.String(string(body)), MessageAttributes: attrs,
	}); err != nil {
		return fmt.Errorf("sqsreject: publish %s reject of %s: %w", env.Scope, env.TransitionKey, err)
	}
	return nil
}
