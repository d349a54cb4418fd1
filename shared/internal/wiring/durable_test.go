package wiring_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/awsbackend"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// durable is a runtime on DynamoDB Local and the SQS server, with its own
// tables and queues, its SQS poller running.
type durable struct {
	t       *testing.T
	set     *wiring.Process
	counter *awsclient.Counter
	clients awsclient.Clients
	names   schema.Names
	urls    map[string]string
	cfg     config.Config
	reg     *pipeline.Registry
	stop    func()
}

// openDurable provisions fresh tables and queues and opens a runtime on
// them with short timings; start begins consuming the work queue.
func openDurable(t *testing.T, adjust func(*config.Config), ps ...pipeline.Pipeline) *durable {
	t.Helper()
	return openDurableWith(t, adjust, nil, nil, ps...)
}

// openDurableWith is openDurable with more SDK middleware on every client
// and more options.
func openDurableWith(t *testing.T, adjust func(*config.Config), mw []func(*middleware.Stack) error, opts []option, ps ...pipeline.Pipeline) *durable {
	t.Helper()
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(n)...)
	urls := awstest.Queues(t, clients, schema.Queues(n)...)
	c := durableConfig(n, urls[n.WorkQueue], urls[n.DLQQueue], urls[n.RejectQueue])
	c.StrictStartup = true
	c.Lease, c.MaxRetries, c.RetryDelay, c.SweepGrace = 1500*time.Millisecond, 2, time.Second, time.Second
	c.SQSWaitSeconds, c.SQSVisibility = 1, 10*time.Second
	if adjust != nil {
		adjust(&c)
	}
	reg, err := pipeline.NewRegistry(ps...)
	if err != nil {
		t.Fatal(err)
	}
	counter := awsclient.NewCounter()
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler),
		append(opts, withAPIOptions(append([]func(*middleware.Stack) error{counter.APIOption}, mw...)...), withDrainTimeout(5*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	d := &durable{t: t, set: set, counter: counter, clients: clients, names: n, urls: urls, cfg: c, reg: reg, stop: func() {}}
	t.Cleanup(func() { d.stop() })
	return d
}

// start runs the work queue's poller until the test ends or stop: only
// the poller, no dead-letter consumer or stream feed (the tests count the
// runtime's requests and read the queues themselves).
func (d *durable) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.set.RunLoops(ctx, awsbackend.LoopPoller) }()
	d.stop = func() { cancel(); <-done }
}

// sweepEvery runs the sweeper until the test ends.
func (d *durable) sweepEvery(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.set.Runtime.RunSweeper(ctx, interval) }()
	d.t.Cleanup(func() { cancel(); <-done })
}

func (d *durable) submit(pipelineID, key string, v any) store.Execution {
	d.t.Helper()
	in, err := payload.JSON(v)
	if err != nil {
		d.t.Fatal(err)
	}
	res, err := d.set.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: pipelineID, IdempotencyKey: key, Input: in})
	if err != nil {
		d.t.Fatalf("Submit: %v", err)
	}
	return res.Execution
}

// await polls the execution until it reaches want, or fails once it has
// settled elsewhere (FAILED with its dead letter pending is not settled).
func (d *durable) await(e store.Execution, want store.Status, within time.Duration) store.Execution {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := d.set.Runtime.Status(context.Background(), e.Key())
		if err != nil {
			d.t.Fatal(err)
		}
		if got.Status == want {
			return got
		}
		settled := got.Status.Terminal() && !(got.Status == store.Failed && got.DLQPending)
		if settled || time.Now().After(deadline) {
			d.t.Fatalf("execution %s is %s (error %+v), want %s", e.ExecutionID, got.Status, got.Error, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var order = map[string]any{"orderId": "o-1", "items": []map[string]any{{"sku": "book", "qty": 1}}, "amountCents": 1200}

// orderID is orderPipeline's id.
const orderID = "t.order"

// orderPipeline is a four-step order pipeline shaped like an order
// checkout: validate, reserve, a command step charging the order (its
// effect record: created, DISPATCHING, SUCCEEDED), then schedule.
func orderPipeline() pipeline.Pipeline {
	type progress struct {
		OrderID string `json:"orderId"`
		Step    int    `json:"step"`
	}
	next := func(_ context.Context, _ pipeline.StepInfo, p progress) (progress, error) {
		p.Step++
		return p, nil
	}
	return pipeline.Pipeline{ID: orderID, Steps: []pipeline.Step{
		pipeline.NewStep("validate", func(_ context.Context, _ pipeline.StepInfo, o map[string]any) (progress, error) {
			id, _ := o["orderId"].(string)
			if id == "" {
				return progress{}, pipeline.NonRetryable("invalid_order", errors.New("orderId is empty"))
			}
			return progress{OrderID: id, Step: 1}, nil
		}),
		pipeline.NewStep("reserve", next),
		command.Step("charge", command.Spec[progress, progress]{ID: func(p progress) string { return p.OrderID }}, next),
		pipeline.NewStep("schedule", next),
	}}
}

// TestDurableRequestBudget runs one order execution (4 steps, one of them a
// command step) and counts AWS requests from the SDK: the submit is one
// conditional write and one SQS send; the run is one claim, then one
// conditional write per step (each commit claims the next step: chained),
// no SQS request between steps, 3 effect-log writes for the command step
// (create, DISPATCHING, SUCCEEDED), and no Scan.
func TestDurableRequestBudget(t *testing.T) {
	t.Parallel()
	d := openDurable(t, nil, orderPipeline())
	d.counter.Reset()
	e := d.submit(orderID, "order-1", order)
	submit := d.counter.Snapshot()
	if submit["SQS.SendMessage"] != 1 || submit["DynamoDB.Scan"] != 0 {
		t.Fatalf("submit requests = %v, want one SendMessage", submit)
	}
	d.counter.Reset()
	d.start()
	got := d.await(e, store.Succeeded, 30*time.Second)
	d.stop()
	steps := len(orderPipeline().Steps)
	if got.Version != int64(2+steps) {
		t.Errorf("version %d, want %d (created, one claim, one commit per step)", got.Version, 2+steps)
	}
	run := d.counter.Snapshot()
	writes := run["DynamoDB.UpdateItem"] + run["DynamoDB.PutItem"] + run["DynamoDB.TransactWriteItems"] + run["DynamoDB.BatchWriteItem"] + run["DynamoDB.DeleteItem"]
	sends := run["SQS.SendMessage"] + run["SQS.SendMessageBatch"]
	const commandWrites = 3 // the charge step's effect record: PutItem, UpdateItem, UpdateItem
	if writes != 1+steps+commandWrites || sends != 0 || run["DynamoDB.Scan"] != 0 {
		t.Errorf("%d steps cost %d DynamoDB writes and %d SQS sends (%v); want %d writes (one claim, one per step, the command's), no send, no Scan",
			steps, writes, sends, run, 1+steps+commandWrites)
	}
	t.Logf("request budget: submit %v; %d steps %v (%.2f DynamoDB writes and %.2f SQS sends per step)",
		submit, steps, run, float64(writes)/float64(steps), float64(sends)/float64(steps))
}

func flaky(failures int, retryable bool) pipeline.Pipeline {
	return pipeline.Pipeline{ID: "p.flaky", Steps: []pipeline.Step{
		pipeline.NewStep("work", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if info.Attempt <= failures {
				err := fmt.Errorf("scripted failure %d", info.Attempt)
				if !retryable {
					return nil, pipeline.NonRetryable("scripted", err)
				}
				return nil, pipeline.Retryable("scripted", err)
			}
			in["attempt"] = info.Attempt
			return in, nil
		}),
	}}
}

func TestDurableRetryThenSuccess(t *testing.T) {
	t.Parallel()
	d := openDurable(t, nil, flaky(2, true))
	d.start()
	e := d.submit("p.flaky", "k1", map[string]any{})
	got := d.await(e, store.Succeeded, 30*time.Second)
	if got.Attempt != 3 {
		t.Fatalf("succeeded on attempt %d, want 3", got.Attempt)
	}
}

// TestDurableDeadLetter: retries exhausted -> DLQ row, and the envelope
// on the SQS DLQ queue names the execution and retry_exhausted.
func TestDurableDeadLetter(t *testing.T) {
	t.Parallel()
	d := openDurable(t, nil, flaky(99, true))
	d.start()
	e := d.submit("p.flaky", "k1", map[string]any{})
	got := d.await(e, store.DLQ, 30*time.Second)
	if got.Error == nil || got.Error.TerminalReason != store.ReasonRetryExhausted {
		t.Fatalf("error = %+v", got.Error)
	}
	msgs, err := awstest.Receive(context.Background(), d.clients.SQS, d.urls[d.names.DLQQueue], 1, 10*time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("DLQ queue: %d messages, err %v", len(msgs), err)
	}
	var env deadletter.Envelope
	if err := json.Unmarshal([]byte(aws.ToString(msgs[0].Body)), &env); err != nil {
		t.Fatal(err)
	}
	if env.ExecutionID != e.ExecutionID || env.TerminalReason != "retry_exhausted" || env.RetriesObserved != 2 || env.TransitionKey != e.ExecutionID+":0:3" {
		t.Fatalf("envelope = %+v", env)
	}
}

// TestDurableLeaseTakeover: a worker claims the execution and dies; the
// sweeper re-dispatches it after the lease lapses and it completes as
// attempt 2.
func TestDurableLeaseTakeover(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	p := pipeline.Pipeline{ID: "p.take", Steps: []pipeline.Step{
		pipeline.NewStep("work", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			runs.Add(1)
			in["attempt"] = info.Attempt
			return in, nil
		}),
	}}
	d := openDurable(t, nil, p)
	e := d.submit("p.take", "k1", map[string]any{})
	ctx := context.Background()
	// The dead worker: it claims, and its work item is gone with it.
	st := d.set.Runtime.Store()
	now := time.Now()
	if _, err := st.Claim(ctx, store.ClaimRequest{Key: e.Key(), ExpectVersion: 1, Owner: "dead-worker", Now: now, DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(1500 * time.Millisecond), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	purge(t, d)
	d.start()
	d.sweepEvery(500 * time.Millisecond)
	got := d.await(e, store.Succeeded, 30*time.Second)
	if got.Attempt != 2 || runs.Load() != 1 {
		t.Fatalf("attempt %d after %d runs, want attempt 2 after 1 run", got.Attempt, runs.Load())
	}
}

// TestDurableSweeperRedispatchesLostWork: the work item is lost after the
// commit (the queue is purged); the sweeper alone completes the execution.
func TestDurableSweeperRedispatchesLostWork(t *testing.T) {
	t.Parallel()
	d := openDurable(t, nil, orderPipeline())
	e := d.submit(orderID, "order-1", order)
	purge(t, d)
	d.start()
	time.Sleep(1500 * time.Millisecond)
	if got, _ := d.set.Runtime.Status(context.Background(), e.Key()); got.Status != store.Queued {
		t.Fatalf("without a work item the execution is %s", got.Status)
	}
	d.sweepEvery(500 * time.Millisecond)
	d.await(e, store.Succeeded, 30*time.Second)
}

// TestDurableRedrive: a dead-lettered execution re-driven once more
// succeeds.
func TestDurableRedrive(t *testing.T) {
	t.Parallel()
	d := openDurable(t, func(c *config.Config) { c.MaxRetries = 0 }, flaky(1, false))
	d.start()
	e := d.submit("p.flaky", "k1", map[string]any{})
	dead := d.await(e, store.DLQ, 30*time.Second)
	if _, err := d.set.Runtime.Redrive(context.Background(), e.Key(), "fixed", &dead.Version); err != nil {
		t.Fatal(err)
	}
	got := d.await(e, store.Succeeded, 30*time.Second)
	if got.Attempt != 2 || got.RedriveCount != 1 {
		t.Fatalf("after redrive: %+v", got)
	}
	_, err := d.set.Runtime.Redrive(context.Background(), e.Key(), "again", nil)
	if !errors.Is(err, engine.ErrNotRedrivable) {
		t.Fatalf("redrive of SUCCEEDED: %v", err)
	}
}

func purge(t *testing.T, d *durable) {
	t.Helper()
	if _, err := d.clients.SQS.PurgeQueue(context.Background(), &sqs.PurgeQueueInput{QueueUrl: aws.String(d.urls[d.names.WorkQueue])}); err != nil {
		t.Fatal(err)
	}
}

// TestDurableUrgentLane: qasync serve's wiring with queue.urgent-url
// sends an urgent execution's work to the urgent queue and its poller
// consumes both queues: a priority 1 execution and a default one both
// succeed. (Without the urgent queue in the poller, the urgent one would
// never be received.)
func TestDurableUrgentLane(t *testing.T) {
	t.Parallel()
	d := openDurable(t, func(c *config.Config) {
		// awstest.Names names the queues <base>-work and <base>-urgent.
		c.UrgentQueueURL = strings.TrimSuffix(c.QueueURL, "-work") + "-urgent"
	}, orderPipeline())
	if d.cfg.UrgentQueueURL != d.urls[d.names.UrgentQueue] {
		t.Fatalf("urgent queue %q, want %q", d.cfg.UrgentQueueURL, d.urls[d.names.UrgentQueue])
	}
	in, err := payload.JSON(order)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.set.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: orderID, IdempotencyKey: "urgent", Input: in, Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	normal := d.submit(orderID, "normal", order)
	d.start()
	d.await(res.Execution, store.Succeeded, 30*time.Second)
	d.await(normal, store.Succeeded, 30*time.Second)
}
