package dynamo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
)

// writeUnits sums the write units DynamoDB reports (ReturnConsumedCapacity
// INDEXES, added to every write by a client middleware): the execution
// table's own and each index's.
type writeUnits struct {
	mu      sync.Mutex
	table   float64
	indexes map[string]float64
	writes  int
}

func (w *writeUnits) add(cs ...types.ConsumedCapacity) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cs {
		w.writes++
		if c.Table != nil && c.Table.CapacityUnits != nil {
			w.table += *c.Table.CapacityUnits
		}
		for name, ix := range c.GlobalSecondaryIndexes {
			if ix.CapacityUnits != nil {
				w.indexes[name] += *ix.CapacityUnits
			}
		}
	}
}

func (w *writeUnits) middleware(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("countWriteUnits", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		switch p := in.Parameters.(type) {
		case *dynamodb.UpdateItemInput:
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
		case *dynamodb.PutItemInput:
			p.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
		}
		out, md, err := next.HandleInitialize(ctx, in)
		if err == nil {
			switch r := out.Result.(type) {
			case *dynamodb.UpdateItemOutput:
				if r.ConsumedCapacity != nil {
					w.add(*r.ConsumedCapacity)
				}
			case *dynamodb.PutItemOutput:
				if r.ConsumedCapacity != nil {
					w.add(*r.ConsumedCapacity)
				}
			}
		}
		return out, md, err
	}), middleware.After)
}

// manualQueue keeps dispatched items for the test to deliver.
type manualQueue struct {
	mu    sync.Mutex
	items []dispatch.Message
}

func (q *manualQueue) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, msgs...)
	return nil
}

func (q *manualQueue) take() []dispatch.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.items
	q.items = nil
	return out
}

type noDLQ struct{}

func (noDLQ) Publish(context.Context, deadletter.Envelope) error { return nil }

type costInput struct {
	Customer string `json:"customer"`
}

// measureUnits runs n executions of a 3-step pipeline (keyed by one
// customer with limit, or unkeyed when limit is 0), chaining off so that
// every step is its own work item, and returns the units they wrote.
func measureUnits(t *testing.T, limit, n int) *writeUnits {
	t.Helper()
	return measurePriorityUnits(t, limit, n, func(int) int { return 0 })
}

// measurePriorityUnits is measureUnits with the i-th execution submitted
// with priority prio(i) (0: none given).
func measurePriorityUnits(t *testing.T, limit, n int, prio func(i int) int) *writeUnits {
	t.Helper()
	model := ddbmodel.New(ddbmodel.Options{Clock: clock.System{}})
	w := &writeUnits{indexes: map[string]float64{}}
	db := dynamodb.NewFromConfig(model.Config(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, w.middleware) })
	names := schema.Prefixed("cost")
	if _, err := provision.CreateTables(context.Background(), db, schema.Tables(names)); err != nil {
		t.Fatal(err)
	}
	st, err := NewStateStore(db, Options{ExecutionTable: names.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	id := func(_ context.Context, _ pipeline.StepInfo, in costInput) (costInput, error) { return in, nil }
	p := pipeline.Pipeline{ID: "cost", Steps: []pipeline.Step{pipeline.NewStep("a", id), pipeline.NewStep("b", id), pipeline.NewStep("c", id)}}
	if limit > 0 {
		p.Concurrency = pipeline.ConcurrencyKey("customer", limit, func(in costInput) string { return in.Customer })
	}
	q := &manualQueue{}
	rt, err := engine.New(engine.Config{ChainMaxSteps: 1, WorkerID: "w-1"}, engine.Deps{
		Registry: pipeline.MustRegistry(p), Store: st, Payloads: NewPayloadStore(db, names.PayloadTable, nil),
		Dispatcher: q, DeadLetter: noDLQ{},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		in, _ := payload.JSON(costInput{Customer: "customer-0001"})
		if _, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "tenant-1", PipelineID: "cost", IdempotencyKey: fmt.Sprintf("order-%04d", i), Input: in, Priority: prio(i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // distinct submission times
	}
	for range 50 {
		msgs := q.take()
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if err := rt.Process(context.Background(), m.Item); err != nil {
				t.Fatal(err)
			}
		}
	}
	return w
}

// TestConcurrencyKeyWriteUnits measures, with DynamoDB's own capacity
// accounting (the model's ReturnConsumedCapacity), the write units of a
// 3-step execution without a key, with a key it finds free, and with a
// key it has to wait for (limit 1, two executions): docs/cost.md quotes
// the log. A pipeline without a key pays exactly what it did.
func TestConcurrencyKeyWriteUnits(t *testing.T) {
	plain := measureUnits(t, 0, 1)
	keyed := measureUnits(t, 5, 1)
	waited := measureUnits(t, 1, 2)
	line := func(name string, w *writeUnits, n int) string {
		return fmt.Sprintf("%s: %d writes, table %.0f units, sweep index %.0f, list index %.0f, wait index %.0f (per execution: table %.1f)",
			name, w.writes, w.table, w.indexes[schema.DueIndexName], w.indexes[schema.ListIndexName], w.indexes[schema.WaitLineIndexName], w.table/float64(n))
	}
	t.Logf("\n%s\n%s\n%s", line("3 steps, no key", plain, 1), line("3 steps, key free", keyed, 1), line("2 x 3 steps, limit 1 (one waits)", waited, 2))
	if plain.indexes[schema.WaitLineIndexName] != 0 {
		t.Errorf("an execution without a key wrote the wait index")
	}
	// A free key: an acquire (the key item's first write) and a release.
	if got, want := keyed.table-plain.table, 2.0; got != want {
		t.Errorf("a key found free cost %.0f more table units, want %.0f (acquire, release)", got, want)
	}
	// A wait: the refused acquire (not counted: an error carries no
	// capacity here), the WAITING_KEY commit, the hand-over at the
	// holder's release, the wake; the wait index in and out.
	if got := waited.indexes[schema.WaitLineIndexName]; got != 2 {
		t.Errorf("one wait wrote the wait index %.0f times, want 2 (in, out)", got)
	}
	// The first wait index, kept for stacks deployed with it (schema
	// WaitIndexName), costs as much again, and nothing without a wait.
	if plain.indexes[schema.WaitIndexName] != 0 || keyed.indexes[schema.WaitIndexName] != 0 || waited.indexes[schema.WaitIndexName] != 2 {
		t.Errorf("the first wait index took %.0f, %.0f and %.0f writes, want 0, 0 and 2",
			plain.indexes[schema.WaitIndexName], keyed.indexes[schema.WaitIndexName], waited.indexes[schema.WaitIndexName])
	}
}

// TestPriorityWriteUnits measures what a priority costs: nothing. The
// priority and the rank are written with the row at submit (a few bytes
// of an item far below a write unit), never again; the same executions
// submitted with priorities write exactly the units they write without,
// keyed or not, waiting or not (the wait index's sort key is the rank,
// written with the row, not a write of its own). docs/cost.md quotes the
// log.
func TestPriorityWriteUnits(t *testing.T) {
	none := func(int) int { return 0 }
	urgentLast := func(i int) int { return 5 - 4*(i%2) } // 5, 1, 5, 1...
	for _, c := range []struct {
		name     string
		limit, n int
	}{{"3 steps, no key", 0, 1}, {"3 steps, key free", 5, 1}, {"3 x 3 steps, limit 1 (two wait)", 1, 3}} {
		plain, prio := measurePriorityUnits(t, c.limit, c.n, none), measurePriorityUnits(t, c.limit, c.n, urgentLast)
		t.Logf("%s: without priorities %d writes, table %.0f units, wait index %.0f; with priorities %d writes, table %.0f units, wait index %.0f",
			c.name, plain.writes, plain.table, plain.indexes[schema.WaitLineIndexName], prio.writes, prio.table, prio.indexes[schema.WaitLineIndexName])
		if plain.writes != prio.writes || plain.table != prio.table || fmt.Sprint(plain.indexes) != fmt.Sprint(prio.indexes) {
			t.Errorf("%s: priorities changed the writes: %d writes %.0f units %v, without %d writes %.0f units %v",
				c.name, prio.writes, prio.table, prio.indexes, plain.writes, plain.table, plain.indexes)
		}
	}
}
