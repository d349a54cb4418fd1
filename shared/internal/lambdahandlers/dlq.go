package lambdahandlers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/metrics"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
)

// RecordRetention is how long the dlq function keeps a dead-letter record
// (deadletter.RecordRetention).
const RecordRetention = deadletter.RecordRetention

// MetricDeadLetterRecords is the counter the dlq function emits once per
// new record, with dimension Kind (execution or poison).
const MetricDeadLetterRecords = "DeadLetterRecords"

// DLQ is the dlq function's handler for batches of the dead-letter queue
// and of the work queue's poison queue. Each record's body is examined
// (never logged):
//
//   - a dead-letter envelope (has transitionKey and terminalReason): a
//     deadletter.KindExecution record with ID the transition key is
//     stored, then Runtime.ConfirmDeadLetter marks the execution DLQ if
//     its publisher stopped short of it. Both steps are idempotent, so a
//     second delivery stores nothing and changes nothing.
//   - a work item (moved to the poison queue by the work queue's redrive
//     policy): a deadletter.KindPoison record with ID "poison:" + the
//     message id, the item's ids and the receive count. The execution is
//     left alone: if it is still due, the sweeper dispatches it again.
//   - anything else: a KindPoison record without ids.
//
// Every record is logged as an alert, event "dead_letter_recorded" at
// level error, with kind, tenant, execution_id, transition_key or
// message_id, terminal_reason and created (false on a repeated delivery:
// alert on created=true, or on the metric). The metric
// MetricDeadLetterRecords (dimension Kind) is emitted only when a record
// is created, so it counts distinct dead letters. A nil m emits nothing.
//
// A record that cannot be stored (event "dead_letter_record_failed") or
// whose execution cannot be confirmed (confirm_error in the alert) is
// reported as a batch item failure and delivered again; the handler's
// error is always nil.
// It panics if rec is nil (Boot with RequireRecorder refuses that
// configuration first).
func DLQ(rt *engine.Runtime, rec deadletter.Recorder, m *metrics.EMF, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	if rec == nil {
		panic("lambdahandlers: DLQ: nil dead-letter Recorder")
	}
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		for _, msg := range ev.Records {
			receives, _ := strconv.Atoi(msg.Attributes["ApproximateReceiveCount"])
			if RecordDeadLetter(ctx, rt, rec, m, log, backend.DeadLetterMessage{ID: msg.MessageId, Body: msg.Body, Receives: receives}) != nil {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
			}
		}
		return resp, nil
	}
}

// errDeliverAgain is RecordDeadLetter's error when the message is to be
// delivered again (what went wrong is in the log).
var errDeliverAgain = errors.New("lambdahandlers: dead letter not recorded or not confirmed; deliver it again")

// RecordDeadLetter handles one dead-letter message as DLQ handles each
// record (the same record, confirmation, alert and metric) and returns
// an error when the message is to be delivered again. Consumers of a
// dead-letter queue in a long-running process call it (backend.Env's
// DeadLetter). It panics if rec is nil.
func RecordDeadLetter(ctx context.Context, rt *engine.Runtime, rec deadletter.Recorder, m *metrics.EMF, log *slog.Logger, msg backend.DeadLetterMessage) error {
	if rec == nil {
		panic("lambdahandlers: RecordDeadLetter: nil dead-letter Recorder")
	}
	if log == nil {
		log = slog.Default()
	}
	if !recordDeadLetter(ctx, rt, rec, m, log, msg) {
		return errDeliverAgain
	}
	return nil
}

// recordDeadLetter handles one message and reports whether it is done.
func recordDeadLetter(ctx context.Context, rt *engine.Runtime, rec deadletter.Recorder, m *metrics.EMF, log *slog.Logger, msg backend.DeadLetterMessage) bool {
	now := rt.Now()
	receives := msg.Receives
	r := deadletter.Record{RecordedAt: now, ExpiresAt: now.Add(RecordRetention)}
	// attrs describe the record (never the body); event names follow.
	attrs := []slog.Attr{slog.String("message_id", msg.ID), slog.Int("receive_count", receives)}
	logEvent := func(level slog.Level, event string, extra ...slog.Attr) {
		all := make([]slog.Attr, 0, 1+len(attrs)+len(extra))
		all = append(append(append(all, slog.String("event", event)), attrs...), extra...)
		log.LogAttrs(ctx, level, event, all...)
	}
	var env deadletter.Envelope
	isEnvelope := json.Unmarshal([]byte(msg.Body), &env) == nil && env.TransitionKey != "" && env.TerminalReason != ""
	if isEnvelope {
		r = deadletter.ExecutionRecord(env, now)
		attrs = append(attrs, slog.String("kind", r.Kind), slog.String("tenant", env.TenantID),
			slog.String("execution_id", env.ExecutionID), slog.String("pipeline", env.PipelineID),
			slog.String("step", env.StepName), slog.String("transition_key", env.TransitionKey),
			slog.String("terminal_reason", env.TerminalReason), slog.String("error_code", env.ErrorCode),
			slog.Int("retries_observed", env.RetriesObserved))
	} else {
		r.ID, r.Kind, r.MessageID, r.ReceiveCount = "poison:"+msg.ID, deadletter.KindPoison, msg.ID, receives
		item, err := sqsbackend.Decode(msg.Body)
		if err == nil {
			r.TenantID, r.ExecutionID = item.TenantID, item.ExecutionID
			attrs = append(attrs, slog.String("kind", r.Kind), slog.String("tenant", item.TenantID),
				slog.String("execution_id", item.ExecutionID), slog.String("pipeline", item.PipelineID))
		} else {
			attrs = append(attrs, slog.String("kind", r.Kind), slog.Bool("malformed", true),
				slog.String("decode_error", err.Error()), slog.Int("body_bytes", len(msg.Body)))
		}
	}
	attrs = append(attrs, slog.String("record_id", r.ID))
	created, err := rec.Put(ctx, r)
	if err != nil {
		logEvent(slog.LevelWarn, "dead_letter_record_failed", slog.String("error", err.Error()))
		return false
	}
	if created {
		m.Count(MetricDeadLetterRecords, 1, map[string]string{"Kind": r.Kind})
	}
	attrs = append(attrs, slog.Bool("created", created))
	ok := true
	if isEnvelope {
		// Also on a repeated delivery: the first may have stopped between
		// storing the record and confirming.
		marked, err := rt.ConfirmDeadLetter(ctx, env)
		if err != nil {
			ok = false // delivered again: the record exists, the confirmation is retried
			attrs = append(attrs, slog.String("confirm_error", err.Error()))
		} else {
			attrs = append(attrs, slog.Bool("marked_dlq", marked))
		}
	}
	// The alert is logged once the record is stored, whatever the
	// confirmation did, so that created=true is never lost.
	logEvent(slog.LevelError, "dead_letter_recorded")
	return ok
}
