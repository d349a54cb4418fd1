package dynamo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// measureRateUnits runs n executions of a 3-step pipeline (with the rate
// limit rl, nil for none; its key is the customer), chaining off so that
// every step is its own work item, on a fake clock moved a second between
// deliveries, and returns the units they wrote.
func measureRateUnits(t *testing.T, rl *pipeline.RateLimit, n int) *writeUnits {
	t.Helper()
	clk := clock.NewFake(time.Now().Truncate(time.Second))
	model := ddbmodel.New(ddbmodel.Options{Clock: clk})
	w := &writeUnits{indexes: map[string]float64{}}
	db := dynamodb.NewFromConfig(model.Config(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, w.middleware) })
	names := schema.Prefixed("cost")
	if _, err := provision.CreateTables(context.Background(), db, schema.Tables(names)); err != nil {
		t.Fatal(err)
	}
	st, err := NewStateStore(db, Options{ExecutionTable: names.ExecutionTable, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	id := func(_ context.Context, _ pipeline.StepInfo, in costInput) (costInput, error) { return in, nil }
	p := pipeline.Pipeline{ID: "cost", Steps: []pipeline.Step{pipeline.NewStep("a", id), pipeline.NewStep("b", id), pipeline.NewStep("c", id)},
		RateLimit: rl}
	q := &manualQueue{}
	rt, err := engine.New(engine.Config{ChainMaxSteps: 1, WorkerID: "w-1"}, engine.Deps{
		Registry: pipeline.MustRegistry(p), Store: st, Payloads: NewPayloadStore(db, names.PayloadTable, nil),
		Dispatcher: q, DeadLetter: noDLQ{}, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []store.Key
	for i := range n {
		in, _ := payload.JSON(costInput{Customer: "customer-0001"})
		res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "tenant-1", PipelineID: "cost", IdempotencyKey: fmt.Sprintf("order-%04d", i), Input: in})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, res.Execution.Key())
	}
	var held []dispatch.Message
	for range 120 {
		held = append(held, q.take()...)
		var keep []dispatch.Message
		for _, m := range held {
			var ra *dispatch.RetryAfterError
			if err := rt.Process(context.Background(), m.Item); errors.As(err, &ra) {
				keep = append(keep, m)
			} else if err != nil {
				t.Fatal(err)
			}
		}
		held = keep
		clk.Advance(time.Second)
	}
	for _, k := range keys {
		if e, err := st.Get(context.Background(), k); err != nil || e.Status != store.Succeeded {
			t.Fatalf("%s: %s (%v)", k.ExecutionID, e.Status, err)
		}
	}
	return w
}

// TestRateLimitWriteUnits measures, with DynamoDB's own capacity
// accounting (the model's ReturnConsumedCapacity), the write units of a
// 3-step execution without a rate limit, with a limit on one step whose
// bucket has room, and with one whose step waits for its turn (1 per
// 10s, burst 1, two executions): docs/cost.md quotes the log. A pipeline
// without a limit pays exactly what it did; a limited step that runs at
// once pays one unit (the bucket's write); one that waits pays the
// bucket's write, its hand-back and the sweep index move.
func TestRateLimitWriteUnits(t *testing.T) {
	plain := measureRateUnits(t, nil, 1)
	keyless := measureUnits(t, 0, 1) // the concurrency test's baseline: the same pipeline
	free := measureRateUnits(t, pipeline.RateLimitKey("api", 1, 10*time.Second, 1, func(in costInput) string { return in.Customer }, "b"), 1)
	every := measureRateUnits(t, pipeline.NewRateLimit("api", 100, time.Second, 10), 1)
	waited := measureRateUnits(t, pipeline.RateLimitKey("api", 1, 10*time.Second, 1, func(in costInput) string { return in.Customer }, "b"), 2)
	line := func(name string, w *writeUnits, n int) string {
		return fmt.Sprintf("%s: %d writes, table %.0f units, sweep index %.0f, list index %.0f (per execution: table %.1f)",
			name, w.writes, w.table, w.indexes[schema.DueIndexName], w.indexes[schema.ListIndexName], w.table/float64(n))
	}
	t.Logf("\n%s\n%s\n%s\n%s", line("3 steps, no limit", plain, 1), line("3 steps, 1 limited, bucket has room", free, 1),
		line("3 steps, all limited, bucket has room", every, 1), line("2 x 3 steps, 1 limited, 1 per 10s (one waits)", waited, 2))
	if plain.table != keyless.table || plain.writes != keyless.writes {
		t.Errorf("a pipeline without a limit wrote %.0f units in %d writes, the same pipeline before %.0f in %d", plain.table, plain.writes, keyless.table, keyless.writes)
	}
	if got := free.table - plain.table; got != 1 {
		t.Errorf("one limited step with room cost %.0f more table units, want 1 (the bucket's write)", got)
	}
	if got := every.table - plain.table; got != 3 {
		t.Errorf("three limited steps with room cost %.0f more table units, want 3", got)
	}
	// The second execution's limited step: its reservation (one bucket
	// write, the first guess right), its hand-back (one row write), no
	// second reservation when it comes back.
	if got := waited.table - 2*free.table; got != 1 {
		t.Errorf("a limited step that waited cost %.0f table units more than one that did not, want 1 (the hand-back)", got)
	}
	if got := waited.indexes[schema.DueIndexName] - 2*free.indexes[schema.DueIndexName]; got != 2 {
		t.Errorf("a limited step that waited wrote the sweep index %.0f more times, want 2 (in at its hand-back, out at its claim)", got)
	}
}
