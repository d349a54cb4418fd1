package reject_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/reject"
)

// TestMemoryConformance runs the reject suite on the memory provider.
func TestMemoryConformance(t *testing.T) {
	backendtest.Exercise(t, backendtest.Provider{Rejects: func(t *testing.T) (reject.Publisher, backendtest.ReadBack[reject.Envelope]) {
		m := reject.NewMemory()
		return m, func(context.Context, int) ([]reject.Envelope, error) { return m.Envelopes(), nil }
	}})
}

// TestLogConformance runs the reject suite on the log provider, read back
// from the captured log lines.
func TestLogConformance(t *testing.T) {
	backendtest.Exercise(t, backendtest.Provider{Rejects: func(t *testing.T) (reject.Publisher, backendtest.ReadBack[reject.Envelope]) {
		sink := &logtest.Buffer{}
		pub := reject.NewLog(slog.New(slog.NewJSONHandler(sink, nil)))
		return pub, func(context.Context, int) ([]reject.Envelope, error) {
			type logged struct {
				Tenant        string    `json:"tenant"`
				ExecutionID   string    `json:"execution_id"`
				Pipeline      string    `json:"pipeline"`
				StepIndex     int       `json:"step_index"`
				Step          string    `json:"step"`
				Scope         string    `json:"scope"`
				Attempt       int       `json:"attempt"`
				TransitionKey string    `json:"transition_key"`
				ErrorCode     string    `json:"error_code"`
				ErrorMessage  string    `json:"error_message"`
				Fingerprint   string    `json:"fingerprint"`
				ItemCount     int       `json:"item_count"`
				Payload       []byte    `json:"payload"`
				RejectedAt    time.Time `json:"rejected_at"`
			}
			recs, err := logtest.Events[logged](sink, reject.EventPublished)
			if err != nil {
				return nil, err
			}
			envs := make([]reject.Envelope, 0, len(recs))
			for _, rec := range recs {
				envs = append(envs, reject.Envelope{
					TenantID: rec.Tenant, ExecutionID: rec.ExecutionID, PipelineID: rec.Pipeline,
					StepIndex: rec.StepIndex, StepName: rec.Step, Scope: reject.Scope(rec.Scope), Attempt: rec.Attempt,
					TransitionKey: rec.TransitionKey, ErrorCode: rec.ErrorCode, ErrorMessage: rec.ErrorMessage,
					Fingerprint: rec.Fingerprint, ItemCount: rec.ItemCount, Payload: rec.Payload, RejectedAt: rec.RejectedAt,
				})
			}
			return envs, nil
		}
	}})
}
