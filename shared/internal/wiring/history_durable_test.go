package wiring_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// slowPipeline has steps steps that each take pause.
func slowPipeline(steps int, pause time.Duration) pipeline.Pipeline {
	p := pipeline.Pipeline{ID: "p.history"}
	for i := range steps {
		p.Steps = append(p.Steps, pipeline.NewStep(fmt.Sprintf("step-%d", i), func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			time.Sleep(pause)
			return in, nil
		}))
	}
	return p
}

// feedCost is what the history feed consumed, measured on its own
// clients.
type feedCost struct {
	pageUnits, positionUnits float64
	pages, pagePuts          int
	requests                 map[string]int
}

// historyFeedRun runs executions executions of a steps-step pipeline
// (each step taking pause) on a fresh durable deployment, with the
// history feed on clients of its own: polling every 100 ms while they
// run (batched false: a batch holds what a tenth of a second wrote), or
// once after they all ended (batched true: one batch holds whole
// executions, as a batching window longer than an execution does). It
// checks every execution's history through the runtime and that the
// runtime itself wrote exactly what it writes without a history. The
// lease is ten minutes, so that no step, however slow the machine, has
// its lease renewed (a renewal is a write of its own).
func historyFeedRun(t *testing.T, steps, executions int, pause time.Duration, batched bool) feedCost {
	t.Helper()
	runMeter := awsclient.NewCapacityMeter()
	p := slowPipeline(steps, pause)
	d := openDurableWith(t, func(c *config.Config) { c.Lease = 10 * time.Minute }, []func(*middleware.Stack) error{runMeter.APIOption}, nil, p)
	feedMeter, feedCounter := awsclient.NewCapacityMeter(), awsclient.NewCounter()
	var positions atomic.Int64
	feedClients, err := awsclient.Load(context.Background(), feedMeter.APIOption, feedCounter.APIOption, countPositions(&positions))
	if err != nil {
		t.Fatal(err)
	}
	state, err := dynamo.NewStateStore(feedClients.DynamoDB, dynamo.Options{ExecutionTable: d.names.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dynamo.NewHistory(feedClients.DynamoDB, state, dynamo.HistoryOptions{Table: d.names.HistoryTable})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := dynamo.NewStreamFeed(feedClients.DynamoDBStreams, feedClients.DynamoDB, h,
		dynamo.StreamOptions{ExecutionTable: d.names.ExecutionTable, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fed := make(chan struct{})
	if batched {
		close(fed)
	} else {
		go func() { defer close(fed); _ = feed.Run(ctx) }()
	}
	runMeter.Reset()
	var subs []store.Execution
	for i := range executions {
		subs = append(subs, d.submit(p.ID, fmt.Sprintf("k-%d", i), map[string]any{"n": i}))
	}
	d.start()
	for _, e := range subs {
		d.await(e, store.Succeeded, time.Minute)
	}
	d.stop()
	cancel()
	<-fed
	if batched {
		time.Sleep(time.Second) // the stream holds every record by now
	}
	// Read what the feed has not read yet (all of it when batched), until
	// every history is complete.
	want := strings.Join(chainedHistory(steps), " ")
	complete := func() bool {
		for _, e := range subs {
			evs, err := d.set.Runtime.History(context.Background(), e.Key())
			if err != nil {
				t.Fatal(err)
			}
			if historyOf(evs) != want {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !complete(); {
		if time.Now().After(deadline) {
			break
		}
		if _, err := feed.Poll(context.Background()); err != nil {
			t.Fatalf("Poll: %v", err)
		}
	}
	// The runtime wrote the rows as it does without a history (the
	// submit, one claim and one commit per step, and once per process the
	// table's meta item) and nothing else.
	snap := runMeter.Snapshot()
	if got, want := snap.TableWrite[d.names.ExecutionTable], float64(1+executions*(2+steps)); got != want {
		t.Errorf("the runtime wrote %.0f units to the execution table, want %.0f (one per submit, claim and commit, and the meta item)", got, want)
	}
	if got := snap.TableWrite[d.names.HistoryTable]; got != 0 {
		t.Errorf("the runtime wrote %.0f units to the history table, want 0", got)
	}
	for _, e := range subs {
		evs, err := d.set.Runtime.History(context.Background(), e.Key())
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			if ev.Seq != i+1 {
				t.Errorf("%s: event %d has seq %d", e.ExecutionID, i, ev.Seq)
			}
		}
		if got := historyOf(evs); got != want {
			t.Errorf("history of %s:\n  %s\nwant\n  %s", e.ExecutionID, got, want)
		}
	}
	fs := feedMeter.Snapshot()
	// Positions and pages share the history table: a position is one
	// small unconditional PutItem (one unit), the other PutItems are pages
	// (a page written again whose condition refuses it costs no unit).
	cost := feedCost{requests: feedCounter.Snapshot(), pages: pagesWritten(t, d, subs)}
	cost.positionUnits = float64(positions.Load())
	cost.pagePuts = cost.requests["DynamoDB.PutItem"] - int(positions.Load())
	cost.pageUnits = fs.TableWrite[d.names.HistoryTable] - cost.positionUnits
	return cost
}

// countPositions counts the stream feed's position writes (PutItem of
// the "#stream" items).
func countPositions(n *atomic.Int64) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countPositions",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if p, ok := in.Parameters.(*dynamodb.PutItemInput); ok {
					if pk, _ := p.Item["pk"].(*types.AttributeValueMemberS); pk != nil && pk.Value == "#stream" {
						n.Add(1)
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

// historyOf is a history's types.
func historyOf(evs []history.Event) string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type)
	}
	return strings.Join(out, " ")
}

// pagesWritten counts the pages of the executions.
func pagesWritten(t *testing.T, d *durable, subs []store.Execution) int {
	t.Helper()
	n := 0
	for _, e := range subs {
		n += countPages(t, d, e.Key())
	}
	return n
}

// chainedHistory is the history of a run of steps chained steps.
func chainedHistory(steps int) []string {
	out := []string{string(history.Submitted), string(history.StepStarted)}
	for i := range steps {
		out = append(out, string(history.StepSucceeded))
		if i < steps-1 {
			out = append(out, string(history.StepStarted))
		}
	}
	return append(out, string(history.Succeeded))
}

// TestDurableHistoryFeedCost measures, on DynamoDB Local, what the
// stream-fed history costs: nothing on a step's path (the runtime's
// writes are unchanged), and, off the path, the feed's page writes (one
// page per execution per batch), position writes (one per shard per
// batch) and requests, per step, for a feed that keeps up write by write
// and for one whose batches hold whole executions. Every execution's
// history reads back complete through Runtime.History. docs/cost.md's
// section quotes the log.
func TestDurableHistoryFeedCost(t *testing.T) {
	t.Parallel()
	const executions = 5
	for _, steps := range []int{4, 10} {
		// Steps of 300 ms: the 100 ms feed reads each row write in a batch
		// of its own (a page per write: the worst case).
		worst := historyFeedRun(t, steps, executions, 300*time.Millisecond, false)
		best := historyFeedRun(t, steps, executions, 0, true)
		n := float64(executions * steps)
		for name, c := range map[string]feedCost{"write by write": worst, "whole executions per batch": best} {
			t.Logf("%d-step executions, feed %s: %d pages (%d page writes), %.0f units (%.2f a step), positions %.0f units (%.2f a step), requests %v",
				steps, name, c.pages, c.pagePuts, c.pageUnits, c.pageUnits/n, c.positionUnits, c.positionUnits/n, c.requests)
			// A page write is at most one unit, however many events it holds.
			if c.pageUnits > float64(c.pagePuts) {
				t.Errorf("%d steps, %s: %d pages, %d page writes took %.0f units, want at most one a write", steps, name, c.pages, c.pagePuts, c.pageUnits)
			}
		}
		// Write by write: at most one page a row write.
		if max := executions * (2 + steps); worst.pages > max {
			t.Errorf("%d steps, write by write: %d pages, want at most %d (one a row write)", steps, worst.pages, max)
		}
		// Whole executions: a page an execution (two when the stream
		// handed an execution's records over in two reads).
		if best.pages < executions || best.pages > 2*executions {
			t.Errorf("%d steps, whole executions: %d pages, want %d (one an execution)", steps, best.pages, executions)
		}
	}
}

// countPages counts the history pages of one execution.
func countPages(t *testing.T, d *durable, k store.Key) int {
	t.Helper()
	out, err := d.clients.DynamoDB.Query(context.Background(), &dynamodb.QueryInput{TableName: aws.String(d.names.HistoryTable),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: k.TenantID + "#" + store.Slot(k.ExecutionID)}},
		ConsistentRead:            aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Items)
}
