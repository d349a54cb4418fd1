package dynamo

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// partitionLimit is what DynamoDB serves one partition (and so at most
// one partition key value): 1,000 write units per second.
const partitionLimit = 1000

// capacityRow is one line of the capacity model: a table or index, the
// write units per second it takes at a target step rate, the partition
// key values the layout spreads them over, and the busiest value's share.
type capacityRow struct {
	name        string
	perSecond   float64 // write units per second on the table or index
	keyValues   int     // distinct partition key values written in one second
	busiest     float64 // write units per second on the busiest value
	needsValues int     // values needed at partitionLimit each
}

// capacityModel lays out one second of executions of one tenant at
// stepsPerSecond, each execution stepsPerExecution steps long (1 is the
// worst case for the indexes: every step a whole execution), with the
// runtime's real execution ids and the shard count the configuration
// derives, and counts the write units per partition key value.
func capacityModel(stepsPerSecond, stepsPerExecution int) []capacityRow {
	executions := stepsPerSecond / stepsPerExecution
	shards := schema.DueShardsFor(stepsPerSecond)
	rowWrites := float64(2 + stepsPerExecution) // create, first claim, one commit per step (each claiming the next)
	perPK, perDue, perList := map[string]float64{}, map[int]float64{}, map[string]float64{}
	for i := range executions {
		k := store.Key{TenantID: "one-tenant", ExecutionID: engine.ExecutionSlot("one-tenant", fmt.Sprintf("order-%d", i))}
		perPK[pk(k)] += rowWrites
		perDue[dueShard(k.ExecutionID, shards)] += 2 // in at submit, out at the terminal commit
		perList[listKey(k, shards)]++                // once, at submit
	}
	row := func(name string, counts []float64) capacityRow {
		r := capacityRow{name: name, keyValues: len(counts)}
		for _, c := range counts {
			r.perSecond += c
			r.busiest = math.Max(r.busiest, c)
		}
		r.needsValues = int(math.Ceil(r.perSecond / partitionLimit))
		return r
	}
	values := func(m any) []float64 {
		var out []float64
		switch m := m.(type) {
		case map[string]float64:
			for _, v := range m {
				out = append(out, v)
			}
		case map[int]float64:
			for _, v := range m {
				out = append(out, v)
			}
		}
		return out
	}
	return []capacityRow{
		row("execution table (pk)", values(perPK)),
		row("sweep index (ds)", values(perDue)),
		row("list index (lk)", values(perList)),
	}
}

// TestOneTenantSpreadsAt10000StepsPerSecond: at 10,000 steps per second of
// a single tenant, no partition key value of the execution table or its
// indexes takes more than DynamoDB's 1,000 write units per second, and each
// spreads over at least as many values as the load needs. It prints the
// capacity model docs/cost.md quotes.
func TestOneTenantSpreadsAt10000StepsPerSecond(t *testing.T) {
	var b strings.Builder
	b.WriteString("| steps/s | steps per execution | table or index | write units/s | partition key values | busiest value, units/s | values needed at 1,000/s |\n|---|---|---|---|---|---|---|\n")
	for _, steps := range []int{1, 4} {
		for _, r := range capacityModel(10_000, steps) {
			fmt.Fprintf(&b, "| 10,000 | %d | %s | %.0f | %d | %.0f | %d |\n", steps, r.name, r.perSecond, r.keyValues, r.busiest, r.needsValues)
			if r.keyValues < r.needsValues {
				t.Errorf("%d-step executions: %s spreads over %d key values, the load needs %d", steps, r.name, r.keyValues, r.needsValues)
			}
			if r.busiest > partitionLimit {
				t.Errorf("%d-step executions: the busiest %s value takes %.0f write units/s, over DynamoDB's %d per partition", steps, r.name, r.busiest, partitionLimit)
			}
		}
	}
	t.Logf("capacity model:\n%s", b.String())
}
