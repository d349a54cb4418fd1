package localcloud

import (
	"context"
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

	"github.com/qasync/qasync/shared/internal/sqsbackend"
)

// mapping is one SQS event source mapping, resolved.
type mapping struct {
	QueueMapping
	fn       string
	queueURL string
	arn      string
	region   string
	pollers  int
}

// mappings resolves the queue mappings' ARNs; those of disabled
// functions are left out. A mapping's pollers are its MaxConcurrency, at
// most its function's Concurrency (each poller's invocation takes one of
// the function's emulators).
func (c *Cloud) mappings(ctx context.Context) ([]mapping, error) {
	var ms []mapping
	for _, q := range c.opts.Queues {
		f := c.fns[q.Function]
		if f == nil {
			continue
		}
		arn, err := queueAttribute(ctx, c.opts.SQS, q.QueueURL, types.QueueAttributeNameQueueArn)
		if err != nil {
			return nil, fmt.Errorf("localcloud: queue %s: %w", q.QueueURL, err)
		}
		region := c.opts.Region
		if parts := strings.Split(arn, ":"); len(parts) == 6 && parts[3] != "" {
			region = parts[3]
		}
		pollers := f.opts.Concurrency
		if q.MaxConcurrency > 0 {
			pollers = min(pollers, q.MaxConcurrency)
		}
		ms = append(ms, mapping{QueueMapping: q, fn: q.Function, queueURL: q.QueueURL, arn: arn, region: region, pollers: pollers})
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

// poll is one poller of an event source mapping: it long-polls the queue
// and hands each batch to the function until the cloud closes.
func (c *Cloud) poll(m mapping) {
	ctx := c.pollCtx
	log := c.log.With(slog.String("function", m.fn), slog.String("queue_url", m.queueURL))
	failures := 0
	for ctx.Err() == nil {
		msgs, err := c.receiveBatch(ctx, m)
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
		if len(msgs) > 0 {
			c.handleBatch(log, m, msgs)
		}
	}
}

// receiveBatch gathers one batch as Lambda's poller does: a long poll for
// the first messages, then, with a batching window, further receives
// until the batch is full or the window (from the first message) is over.
// Messages already received are returned with a receive error, which
// ends the gathering.
func (c *Cloud) receiveBatch(ctx context.Context, m mapping) ([]types.Message, error) {
	var msgs []types.Message
	var deadline time.Time
	for len(msgs) < m.BatchSize {
		wait := int32(c.opts.WaitTimeSeconds)
		if len(msgs) > 0 {
			left := time.Until(deadline)
			if m.BatchingWindow <= 0 || left <= 0 {
				break
			}
			wait = int32(min(max(left/time.Second, 0), 20))
		}
		in := &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(m.queueURL),
			MaxNumberOfMessages:         int32(min(m.BatchSize-len(msgs), 10)),
			WaitTimeSeconds:             wait,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		}
		if c.opts.VisibilityTimeout > 0 {
			in.VisibilityTimeout = int32((c.opts.VisibilityTimeout + time.Second - 1) / time.Second)
		}
		out, err := c.opts.SQS.ReceiveMessage(ctx, in)
		if err != nil {
			if len(msgs) > 0 {
				return msgs, nil
			}
			return nil, err
		}
		if len(msgs) == 0 && len(out.Messages) > 0 {
			deadline = time.Now().Add(m.BatchingWindow)
		}
		msgs = append(msgs, out.Messages...)
		if len(msgs) == 0 {
			return nil, nil // the long poll ended empty: poll again
		}
		if len(out.Messages) == 0 && wait == 0 {
			sleepCtx(ctx, min(time.Until(deadline), 200*time.Millisecond))
		}
	}
	return msgs, nil
}

// handleBatch invokes the function with one batch and deletes the
// messages it handled: all of them, minus its batchItemFailures.
func (c *Cloud) handleBatch(log *slog.Logger, m mapping, msgs []types.Message) {
	payload, err := json.Marshal(sqsbackend.Event(msgs, m.arn, m.region))
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
	failed := map[string]bool{}
	if m.ReportBatchItemFailures {
		// Without the response type, Lambda ignores the response: a
		// successful invocation deletes the whole batch.
		failed, err = batchItemFailures(out, ids)
	}
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

// schedule invokes its function every period with the event an
// EventBridge scheduled rule sends. A failed invocation is retried, with
// a backoff doubling from 1 s, up to the target's RetryAttempts times
// while the event is younger than its MaxEventAge, then dropped
// (schedule_dropped); ticks that fall during the retries are skipped, as
// the next tick carries the same work.
func (c *Cloud) schedule(s Schedule) {
	ctx := c.pollCtx
	t := time.NewTicker(s.Every)
	defer t.Stop()
	rule := "arn:aws:events:" + c.opts.Region + ":" + c.opts.AccountID + ":rule/" + s.ID
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
			for attempt := 0; ctx.Err() == nil; attempt++ {
				start := time.Now()
				_, err := c.Invoke(c.invokeCtx, s.Function, payload)
				c.log.LogAttrs(ctx, slog.LevelDebug, "schedule_invoked", slog.String("event", "schedule_invoked"),
					slog.String("rule", s.ID), slog.String("function", s.Function), slog.Int("attempt", attempt),
					slog.Bool("ok", err == nil), slog.Float64("duration_ms", msf(time.Since(start))))
				if err == nil {
					break
				}
				backoff := time.Second << min(attempt, 6)
				if attempt >= s.RetryAttempts || time.Since(now)+backoff > s.MaxEventAge {
					c.log.LogAttrs(ctx, slog.LevelWarn, "schedule_dropped", slog.String("event", "schedule_dropped"),
						slog.String("rule", s.ID), slog.String("function", s.Function), slog.Int("attempts", attempt+1),
						slog.String("error", err.Error()))
					break
				}
				sleepCtx(ctx, backoff)
			}
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
