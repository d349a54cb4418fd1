// The reject publisher (NewRejects) is the SQS provider of the Item Reject Sink
// (pipeline.item-reject.provider=sqs): each envelope becomes one message
// on the reject queue, its body the JSON of reject.Envelope, with String
// message attributes "tenant", "scope" and "pipeline" for filtering
// without parsing the body. Publication is at-least-once.

package sqsbackend

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/reject"
)

// Message attribute names.
const (
	AttrScope    = "scope"
	AttrPipeline = "pipeline"
)

// Rejects is a reject.Publisher sending envelopes to an SQS queue. A
// nil error from Publish means SQS stored the message. Safe for
// concurrent use.
type Rejects struct {
	client   *sqs.Client
	queueURL string
}

var _ reject.Publisher = (*Rejects)(nil)

// NewRejects returns a publisher sending to the queue at queueURL.
func NewRejects(client *sqs.Client, queueURL string) *Rejects {
	return &Rejects{client: client, queueURL: queueURL}
}

// Publish implements reject.Publisher with one SendMessage call. An
// envelope over SQS's message size (an included payload too large) fails.
func (p *Rejects) Publish(ctx context.Context, env reject.Envelope) error {
	attrs := map[string]string{AttrTenant: env.TenantID, AttrScope: string(env.Scope), AttrPipeline: env.PipelineID}
	if err := Send(ctx, p.client, p.queueURL, env, attrs); err != nil {
		return fmt.Errorf("sqsbackend: publish %s reject of %s: %w", env.Scope, env.TransitionKey, err)
	}
	return nil
}
