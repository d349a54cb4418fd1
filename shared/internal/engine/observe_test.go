package engine_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

func TestObserversHearTerminalOutcomesWithLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry, SweepGrace: time.Second},
			threeSteps(), pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", true)}})
		ok := h.submit("p.three", "k1", map[string]any{})
		bad := h.submit("p.bad", "k2", map[string]any{})
		time.Sleep(time.Minute)
		synctest.Wait()
		h.sweep()
		succeeded := h.observed(engine.EventSucceeded)
		if len(succeeded) != 1 || succeeded[0].Execution.ExecutionID != ok.ExecutionID || succeeded[0].Latency != 0 {
			// No time passes in the bubble while an execution without retries runs.
			t.Fatalf("succeeded events = %+v", succeeded)
		}
		dead := h.observed(engine.EventDeadLettered)
		if len(dead) != 1 || dead[0].Execution.ExecutionID != bad.ExecutionID || dead[0].Latency != 3*time.Second {
			t.Fatalf("dead-lettered events = %+v (want latency 3s: retries after 1s and 2s)", dead)
		}
		if n := len(h.observed(engine.EventRetryScheduled)); n != 2 {
			t.Errorf("%d retry events, want 2", n)
		}
		if n := len(h.observed(engine.EventTransitionCommitted)); n != 3+3 {
			t.Errorf("%d transition events, want 6", n)
		}
		if n := len(h.observed(engine.EventSweepCompleted)); n != 1 {
			t.Errorf("%d sweep events, want 1", n)
		}
	})
}

// TestConfirmDeadLetter: the consumer of the DLQ queue marks an execution
// whose publisher died between publishing and marking; a second delivery
// changes nothing.
func TestConfirmDeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", false)}})
		h.dlq.failNext = 1 // the worker's publish fails: FAILED, pending
		e := h.submit("p.bad", "k1", map[string]any{})
		synctest.Wait()
		row := h.get(e.ExecutionID)
		if row.Status != store.Failed || !row.DLQPending {
			t.Fatalf("row = %+v", row)
		}
		env := deadletter.Envelope{TenantID: row.TenantID, ExecutionID: row.ExecutionID, TransitionKey: row.LastTransitionKey}
		ctx := context.Background()
		stale := env
		stale.TransitionKey = row.ExecutionID + ":0:9"
		if changed, err := h.rt.ConfirmDeadLetter(ctx, stale); err != nil || changed {
			t.Fatalf("an envelope of another transition changed the row: %v %v", changed, err)
		}
		if changed, err := h.rt.ConfirmDeadLetter(ctx, env); err != nil || !changed {
			t.Fatalf("ConfirmDeadLetter = %v, %v", changed, err)
		}
		if got := h.get(e.ExecutionID); got.Status != store.DLQ || got.DLQPending {
			t.Fatalf("after confirm: %+v", got)
		}
		if changed, err := h.rt.ConfirmDeadLetter(ctx, env); err != nil || changed {
			t.Fatalf("second delivery: %v %v", changed, err)
		}
		missing := env
		missing.ExecutionID = "gone"
		if changed, err := h.rt.ConfirmDeadLetter(ctx, missing); err != nil || changed {
			t.Fatalf("unknown execution: %v %v", changed, err)
		}
	})
}

// confirmingDLQ plays a dead-letter consumer so fast that it marks the
// execution DLQ before the publisher's own update.
type confirmingDLQ struct{ rt **engine.Runtime }

func (c confirmingDLQ) Publish(ctx context.Context, env deadletter.Envelope) error {
	_, err := (*c.rt).ConfirmDeadLetter(ctx, env)
	return err
}

// TestConsumerMarkingFirstIsNotAFailure: when the consumer marks the row
// DLQ before the publisher does, the publisher's conflict is success.
func TestConsumerMarkingFirstIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", false)}})
		rt := h.rt
		fast, err := engine.New(engine.Config{Retry: fastRetry, WorkerID: "worker-1"}, engine.Deps{
			Registry: rt.Registry(), Store: rt.Store(), Payloads: rt.Payloads(), Dispatcher: h, Logger: rt.Logger(),
			DeadLetter: confirmingDLQ{&h.rt},
		})
		if err != nil {
			t.Fatal(err)
		}
		h.rt = fast
		e := h.submit("p.bad", "k1", map[string]any{})
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.DLQ {
			t.Fatalf("row = %+v", got)
		}
		if strings.Contains(h.logs.String(), "dlq_mark_failed") {
			t.Fatal("a consumer marking the row first was logged as a failure")
		}
	})
}
