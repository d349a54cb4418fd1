package sqsbackend

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// BatchHandler handles one batch of queue messages in the form the AWS
// Lambda SQS event source delivers them (the signature of a Lambda SQS
// handler such as the dlq function's). The response's BatchItemFailures name the
// messages to deliver again; an error fails the whole batch.
type BatchHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// ConsumerOptions tune a Consumer. Zero values take the defaults.
type ConsumerOptions struct {
	// WaitTimeSeconds is the long-poll wait of each ReceiveMessage call,
	// 1 to 20. Default 20.
	WaitTimeSeconds int32
	// BatchSize is the most messages per batch, 1 to 10. Default 10.
	BatchSize int32
	// VisibilityTimeout, when set, is requested on every receive (whole
	// seconds); zero keeps the queue's own setting.
	VisibilityTimeout time.Duration
	// Logger receives the consumer's events. Default: discarded.
	Logger *slog.Logger
}

// Consumer is, in process, what an SQS event source mapping with
// ReportBatchItemFailures is to a Lambda function: it long-polls one queue,
// hands each batch of received messages to a BatchHandler as an
// events.SQSEvent (messageId, receiptHandle, body, md5OfBody, attributes
// including ApproximateReceiveCount, messageAttributes, eventSource,
// eventSourceARN, awsRegion), and deletes the messages the handler did not
// report in BatchItemFailures. When the handler fails the whole batch (an
// error, a panic, or a failure naming a message not in the batch) nothing
// is deleted: every message comes back when its visibility timeout ends,
// and the queue's own redrive policy applies.
//
// Logged events: consumer_started, consumer_stopped, sqs_receive_failed
// (warn), sqs_batch_failed (warn), sqs_delete_failed (warn),
// sqs_batch_handled (debug). Message bodies are never logged.
type Consumer struct {
	client   *sqs.Client
	queueURL string
	handler  BatchHandler
	opts     ConsumerOptions
	log      *slog.Logger
}

// NewConsumer returns a consumer of the queue at queueURL calling h. It
// starts nothing: call Run.
func NewConsumer(client *sqs.Client, queueURL string, h BatchHandler, opts ConsumerOptions) *Consumer {
	if opts.WaitTimeSeconds <= 0 {
		opts.WaitTimeSeconds = DefaultWaitTimeSeconds
	}
	opts.WaitTimeSeconds = min(opts.WaitTimeSeconds, 20)
	if opts.BatchSize <= 0 || opts.BatchSize > 10 {
		opts.BatchSize = 10
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{client: client, queueURL: queueURL, handler: h, opts: opts, log: log.With(slog.String("queue_url", queueURL))}
}

// QueueURL returns the URL of the consumed queue.
func (c *Consumer) QueueURL() string { return c.queueURL }

// Run consumes the queue until ctx ends, then returns nil once the batch
// in hand is settled. The handler gets a context carrying ctx's values
// that is not cancelled with it. It first resolves the queue's ARN (for
// eventSourceARN), retrying until ctx ends.
func (c *Consumer) Run(ctx context.Context) error {
	hctx := context.WithoutCancel(ctx)
	arn, failures := "", 0
	for arn == "" {
		a, err := queueARN(ctx, c.client, c.queueURL)
		if err == nil {
			arn = a
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		failures++
		c.log.LogAttrs(ctx, slog.LevelWarn, "sqs_receive_failed", slog.String("event", "sqs_receive_failed"),
			slog.String("error", err.Error()), slog.Int("consecutive_failures", failures))
		sleep(ctx, receiveBackoff(failures))
	}
	region := regionOf(arn)
	c.log.LogAttrs(ctx, slog.LevelInfo, "consumer_started", slog.String("event", "consumer_started"), slog.String("queue_arn", arn))
	failures = 0
	for ctx.Err() == nil {
		in := &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL),
			MaxNumberOfMessages:         c.opts.BatchSize,
			WaitTimeSeconds:             c.opts.WaitTimeSeconds,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		}
		if c.opts.VisibilityTimeout > 0 {
			in.VisibilityTimeout = seconds(c.opts.VisibilityTimeout)
		}
		out, err := c.client.ReceiveMessage(ctx, in)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			c.log.LogAttrs(ctx, slog.LevelWarn, "sqs_receive_failed", slog.String("event", "sqs_receive_failed"),
				slog.String("error", err.Error()), slog.Int("consecutive_failures", failures))
			sleep(ctx, receiveBackoff(failures))
			continue
		}
		failures = 0
		if len(out.Messages) > 0 {
			c.handle(hctx, out.Messages, arn, region)
		}
	}
	c.log.LogAttrs(hctx, slog.LevelInfo, "consumer_stopped", slog.String("event", "consumer_stopped"))
	return nil
}

// handle passes one batch to the handler and deletes what it handled.
func (c *Consumer) handle(ctx context.Context, msgs []types.Message, arn, region string) {
	start := time.Now()
	ev := Event(msgs, arn, region)
	resp, err := c.call(ctx, ev)
	var failed map[string]bool
	if err == nil {
		failed, err = batchItemFailures(resp, ev)
	}
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "sqs_batch_failed", slog.String("event", "sqs_batch_failed"),
			slog.Int("messages", len(msgs)), slog.String("error", err.Error()))
		return
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, m := range msgs {
		if !failed[aws.ToString(m.MessageId)] {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
	}
	deleted := 0
	if len(entries) > 0 {
		dctx, cancel := context.WithTimeout(ctx, ackTimeout)
		out, err := c.client.DeleteMessageBatch(dctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.queueURL), Entries: entries})
		cancel()
		switch {
		case err != nil:
			// They come back when their visibility ends: the handler
			// must treat a repeated delivery idempotently anyway.
			c.log.LogAttrs(ctx, slog.LevelWarn, "sqs_delete_failed", slog.String("event", "sqs_delete_failed"),
				slog.Int("messages", len(entries)), slog.String("error", err.Error()))
		default:
			deleted = len(out.Successful)
			for _, f := range out.Failed {
				c.log.LogAttrs(ctx, slog.LevelWarn, "sqs_delete_failed", slog.String("event", "sqs_delete_failed"),
					slog.String("code", aws.ToString(f.Code)), slog.String("error", aws.ToString(f.Message)))
			}
		}
	}
	c.log.LogAttrs(ctx, slog.LevelDebug, "sqs_batch_handled", slog.String("event", "sqs_batch_handled"),
		slog.Int("messages", len(msgs)), slog.Int("failed", len(failed)), slog.Int("deleted", deleted),
		slog.Duration("duration", time.Since(start)))
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, ev events.SQSEvent) (resp events.SQSEventResponse, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sqsbackend: batch handler panicked: %v", v)
		}
	}()
	return c.handler(ctx, ev)
}

// batchItemFailures reads the handler's response the way Lambda does: an
// entry with an empty itemIdentifier, or one naming a message not in the
// batch, fails the whole batch.
func batchItemFailures(resp events.SQSEventResponse, ev events.SQSEvent) (map[string]bool, error) {
	if len(resp.BatchItemFailures) == 0 {
		return nil, nil
	}
	ids := make(map[string]bool, len(ev.Records))
	for _, r := range ev.Records {
		ids[r.MessageId] = true
	}
	failed := make(map[string]bool, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == "" || !ids[f.ItemIdentifier] {
			return nil, fmt.Errorf("sqsbackend: batch item failure %q is not a message of the batch", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, nil
}

// Event builds the events.SQSEvent that Lambda's SQS event source would
// deliver for msgs received from the queue with ARN arn in region.
func Event(msgs []types.Message, arn, region string) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		body := aws.ToString(m.Body)
		sum := aws.ToString(m.MD5OfBody)
		if sum == "" {
			h := md5.Sum([]byte(body))
			sum = hex.EncodeToString(h[:])
		}
		attrs := make(map[string]string, len(m.Attributes))
		for k, v := range m.Attributes {
			attrs[k] = v
		}
		mattrs := make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
		for k, v := range m.MessageAttributes {
			a := events.SQSMessageAttribute{
				StringValue: v.StringValue, BinaryValue: v.BinaryValue, DataType: aws.ToString(v.DataType),
				StringListValues: v.StringListValues, BinaryListValues: v.BinaryListValues,
			}
			if a.StringListValues == nil {
				a.StringListValues = []string{}
			}
			if a.BinaryListValues == nil {
				a.BinaryListValues = [][]byte{}
			}
			mattrs[k] = a
		}
		ev.Records[i] = events.SQSMessage{
			MessageId:              aws.ToString(m.MessageId),
			ReceiptHandle:          aws.ToString(m.ReceiptHandle),
			Body:                   body,
			Md5OfBody:              sum,
			Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
			Attributes:             attrs,
			MessageAttributes:      mattrs,
			EventSourceARN:         arn,
			EventSource:            "aws:sqs",
			AWSRegion:              region,
		}
	}
	return ev
}

// RedriveTargetURL returns the URL of the queue that the queue at url
// redrives to (its RedrivePolicy's deadLetterTargetArn), or "" when it has
// no redrive policy. For qasync's work queue that is the poison queue.
func RedriveTargetURL(ctx context.Context, client *sqs.Client, url string) (string, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		return "", fmt.Errorf("sqsbackend: queue %s attributes: %w", url, err)
	}
	policy := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	if policy == "" {
		return "", nil
	}
	var p struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	}
	if err := json.Unmarshal([]byte(policy), &p); err != nil || p.DeadLetterTargetArn == "" {
		return "", fmt.Errorf("sqsbackend: queue %s: unreadable redrive policy", url)
	}
	parts := strings.Split(p.DeadLetterTargetArn, ":")
	if len(parts) != 6 || parts[5] == "" {
		return "", fmt.Errorf("sqsbackend: queue %s: redrive target %q is not a queue ARN", url, p.DeadLetterTargetArn)
	}
	// The target is in the same account and region (SQS requires it).
	u, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])})
	if err != nil {
		return "", fmt.Errorf("sqsbackend: redrive target %s: %w", parts[5], err)
	}
	return aws.ToString(u.QueueUrl), nil
}

func queueARN(ctx context.Context, client *sqs.Client, url string) (string, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", fmt.Errorf("sqsbackend: queue %s attributes: %w", url, err)
	}
	arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("sqsbackend: queue %s has no ARN", url)
	}
	return arn, nil
}

// regionOf is the region field of an ARN ("" when it has none).
func regionOf(arn string) string {
	if parts := strings.Split(arn, ":"); len(parts) == 6 {
		return parts[3]
	}
	return ""
}
