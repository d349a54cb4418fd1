package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
)

// TestLogsCarryNoPayloadBytes runs every kind of transition (success,
// retry, dead letter, redrive, sweep, chunked payloads) with a marker in
// every payload, and checks the marker never reaches the log while the
// named events and their identifying keys do.
func TestLogsCarryNoPayloadBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const marker = "SECRET-PAN-4111111111111111"
		flaky := step("flaky", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if info.Attempt == 1 {
				return nil, pipeline.Retryable("flaky", context.DeadlineExceeded)
			}
			in["out"] = marker + strings.Repeat("y", 2048)
			return in, nil
		})
		h := newHarness(t, engine.Config{Retry: fastRetry, InlineBudget: 1024, SweepGrace: time.Second},
			pipeline.Pipeline{ID: "p.ok", Steps: []pipeline.Step{appendStep("a"), flaky}},
			pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", false)}})
		ok := h.submit("p.ok", "k1", map[string]any{"card": marker, "pad": strings.Repeat("x", 4096)})
		h.submit("p.ok", "k1", map[string]any{"card": marker, "pad": strings.Repeat("x", 4096)}) // duplicate
		h.dlq.failNext = 1
		bad := h.submit("p.bad", "k2", map[string]any{"card": marker})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		h.sweep()
		if _, err := h.rt.Redrive(context.Background(), bad.Key(), "operator retry", nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, _, err := h.rt.Result(context.Background(), ok.Key()); err != nil {
			t.Fatal(err)
		}

		logs := h.logs.String()
		if strings.Contains(logs, marker) || strings.Contains(logs, "xxxxxxxx") || strings.Contains(logs, "yyyyyyyy") {
			t.Fatal("payload bytes appear in the log")
		}
		events := map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(logs))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("log line is not JSON: %v", err)
			}
			ev, _ := rec["event"].(string)
			events[ev] = true
			for k := range rec {
				if k != strings.ToLower(k) || strings.Contains(k, "-") {
					t.Errorf("log key %q is not snake_case", k)
				}
			}
			if ev == "transition_committed" {
				for _, k := range []string{"execution_id", "tenant", "pipeline", "step", "attempt", "transition_key"} {
					if _, ok := rec[k]; !ok {
						t.Errorf("transition_committed lacks %s: %v", k, rec)
					}
				}
			}
		}
		for _, ev := range []string{"execution_submitted", "execution_deduplicated", "lease_claimed", "transition_committed",
			"retry_scheduled", "execution_dead_lettered", "dlq_publish_failed", "sweep_completed", "execution_redriven", "execution_succeeded"} {
			if !events[ev] {
				t.Errorf("no %s event logged", ev)
			}
		}
	})
}
