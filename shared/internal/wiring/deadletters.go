package wiring

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
)

// DeadLetterConsumers returns, when dlq-provider is sqs, the consumers
// that feed h the batches of the DLQ queue (dlq-url) and of the work
// queue's poison queue, exactly as the dlq Lambda function's two event
// source mappings do. qasync serve runs them with h = lambdafn.DLQ, so
// that one process is the whole topology: API, worker, sweeper and
// dead-letter consumer. The poison queue is the target of the work
// queue's RedrivePolicy (read with GetQueueAttributes); a work queue
// without one, or a dispatcher other than sqs, is logged as event
// poison_queue_not_consumed and skipped. Other DLQ providers get no
// consumers. Each consumer requests sqs.visibility-timeout on receive and
// long-polls for sqs.wait-seconds; Run them until shutdown.
func (s *Set) DeadLetterConsumers(ctx context.Context, c config.Config, h sqsbackend.BatchHandler, log *slog.Logger) ([]*sqsbackend.Consumer, error) {
	if c.DLQProvider != "sqs" {
		return nil, nil
	}
	if s.Clients == nil {
		return nil, fmt.Errorf("providers: dead-letter consumers need the AWS clients")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	urls := []string{c.DLQURL}
	poison := ""
	if c.DispatcherProvider == "sqs" {
		u, err := sqsbackend.RedriveTargetURL(ctx, s.Clients.SQS, c.QueueURL)
		if err != nil {
			return nil, fmt.Errorf("providers: %squeue-url: %w", config.KeyPrefix, err)
		}
		poison = u
	}
	if poison == "" {
		log.LogAttrs(ctx, slog.LevelInfo, "poison_queue_not_consumed", slog.String("event", "poison_queue_not_consumed"),
			slog.String("queue_url", c.QueueURL), slog.String("reason", "the work queue has no redrive policy (or the dispatcher is not sqs)"))
	} else if poison != c.DLQURL {
		urls = append(urls, poison)
	}
	consumers := make([]*sqsbackend.Consumer, len(urls))
	for i, u := range urls {
		consumers[i] = sqsbackend.NewConsumer(s.Clients.SQS, u, h, sqsbackend.ConsumerOptions{
			WaitTimeSeconds: int32(c.SQSWaitSeconds), VisibilityTimeout: c.SQSVisibility, Logger: log,
		})
	}
	return consumers, nil
}

// RecordingDLQ publishes a dead letter with Inner and then stores its
// record with Recorder, as the dead-letter consumer would: the
// dead-letter provider of a process without a consumer (dlq-provider
// log), so that GET /v1/dead-letters lists its dead letters too. A
// record that cannot be stored is logged (dead_letter_record_failed);
// the publish itself stands.
type RecordingDLQ struct {
	Inner    deadletter.Publisher
	Recorder deadletter.Recorder
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Publish implements deadletter.Publisher.
func (d *RecordingDLQ) Publish(ctx context.Context, env deadletter.Envelope) error {
	if err := d.Inner.Publish(ctx, env); err != nil {
		return err
	}
	if _, err := d.Recorder.Put(ctx, deadletter.ExecutionRecord(env, d.Clock.Now())); err != nil && d.Logger != nil {
		d.Logger.LogAttrs(ctx, slog.LevelWarn, "dead_letter_record_failed", slog.String("event", "dead_letter_record_failed"),
			slog.String("execution_id", env.ExecutionID), slog.String("tenant", env.TenantID), slog.String("error", err.Error()))
	}
	return nil
}
