package wiring

import (
	"context"
	"log/slog"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
)

// RecordingDLQ publishes a dead letter with Inner and then stores its
// record with Recorder, as the dead-letter consumer would: the
// dead-letter provider of a process without a consumer (dlq-provider
// log), so that GET /v1/dead-letters lists its dead letters too. A
// record that cannot be stored is logged (dead_letter_record_failed);
// the publish itself stands. Without a Recorder it only publishes.
type RecordingDLQ struct {
	Inner    deadletter.Publisher
	Recorder deadletter.Recorder
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Publish implements deadletter.Publisher.
func (d *RecordingDLQ) Publish(ctx context.Context, env deadletter.Envelope) error {
	if err := d.Inner.Publish(ctx, env); err != nil || d.Recorder == nil {
		return err
	}
	if _, err := d.Recorder.Put(ctx, deadletter.ExecutionRecord(env, d.Clock.Now())); err != nil && d.Logger != nil {
		d.Logger.LogAttrs(ctx, slog.LevelWarn, "dead_letter_record_failed", slog.String("event", "dead_letter_record_failed"),
			slog.String("execution_id", env.ExecutionID), slog.String("tenant", env.TenantID), slog.String("error", err.Error()))
	}
	return nil
}
