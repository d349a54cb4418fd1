package memory_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/deadletter/deadlettertest"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
)

func TestLogDLQConformance(t *testing.T) {
	deadlettertest.Run(t, func(t *testing.T) (deadletter.Publisher, deadlettertest.ReadBack) {
		sink := &logtest.Buffer{}
		pub := memory.NewLogDLQ(slog.New(slog.NewJSONHandler(sink, nil)))
		return pub, func(context.Context, int) ([]deadletter.Envelope, error) {
			type logged struct {
				Tenant          string    `json:"tenant"`
				ExecutionID     string    `json:"execution_id"`
				Pipeline        string    `json:"pipeline"`
				StepIndex       int       `json:"step_index"`
				Step            string    `json:"step"`
				TransitionKey   string    `json:"transition_key"`
				TerminalReason  string    `json:"terminal_reason"`
				ErrorCode       string    `json:"error_code"`
				ErrorMessage    string    `json:"error_message"`
				RetriesObserved int       `json:"retries_observed"`
				FailedAt        time.Time `json:"failed_at"`
			}
			recs, err := logtest.Events[logged](sink, memory.LogDLQEvent)
			if err != nil {
				return nil, err
			}
			envs := make([]deadletter.Envelope, 0, len(recs))
			for _, rec := range recs {
				envs = append(envs, deadletter.Envelope{
					TenantID: rec.Tenant, ExecutionID: rec.ExecutionID, PipelineID: rec.Pipeline,
					StepIndex: rec.StepIndex, StepName: rec.Step, TransitionKey: rec.TransitionKey,
					TerminalReason: rec.TerminalReason, ErrorCode: rec.ErrorCode, ErrorMessage: rec.ErrorMessage,
					RetriesObserved: rec.RetriesObserved, FailedAt: rec.FailedAt,
				})
			}
			return envs, nil
		}
	})
}
