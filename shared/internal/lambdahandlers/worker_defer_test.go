package lambdahandlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// failingDispatcher keeps what it is given and fails with err.
type failingDispatcher struct {
	recordingDispatcher
	err error
}

func (d *failingDispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	_ = d.recordingDispatcher.Dispatch(ctx, msgs...)
	return d.err
}

// visibilityCall is one call of a Deferrer.
type visibilityCall struct {
	source  string // the record's eventSourceARN
	receipt string
	wait    time.Duration
}

// TestWorkerRequeuesDeferredRecord: a record whose execution is not due
// yet (a minute away) goes back as a fresh message delayed until it is,
// through WithRequeue, and is acknowledged (no batch item failure, no
// visibility change). When that send fails the record is kept instead:
// its visibility is set to the minute (WithDeferrer) and it is a batch
// item failure; without WithRequeue that is what always happens.
func TestWorkerRequeuesDeferredRecord(t *testing.T) {
	rt, _, _, logs := unitRuntime(t, engine.Config{})
	ev, items := sqsItems(t, fixture(t, "worker-sqs-batch.json"))
	ev.Records = ev.Records[:1]
	seed(t, rt, items[0].ExecutionID, items[0].PipelineID, inputFor(items[0].PipelineID), func(e *store.Execution) {
		e.Status, e.NextDueAt = store.WaitRetry, time.Now().Add(time.Minute)
	})
	var mu sync.Mutex
	var hidden []visibilityCall
	deferrer := lambdahandlers.WithDeferrer(func(_ context.Context, source, receipt string, d time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		hidden = append(hidden, visibilityCall{source, receipt, d})
		return nil
	})
	for _, tc := range []struct {
		name    string
		requeue *failingDispatcher
		fresh   bool
	}{
		{"requeue", &failingDispatcher{}, true},
		{"requeue fails", &failingDispatcher{err: errors.New("sqs down")}, false},
		{"no requeue", nil, false},
	} {
		mu.Lock()
		hidden = nil
		mu.Unlock()
		opts := []lambdahandlers.WorkerOption{deferrer}
		if tc.requeue != nil {
			opts = append(opts, lambdahandlers.WithRequeue(tc.requeue))
		}
		resp, err := lambdahandlers.Worker(rt, time.Second, rt.Logger(), opts...)(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		if tc.requeue != nil {
			msgs := tc.requeue.msgs
			if len(msgs) != 1 || msgs[0].Item != items[0] || msgs[0].Delay <= 55*time.Second || msgs[0].Delay > time.Minute || msgs[0].Delay%time.Second != 0 {
				t.Errorf("%s: sent %+v, want the item delayed by the minute in whole seconds", tc.name, msgs)
			}
		}
		mu.Lock()
		calls := hidden
		mu.Unlock()
		if tc.fresh {
			if len(resp.BatchItemFailures) != 0 || len(calls) != 0 {
				t.Errorf("%s: failures %v, visibility changes %v; want the record acknowledged", tc.name, failureIDs(resp), calls)
			}
			continue
		}
		if got := failureIDs(resp); len(got) != 1 || got[0] != ev.Records[0].MessageId {
			t.Errorf("%s: failures %v, want the record", tc.name, got)
		}
		if len(calls) != 1 || calls[0].receipt != ev.Records[0].ReceiptHandle || calls[0].source != ev.Records[0].EventSourceARN || calls[0].wait <= 55*time.Second || calls[0].wait > time.Minute {
			t.Errorf("%s: visibility changes %v, want the record's (on its source queue, for the urgent lane), for the minute", tc.name, calls)
		}
	}
	if n := len(logEvents(t, logs, "work_item_requeue_failed")); n != 1 {
		t.Errorf("%d work_item_requeue_failed events, want 1", n)
	}
	batches := logEvents(t, logs, "worker_batch_completed")
	if len(batches) != 3 || batches[0]["requeued"] != 1.0 || batches[0]["deferred"] != 0.0 || batches[1]["requeued"] != 0.0 || batches[1]["deferred"] != 1.0 {
		t.Errorf("worker_batch_completed events %v", batches)
	}
	if row := get(t, rt, items[0].ExecutionID); row.Version != 1 || row.Status != store.WaitRetry {
		t.Errorf("the row changed: %s v%d", row.Status, row.Version)
	}
}

// TestWorkerFailuresStillReachPoisonQueue: on the local stack, with the
// worker wired as the deployed one (WithRequeue, WithDeferrer) and fed by
// the event source mapping's stand-in, a record whose Process fails (an
// error, a panic) on every delivery still reaches the poison queue after
// schema.PoisonAfter receives: handing deferrals back did not disable
// the poison queue.
func TestWorkerFailuresStillReachPoisonQueue(t *testing.T) {
	c, _ := awstest.Clients(t)
	work, poison := awstest.Name(t, "work"), awstest.Name(t, "poison")
	urls := awstest.Queues(t, c,
		schema.Queue{Name: poison, VisibilityTimeout: 30 * time.Second, Retention: time.Hour},
		schema.Queue{Name: work, VisibilityTimeout: time.Second, Retention: time.Hour, RedriveTo: poison, MaxReceiveCount: schema.PoisonAfter})
	rt, hs, _, logs := unitRuntime(t, engine.Config{})
	item := dispatch.WorkItem{TenantID: fixtureTenant, ExecutionID: "exec-failing", PipelineID: orderPipelineID}
	var calls atomic.Int32
	hs.get = func(key store.Key) error {
		if calls.Add(1)%2 == 0 {
			panic("store client crashed")
		}
		return errors.New("dynamodb: throttled")
	}
	queue := sqsbackend.NewDispatcher(c.SQS, urls[work])
	worker := lambdahandlers.Worker(rt, time.Second, rt.Logger(), lambdahandlers.WithRequeue(queue),
		lambdahandlers.WithDeferrer(func(ctx context.Context, _, receipt string, d time.Duration) error {
			return sqsbackend.Defer(ctx, c.SQS, urls[work], receipt, d)
		}))
	cons := sqsbackend.NewConsumer(c.SQS, urls[work], func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		return worker(ctx, ev)
	}, sqsbackend.ConsumerOptions{WaitTimeSeconds: 1})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	if err := queue.Dispatch(context.Background(), dispatch.Message{Item: item}); err != nil {
		t.Fatal(err)
	}
	got, err := awstest.Receive(context.Background(), c.SQS, urls[poison], 1, time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatalf("the failing item did not reach the poison queue (%v, %d Process calls)\n%s", err, calls.Load(), logs.String())
	}
	var body dispatch.WorkItem
	if err := json.Unmarshal([]byte(aws.ToString(got[0].Body)), &body); err != nil || body != item {
		t.Errorf("poison queue holds %s (%v)", aws.ToString(got[0].Body), err)
	}
	if n := calls.Load(); n != schema.PoisonAfter {
		t.Errorf("%d Process calls, want %d", n, schema.PoisonAfter)
	}
	if n := len(logEvents(t, logs, "work_item_deferred")); n != 0 {
		t.Errorf("%d work_item_deferred events for failures", n)
	}
}
