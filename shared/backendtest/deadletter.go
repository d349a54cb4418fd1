package backendtest

// The dead-letter publisher suite (Provider.DeadLetters): published
// envelopes read back intact, a cancelled context refused.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
)

// deadLetter is envelope i of the dead-letter suites.
func deadLetter(i int) deadletter.Envelope {
	return deadletter.Envelope{
		TenantID: "tenant-a", ExecutionID: fmt.Sprintf("exec-%d", i), PipelineID: "diag.drill",
		StepIndex: 1, StepName: "work", TransitionKey: fmt.Sprintf("exec-%d:1:3", i),
		TerminalReason: "retry_exhausted", ErrorCode: "drill_failure", ErrorMessage: "drill failure on attempt 3 — ünïcode",
		RetriesObserved: 2, FailedAt: time.Date(2026, 11, 29, 10, 0, 0, 5_000_000, time.UTC),
	}
}

// runDeadLetters runs the dead-letter publisher suite on publishers from f.
func runDeadLetters(t *testing.T, f func(*testing.T) (deadletter.Publisher, ReadBack[deadletter.Envelope])) {
	t.Run("PublishedEnvelopesReadBackIntact", func(t *testing.T) {
		t.Parallel()
		pub, read := f(t)
		ctx := context.Background()
		want := map[string]deadletter.Envelope{}
		for i := range 3 {
			env := deadLetter(i)
			want[env.ExecutionID] = env
			if err := pub.Publish(ctx, env); err != nil {
				t.Fatalf("Publish: %v", err)
			}
		}
		got, err := read(ctx, len(want))
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("read back %d envelopes, want %d", len(got), len(want))
		}
		for _, g := range got {
			w := want[g.ExecutionID]
			if !g.FailedAt.Equal(w.FailedAt) {
				t.Errorf("FailedAt %v, want %v", g.FailedAt, w.FailedAt)
			}
			g.FailedAt = w.FailedAt
			if g != w {
				t.Errorf("envelope\n got  %+v\n want %+v", g, w)
			}
		}
	})
	t.Run("CancelledContextRefused", func(t *testing.T) {
		t.Parallel()
		pub, _ := f(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := pub.Publish(ctx, deadLetter(9)); err == nil {
			t.Fatalf("Publish with a cancelled context succeeded")
		}
	})
}
