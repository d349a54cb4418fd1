package lambdafn_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/lambdafn"
	submitfn "github.com/qasync/qasync/shared/lambdafn/submit"
	workerfn "github.com/qasync/qasync/shared/lambdafn/worker"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
)

// TestWorkerFunctionRollingDeployNeverPoisons is a rolling deploy on the
// local stack, through the deployed wiring (Boot, Handler(Worker)) and a
// work queue that moves an item to its poison queue after
// schema.PoisonAfter receives: an execution bound to a new definition is
// delivered, as the SQS event source mapping delivers it, to a worker
// still on the old one, which answers pipeline_version_unavailable again
// and again. The item is handed back each time without counting a
// receive: after more deliveries than PoisonAfter it has never reached
// the poison queue, each delivery was a first receive carrying the
// tenant attribute, and once a worker serving the definition takes over
// the execution succeeds.
func TestWorkerFunctionRollingDeployNeverPoisons(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, c, schema.Tables(n)...)
	urls := awstest.Queues(t, c,
		schema.Queue{Name: n.PoisonQueue, VisibilityTimeout: 30 * time.Second, Retention: time.Hour},
		// A long visibility: only a deferral brings the item back soon.
		schema.Queue{Name: n.WorkQueue, VisibilityTimeout: 30 * time.Second, Retention: time.Hour,
			RedriveTo: n.PoisonQueue, MaxReceiveCount: schema.PoisonAfter})
	env := map[string]string{
		"state-provider": "dynamo", "dispatcher-provider": "sqs", "queue-url": urls[n.WorkQueue],
		"dynamo.execution-table": n.ExecutionTable, "dynamo.execution-payload-table": n.PayloadTable,
		"dynamo.dead-letter-table": n.DeadLetterTable, "dynamo.effect-table": n.EffectTable,
		"dynamo.history-table": n.HistoryTable, "http.tenant-source": "iam",
	}
	newReg := registry(t)
	oldReg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: echoID, Steps: []pipeline.Step{
		pipeline.NewStep("echo-before", func(_ context.Context, _ pipeline.StepInfo, in json.RawMessage) (json.RawMessage, error) {
			return in, nil
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	newEnv, _ := bootStack(t, submitfn.Function, newReg, env)
	oldWorkerEnv, oldLogs := bootStack(t, workerfn.Function, oldReg, env)
	newWorkerEnv, _ := bootStack(t, workerfn.Function, newReg, env)
	oldWorker := workerOf(t, oldWorkerEnv)
	newWorker := workerOf(t, newWorkerEnv)

	s := submit(t, newEnv, echoID, `{"echo":"deploy"}`)
	var (
		mu       sync.Mutex
		receives []string // ApproximateReceiveCount of each delivery to the old worker
		tenants  []string // the tenant attribute of each
	)
	var deployed atomic.Bool
	h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		if deployed.Load() {
			return newWorker(ctx, ev)
		}
		mu.Lock()
		for _, r := range ev.Records {
			receives = append(receives, r.Attributes["ApproximateReceiveCount"])
			tenants = append(tenants, aws.ToString(r.MessageAttributes[sqsbackend.AttrTenant].StringValue))
		}
		mu.Unlock()
		return oldWorker(ctx, ev)
	}
	consume(t, c.SQS, urls[n.WorkQueue], h)

	const rounds = schema.PoisonAfter + 2
	deadline := time.Now().Add(2 * time.Minute) // a failure guard only
	for {
		mu.Lock()
		got := append([]string(nil), receives...)
		mu.Unlock()
		if poisoned := visibleMessages(t, c.SQS, urls[n.PoisonQueue]); poisoned > 0 {
			t.Fatalf("the deferred work item reached the poison queue after %d deliveries (receive counts %v)", len(got), got)
		}
		if len(got) >= rounds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries to the old worker (receive counts %v), want %d\n%s", len(got), got, rounds, oldLogs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	deployed.Store(true)
	mu.Lock()
	for i := range receives {
		if receives[i] != "1" || tenants[i] != "123456789012.role.order-service" {
			t.Errorf("delivery %d: receive count %s, tenant attribute %q; want a first receive of a message with the tenant", i+1, receives[i], tenants[i])
		}
	}
	mu.Unlock()
	if deferred := logEvents(t, oldLogs.Lines(), "work_item_deferred"); len(deferred) < rounds-1 || deferred[0]["reason"] != "pipeline_version_unavailable" {
		t.Errorf("work_item_deferred events %v", deferred)
	}

	// The deploy completes: a worker serving the definition runs it.
	deadline = time.Now().Add(time.Minute)
	for {
		resp := call(t, newEnv, http.MethodGet, "/v1/executions/"+s.ExecutionID, "")
		var doc struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &doc)
		if doc.Status == "SUCCEEDED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s: %d %s after the deploy, want SUCCEEDED", s.ExecutionID, resp.StatusCode, resp.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if poisoned := visibleMessages(t, c.SQS, urls[n.PoisonQueue]); poisoned != 0 {
		t.Errorf("%d messages in the poison queue", poisoned)
	}
}

// bootStack boots function fn for reg on the local stack with the
// configuration keys of cfg, logging to the returned buffer.
func bootStack(t *testing.T, fn lambdafn.Function, reg *pipeline.Registry, cfg map[string]string) (*lambdafn.Env, *logtest.Buffer) {
	t.Helper()
	vars := map[string]string{}
	for k, v := range cfg {
		vars[config.EnvName(config.FullKey(k))] = v
	}
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), fn, reg, lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(vars)))
	if err != nil {
		t.Fatalf("Boot: %v\n%s", err, out.String())
	}
	t.Cleanup(func() {
		_ = env.Close(context.Background())
		if t.Failed() {
			t.Logf("log of %v:\n%s", reg.IDs(), out.String())
		}
	})
	return env, &out
}

// workerOf is env's worker handler.
func workerOf(t *testing.T, env *lambdafn.Env) sqsbackend.BatchHandler {
	t.Helper()
	h, ok := handler(t, env).(func(context.Context, events.SQSEvent) (events.SQSEventResponse, error))
	if !ok {
		t.Fatal("the worker handler is not an SQS batch handler")
	}
	return h
}

// consume runs, until the test ends, what the worker's SQS event source
// mapping is to the worker function: h gets the batches of the queue at
// url, and what it does not report as failed is deleted.
func consume(t *testing.T, c *sqs.Client, url string, h sqsbackend.BatchHandler) {
	t.Helper()
	cons := sqsbackend.NewConsumer(c, url, h, sqsbackend.ConsumerOptions{WaitTimeSeconds: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the consumer did not stop")
		}
	})
}

// visibleMessages is the queue's ApproximateNumberOfMessages.
func visibleMessages(t *testing.T, c *sqs.Client, url string) int {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		t.Fatalf("ApproximateNumberOfMessages: %v", err)
	}
	return n
}
