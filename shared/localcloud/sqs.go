package localcloud

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// mapping is one SQS event source mapping.
type mapping struct {
	fn       string
	queueURL string
	arn      string
	region   string
	pollers  int
}

// mappings resolves the configured queues' ARNs.
func (c *Cloud) mappings(ctx context.Context) ([]mapping, error) {
	var ms []mapping
	for _, q := range []struct{ fn, url string }{
		{Worker, c.opts.WorkQueueURL}, {DLQ, c.opts.DLQQueueURL}, {DLQ, c.opts.PoisonQueueURL},
	} {
		if q.url == "" || c.fns[q.fn] == nil {
			continue
		}
		arn, err := queueAttribute(ctx, c.opts.SQS, q.url, types.QueueAttributeNameQueueArn)
		if err != nil {
			return nil, fmt.Errorf("localcloud: queue %s: %w", q.url, err)
		}
		region := c.opts.Region
		if parts := strings.Split(arn, ":"); len(parts) == 6 && parts[3] != "" {
			region = parts[3]
		}
		ms = append(ms, mapping{fn: q.fn, queueURL: q.url, arn: arn, region: region, pollers: c.fns[q.fn].opts.Concurrency})
	}
	return ms, nil
}

func queueAttribute(ctx context.Context, client *sqs.Client, url string, name types.QueueAttributeName) (string, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{name}})
	if err != nil {
		return "", err
	}
	return out.Attributes[string(name)], nil
}

// RedriveTargetURL returns the URL of the queue that the queue at url
// redrives to (its RedrivePolicy's deadLetterTargetArn), or "" when it has
// no redrive policy. For qasync's work queue that is the poison queue.
func RedriveTargetURL(ctx context.Context, client *sqs.Client, url string) (string, error) {
	policy, err := queueAttribute(ctx, client, url, types.QueueAttributeNameRedrivePolicy)
	if err != nil || policy == "" {
		return "", err
	}
	var p struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	}
	if err := json.Unmarshal([]byte(policy), &p); err != nil || p.DeadLetterTargetArn == "" {
		return "", fmt.Errorf("localcloud: queue %s: unreadable redrive policy", url)
	}
	parts := strings.Split(p.DeadLetterTargetArn, ":")
	if len(parts) != 6 {
		return "", fmt.Errorf("localcloud: queue %s: redrive target %q is not a queue ARN", url, p.DeadLetterTargetArn)
	}
	out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])})
	if err != nil {
		return "", fmt.Errorf("localcloud: redrive target %s: %w", parts[5], err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// poll is one poller of an event source mapping: it long-polls the queue
// and hands each batch to the function until the cloud closes.
func (c *Cloud) poll(m mapping) {
	ctx := c.pollCtx
	log := c.log.With(slog.String("function", m.fn), slog.String("queue_url", m.queueURL))
	failures := 0
	for ctx.Err() == nil {
		in := &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(m.queueURL),
			MaxNumberOfMessages:         int32(c.opts.BatchSize),
			WaitTimeSeconds:             int32(c.opts.WaitTimeSeconds),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		}
		if c.opts.VisibilityTimeout > 0 {
			in.VisibilityTimeout = int32((c.opts.VisibilityTimeout + time.Second - 1) / time.Second)
		}
		out, err := c.opts.SQS.ReceiveMessage(ctx, in)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			log.LogAttrs(ctx, slog.LevelWarn, "sqs_receive_failed", slog.String("event", "sqs_receive_failed"),
				slog.String("error", err.Error()), slog.Int("consecutive_failures", failures))
			sleepCtx(ctx, min(100*time.Millisecond<<min(failures, 6), 5*time.Second))
			continue
		}
		failures = 0
		if len(out.Messages) > 0 {
			c.handleBatch(log, m, out.Messages)
		}
	}
}

// handleBatch invokes the function with one batch and deletes the
// messages it handled: all of them, minus its batchItemFailures.
func (c *Cloud) handleBatch(log *slog.Logger, m mapping, msgs []types.Message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, msg := range msgs {
		ev.Records[i] = sqsRecord(msg, m.arn, m.region)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		log.LogAttrs(c.invokeCtx, slog.LevelError, "sqs_batch_failed", slog.String("event", "sqs_batch_failed"),
			slog.Int("messages", len(msgs)), slog.String("error", err.Error()))
		return
	}
	start := time.Now()
	out, err := c.Invoke(c.invokeCtx, m.fn, payload)
	if err != nil {
		// Delete nothing: every message comes back when its visibility
		// timeout ends.
		log.LogAttrs(c.invokeCtx, slog.LevelWarn, "sqs_batch_failed", slog.String("event", "sqs_batch_failed"),
			slog.Int("messages", len(msgs)), slog.String("error", err.Error()), slog.Float64("duration_ms", msf(time.Since(start))))
		return
	}
	ids := make(map[string]bool, len(msgs))
	for _, msg := range msgs {
		ids[aws.ToString(msg.MessageId)] = true
	}
	failed, err := batchItemFailures(out, ids)
	if err != nil {
		log.LogAttrs(c.invokeCtx, slog.LevelWarn, "sqs_batch_failed", slog.String("event", "sqs_batch_failed"),
			slog.Int("messages", len(msgs)), slog.String("error", err.Error()), slog.Float64("duration_ms", msf(time.Since(start))))
		return
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, msg := range msgs {
		if !failed[aws.ToString(msg.MessageId)] {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
		}
	}
	deleted := 0
	if len(entries) > 0 {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(c.invokeCtx), 10*time.Second)
		res, err := c.opts.SQS.DeleteMessageBatch(dctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(m.queueURL), Entries: entries})
		cancel()
		switch {
		case err != nil:
			log.LogAttrs(c.invokeCtx, slog.LevelWarn, "sqs_delete_failed", slog.String("event", "sqs_delete_failed"),
				slog.Int("messages", len(entries)), slog.String("error", err.Error()))
		default:
			deleted = len(res.Successful)
			for _, f := range res.Failed {
				log.LogAttrs(c.invokeCtx, slog.LevelWarn, "sqs_delete_failed", slog.String("event", "sqs_delete_failed"),
					slog.String("code", aws.ToString(f.Code)), slog.String("error", aws.ToString(f.Message)))
			}
		}
	}
	log.LogAttrs(c.invokeCtx, slog.LevelInfo, "sqs_batch_handled", slog.String("event", "sqs_batch_handled"),
		slog.Int("messages", len(msgs)), slog.Int("failed", len(failed)), slog.Int("deleted", deleted),
		slog.Float64("duration_ms", msf(time.Since(start))))
}

// batchItemFailures reads an SQSEventResponse the way Lambda does with
// ReportBatchItemFailures: an empty or null response or list fails
// nothing; an invalid document, or an entry whose itemIdentifier is
// missing, empty or not a message of the batch, fails the whole batch
// (returned as an error).
func batchItemFailures(out []byte, ids map[string]bool) (map[string]bool, error) {
	b := strings.TrimSpace(string(out))
	if b == "" || b == "null" {
		return nil, nil
	}
	var resp struct {
		BatchItemFailures []struct {
			ItemIdentifier *string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if err := json.Unmarshal([]byte(b), &resp); err != nil {
		return nil, errors.New("function response is not a valid SQSEventResponse")
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		switch {
		case f.ItemIdentifier == nil || *f.ItemIdentifier == "":
			return nil, errors.New("batch item failure without itemIdentifier")
		case !ids[*f.ItemIdentifier]:
			return nil, errors.New("batch item failure names a message not in the batch")
		}
		failed[*f.ItemIdentifier] = true
	}
	return failed, nil
}

// sqsRecord builds the record Lambda puts in an SQS event.
func sqsRecord(m types.Message, arn, region string) events.SQSMessage {
	body := aws.ToString(m.Body)
	md5sum := aws.ToString(m.MD5OfBody)
	if md5sum == "" {
		sum := md5.Sum([]byte(body))
		md5sum = hex.EncodeToString(sum[:])
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
	return events.SQSMessage{
		MessageId:              aws.ToString(m.MessageId),
		ReceiptHandle:          aws.ToString(m.ReceiptHandle),
		Body:                   body,
		Md5OfBody:              md5sum,
		Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
		Attributes:             attrs,
		MessageAttributes:      mattrs,
		EventSourceARN:         arn,
		EventSource:            "aws:sqs",
		AWSRegion:              region,
	}
}

// schedule invokes the sweeper every SweepEvery with the event an
// EventBridge schedule rule sends. A failed invocation is logged and not
// retried: the next tick sweeps again.
func (c *Cloud) schedule() {
	ctx := c.pollCtx
	t := time.NewTicker(c.opts.SweepEvery)
	defer t.Stop()
	rule := "arn:aws:events:" + c.opts.Region + ":" + c.opts.AccountID + ":rule/qasync-sweeper-schedule"
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ev := events.EventBridgeEvent{
				Version: "0", ID: uuid(), DetailType: "Scheduled Event", Source: "aws.events",
				AccountID: c.opts.AccountID, Time: now.UTC().Truncate(time.Second), Region: c.opts.Region,
				Resources: []string{rule}, Detail: json.RawMessage("{}"),
			}
			payload, _ := json.Marshal(ev)
			start := time.Now()
			_, err := c.Invoke(c.invokeCtx, Sweeper, payload)
			c.log.LogAttrs(ctx, slog.LevelDebug, "schedule_invoked", slog.String("event", "schedule_invoked"),
				slog.String("function", Sweeper), slog.Bool("ok", err == nil), slog.Float64("duration_ms", msf(time.Since(start))))
		}
	}
}

func uuid() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
