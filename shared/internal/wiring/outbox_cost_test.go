package wiring_test

import (
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
)

// TestDurableLifecycleEventsAddNoWrite measures, with DynamoDB's
// ReturnConsumedCapacity answers, the write units of a 4-step execution
// from its first claim to SUCCEEDED with every lifecycle event type
// opted into and with none: equal (docs/cost.md). On DynamoDB the commit
// is the outbox: the events are derived from the execution table's
// stream by its consumer, and the step writes nothing more.
func TestDurableLifecycleEventsAddNoWrite(t *testing.T) {
	t.Parallel()
	p := costPipeline(4, 100)
	in := map[string]any{"blob": "small"}
	off := measureRunOf(t, func(c *config.Config) { c.EventsTypes = "none" }, p.ID, in, time.Minute, p)
	on := measureRunOf(t, func(c *config.Config) {
		c.EventsTypes, c.EventsSink = "SUBMITTED,STEP_STARTED,STEP_SUCCEEDED,SUCCEEDED,DEAD_LETTERED,REJECTED,CANCELLED,OUTCOME_UNKNOWN", "log"
	}, p.ID, in, time.Minute, p)
	t.Logf("4 steps: events off: submit %.0f+%.0f, run %.0f+%.0f write units; events on: submit %.0f+%.0f, run %.0f+%.0f write units",
		off.submitTable, off.submitIndex, off.runTable, off.runIndex, on.submitTable, on.submitIndex, on.runTable, on.runIndex)
	if on.runTable != off.runTable || on.runIndex != off.runIndex || on.submitTable != off.submitTable || on.submitIndex != off.submitIndex {
		t.Errorf("events on cost %.0f+%.0f (submit %.0f+%.0f) write units, off %.0f+%.0f (submit %.0f+%.0f): want equal",
			on.runTable, on.runIndex, on.submitTable, on.submitIndex, off.runTable, off.runIndex, off.submitTable, off.submitIndex)
	}
}
