package wiring_test

import (
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/pipeline"
)

// requestsOf sums the requests of one service whose operation names start
// with one of ops (all of the service's when none).
func requestsOf(reqs map[string]int, service string, ops ...string) int {
	n := 0
	for name, c := range reqs {
		op, ok := strings.CutPrefix(name, service+".")
		if !ok {
			continue
		}
		if len(ops) == 0 {
			n += c
			continue
		}
		for _, p := range ops {
			if strings.HasPrefix(op, p) {
				n += c
				break
			}
		}
	}
	return n
}

// dynamoWrites counts DynamoDB write requests.
func dynamoWrites(reqs map[string]int) int {
	return requestsOf(reqs, "DynamoDB", "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
}

// handOvers counts the SQS requests that move work: sends and deletes
// (receives and visibility changes follow the poller's timing, not the
// work).
func handOvers(reqs map[string]int) int {
	return requestsOf(reqs, "SQS", "SendMessage", "DeleteMessage")
}

// TestFanOutCost measures a map of 120 children (30 in flight, each a
// one-step pipeline; two count groups) on DynamoDB Local with
// ReturnConsumedCapacity, against the same work as 120 separate
// executions of the child pipeline and the parent's steps without the
// map: what a child costs beyond an ordinary execution (its create at the
// fan-out instead of a submit, its release, its count) and what the
// parent's waiting adds. The lease is the default 30 s: the fan-out's
// creates (DynamoDB Local answers one write at a time) must not outlast
// its renewals, which would measure a takeover instead
// (TestMapFanOutSlowerThanItsLease in the engine covers that path).
func TestFanOutCost(t *testing.T) {
	t.Parallel()
	const n, inFlight = 120, 30
	kid := costPipeline(1, 100)
	kid.ID = "p.kid"
	parent := pipeline.Pipeline{ID: "p.fan", Steps: []pipeline.Step{
		pipeline.Map("fan", "p.kid", pipeline.MapOptions{MaxInFlight: inFlight}),
		costPipeline(1, 100).Steps[0],
	}}
	elems := make([]map[string]string, n)
	for i := range elems {
		elems[i] = map[string]string{"blob": strings.Repeat("i", 100)}
	}
	lease := func(c *config.Config) { c.Lease = 30 * time.Second }
	m := measureRunOf(t, lease, parent.ID, elems, 2*time.Minute, parent, kid)
	one := measureRun(t, kid, 100)
	plain := measureRun(t, costPipeline(2, 100), 100)

	// Per child beyond a separate execution of the child pipeline (its
	// submit included: a put of the row), the parent's own steps taken out.
	per := func(mapped, plainPart, childPart float64) float64 { return (mapped-plainPart)/n - childPart }
	units := per(m.submitTable+m.runTable+m.submitIndex+m.runIndex,
		plain.submitTable+plain.runTable+plain.submitIndex+plain.runIndex,
		one.submitTable+one.runTable+one.submitIndex+one.runIndex)
	writes := per(float64(dynamoWrites(m.runRequests)), float64(dynamoWrites(plain.runRequests)), float64(dynamoWrites(one.runRequests)+1))
	sqs := per(float64(handOvers(m.runRequests)), float64(handOvers(plain.runRequests)), float64(handOvers(one.runRequests)+1))
	t.Logf("map of %d (%d in flight): submit %.0f + %.0f, run %.0f table + %.0f index write units; requests %v", n, inFlight, m.submitTable, m.submitIndex, m.runTable, m.runIndex, m.runRequests)
	t.Logf("one child alone: submit %.0f + %.0f, run %.0f + %.0f; requests %v", one.submitTable, one.submitIndex, one.runTable, one.runIndex, one.runRequests)
	t.Logf("the parent's steps without the map: submit %.0f + %.0f, run %.0f + %.0f; requests %v", plain.submitTable, plain.submitIndex, plain.runTable, plain.runIndex, plain.runRequests)
	t.Logf("per child beyond a separate execution: %.2f write units, %.2f write requests, %.2f SQS sends and deletes", units, writes, sqs)
	// Measured: 1.82 write requests (the create stands for the submit; the
	// count; the release of 90 of the 120; the parent's park, wake-up and
	// collect shared), 2.38 write units, 0.02 SQS requests (the parent's
	// wake-up shared: a child's send and delete are a separate
	// execution's). The budgets leave the parent's lease renewals room.
	if writes > 2 || units > 2.5 {
		t.Errorf("a child costs %.2f write requests and %.2f write units beyond a separate execution, budget 2 and 2.5", writes, units)
	}
	if sqs > 0.1 {
		t.Errorf("a child costs %.2f SQS sends and deletes beyond a separate execution, budget 0.1", sqs)
	}
}
