package crashtest

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// TestCrashFreeReference: the chaos run's expectations come from
// reference `qasync serve` processes, not from the example pipelines
// (which the library never imports): every job gets the outcome its input
// dictates, each SUCCEEDED one the reference's result (a checkout's for
// its order, a drill's with its echo), and the drill's two definitions
// their steps by pipelineVersion. It needs the qasync binary only, no
// local stack.
func TestCrashFreeReference(t *testing.T) {
	t.Parallel()
	jobs, err := chaosJobs(7, 40)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := crashFree(jobs, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var versions [][]string
	for v, steps := range defs.steps {
		versions = append(versions, steps)
		if defs.name(v) == v {
			t.Errorf("definition %s has no short name", v)
		}
	}
	slices.SortFunc(versions, func(a, b []string) int { return len(a) - len(b) })
	want := [][]string{{DrillStepPrepare, DrillStepWork, DrillStepFinish}, {DrillStepPrepare, DrillStepWork, "verify", DrillStepFinish}}
	if !slices.EqualFunc(versions, want, slices.Equal) {
		t.Errorf("definitions' steps %v, want %v", versions, want)
	}
	succeeded, dead := 0, 0
	for _, j := range jobs {
		if j.status != "SUCCEEDED" {
			dead++
			if j.result != nil {
				t.Errorf("job %d (%s) expected %s has a result %s", j.i, j.body, j.status, j.result)
			}
			continue
		}
		succeeded++
		switch j.pipelineID {
		case CheckoutID:
			var o Order
			var r CheckoutResult
			if json.Unmarshal(j.body, &o) != nil || json.Unmarshal(j.result, &r) != nil || r.OrderID != o.OrderID ||
				r.Status != CheckoutStatusDeliveryScheduled || r.PaymentID == "" || r.DeliveryID == "" {
				t.Errorf("checkout %d (%s): reference result %s", j.i, j.body, j.result)
			}
		case DrillID:
			var d Drill
			var r DrillResult
			if json.Unmarshal(j.body, &d) != nil || json.Unmarshal(j.result, &r) != nil || !bytes.Equal(r.Echo, d.Echo) ||
				len(r.Data) != d.ResultBytes || r.WorkAttempt != j.minAttempt {
				t.Errorf("drill %d (%s): reference result %s", j.i, j.body, j.result)
			}
		}
	}
	if succeeded == 0 || dead == 0 {
		t.Errorf("%d jobs expected to succeed and %d to be dead-lettered: the draw covers neither", succeeded, dead)
	}
}
