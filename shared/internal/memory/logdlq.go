// The log DLQ (NewLogDLQ) is the built-in dead-letter publisher: it writes each
// envelope as one structured log event. It is the local fallback; it is
// only as durable as the log it writes to.

package memory

import (
	"context"
	"log/slog"

	"github.com/qasync/qasync/shared/deadletter"
)

// LogDLQEvent is the log event name of a published envelope.
const LogDLQEvent = "dead_letter_published"

// LogDLQ logs envelopes at error level.
type LogDLQ struct {
	log *slog.Logger
}

var _ deadletter.Publisher = (*LogDLQ)(nil)

// NewLogDLQ returns a LogDLQ writing to log.
func NewLogDLQ(log *slog.Logger) *LogDLQ { return &LogDLQ{log: log} }

// Publish implements deadletter.Publisher.
func (p *LogDLQ) Publish(ctx context.Context, env deadletter.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.log.LogAttrs(ctx, slog.LevelError, LogDLQEvent,
		slog.String("event", LogDLQEvent),
		slog.String("tenant", env.TenantID),
		slog.String("execution_id", env.ExecutionID),
		slog.String("pipeline", env.PipelineID),
		slog.Int("step_index", env.StepIndex),
		slog.String("step", env.StepName),
		slog.String("transition_key", env.TransitionKey),
		slog.String("terminal_reason", env.TerminalReason),
		slog.String("error_code", env.ErrorCode),
		slog.String("error_message", env.ErrorMessage),
		slog.Int("retries_observed", env.RetriesObserved),
		slog.Time("failed_at", env.FailedAt),
	)
	return nil
}
