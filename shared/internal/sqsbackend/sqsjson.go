// Send sends one JSON document as an SQS message with string
// message attributes: the shape of every envelope qasync publishes to a
// queue (dead letters, item rejects).

package sqsbackend

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Attributes turns name/value pairs into String message attributes,
// leaving out empty values (SQS refuses them); nil when none remain.
func Attributes(m map[string]string) map[string]types.MessageAttributeValue {
	attrs := map[string]types.MessageAttributeValue{}
	for name, v := range m {
		if v != "" {
			attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	if len(attrs) == 0 {
		return nil
	}
	return attrs
}

// Send marshals v to JSON and sends it to the queue at queueURL with one
// SendMessage call. A nil error means SQS stored the message.
func Send(ctx context.Context, client *sqs.Client, queueURL string, v any, attrs map[string]string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(body)), MessageAttributes: Attributes(attrs),
	})
	return err
}
