package memory_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// TestConformance runs every seam's suite on the in-memory provider: the
// state and payload stores, the effect log, the dead-letter recorder, the
// in-process dispatcher and the log DLQ (read back from its log lines).
func TestConformance(t *testing.T) {
	records := memory.NewDeadLetters(clock.System{}) // shared: the suite's record IDs are unique
	backendtest.Exercise(t, backendtest.Provider{
		State:    func(t *testing.T, c clock.Clock) store.Store { return memory.NewStateStore(c) },
		Payloads: func(t *testing.T) payload.Store { return memory.NewPayloadStore(clock.System{}) },
		Effects:  func(t *testing.T, c clock.Clock) effect.Log { return memory.NewEffects(c) },
		Recorder: func(*testing.T) deadletter.Recorder { return records },
		Dispatcher: func(t *testing.T, h dispatch.Handler) dispatch.Dispatcher {
			d := memory.NewDispatcher(h, memory.DispatcherOptions{Workers: 4, RedeliveryDelay: 20 * time.Millisecond})
			t.Cleanup(func() { _ = d.Close(context.Background()) })
			return d
		},
		DeadLetters: newLogDLQ,
		History: func(t *testing.T, c clock.Clock) (store.Store, history.Reader) {
			s := memory.NewStateStore(c)
			return s, s
		},
	})
}

// newLogDLQ returns a log DLQ writing to a buffer and a read-back parsing
// its published events.
func newLogDLQ(*testing.T) (deadletter.Publisher, backendtest.ReadBack[deadletter.Envelope]) {
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
}
