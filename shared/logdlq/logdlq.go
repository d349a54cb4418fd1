// Package logdlq is the built-in dead-letter publisher: it writes each
// envelope as one structured log event. It is the local fallback; it is
// only as durable as the log it writes to.
package logdlq

import (
	"context"
	"log/slog"

	"github.com/qasync/qasync/shared/deadletter"
)

// Event is the log event name of a published envelope.
const Event = "dead_letter_published"

// Publisher logs envelopes at error level.
type Publisher struct {
	log *slog.Logger
}

var _ deadletter.Publisher = (*Publisher)(nil)

// New returns a Publisher writing to log.
func New(log *slog.Logger) *Publisher { return &Publisher{log: log} }

// Publish implements deadletter.Publisher.
func (p *Publisher) Publish(ctx context.Context, env deadletter.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.log.LogAttrs(ctx, slog.LevelError, Event,
		slog.String("event", Event),
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
