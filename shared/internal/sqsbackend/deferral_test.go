package sqsbackend_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// errBackend is a handler's failure.
var errBackend = errors.New("backend unavailable")

// workAndPoison creates a work queue that moves a message to its poison
// queue after schema.PoisonAfter receives, as the deployed one does, and
// returns both URLs.
func workAndPoison(t *testing.T, c awsclient.Clients, visibility time.Duration) (work, poison string) {
	t.Helper()
	w, p := awstest.Name(t, "work"), awstest.Name(t, "poison")
	urls := awstest.Queues(t, c,
		schema.Queue{Name: p, VisibilityTimeout: 30 * time.Second, Retention: time.Hour},
		schema.Queue{Name: w, VisibilityTimeout: visibility, Retention: time.Hour, RedriveTo: p, MaxReceiveCount: schema.PoisonAfter})
	return urls[w], urls[p]
}

// visibleMessages is the queue's ApproximateNumberOfMessages.
func visibleMessages(t *testing.T, c *sqs.Client, url string) int {
	t.Helper()
	v, _ := queueCounts(t, c, url)
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("ApproximateNumberOfMessages %q: %v", v, err)
	}
	return n
}

// receiveCounts are the receive_count of the events named name.
func receiveCounts(t *testing.T, logs *logtest.Buffer, name string) []int {
	t.Helper()
	evs, err := logtest.Events[struct {
		ReceiveCount int `json:"receive_count"`
	}](logs, name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(evs))
	for i, e := range evs {
		out[i] = e.ReceiveCount
	}
	return out
}

// TestPollerDeferralNeverPoisons: a handler that keeps deferring a work
// item (a worker that does not serve its pipeline version, in a rolling
// deploy) on a work queue that moves an item to its poison queue after
// schema.PoisonAfter receives. The poller hands the item back as a fresh
// message each time: after more deliveries than PoisonAfter it has never
// reached the poison queue, each delivery was a first receive, and once
// the handler accepts it the item is done and the queues are empty.
func TestPollerDeferralNeverPoisons(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	work, poison := workAndPoison(t, c, 30*time.Second)
	item := dispatch.WorkItem{TenantID: "tenant-d", ExecutionID: "exec-deploy", PipelineID: "p.deploy"}
	var deliveries atomic.Int32
	var served atomic.Bool
	accepted := make(chan struct{})
	var once sync.Once
	logs := startPoller(t, c.SQS, work, func(_ context.Context, got dispatch.WorkItem) error {
		if got != item {
			t.Errorf("delivered %+v, want %+v", got, item)
		}
		deliveries.Add(1)
		if served.Load() {
			once.Do(func() { close(accepted) })
			return nil
		}
		return dispatch.RetryAfter(time.Second, "pipeline_version_unavailable")
	}, sqsbackend.PollerOptions{VisibilityTimeout: 30 * time.Second})
	if err := sqsbackend.NewDispatcher(c.SQS, work).Dispatch(context.Background(), dispatch.Message{Item: item}); err != nil {
		t.Fatal(err)
	}

	const rounds = schema.PoisonAfter + 2
	deadline := time.Now().Add(2 * time.Minute) // a failure guard only
	for deliveries.Load() < rounds {
		if visibleMessages(t, c.SQS, poison) > 0 {
			t.Fatalf("the deferred work item reached the poison queue after %d deliveries (receive counts %v)",
				deliveries.Load(), receiveCounts(t, logs, "work_item_deferred"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries, want %d", deliveries.Load(), rounds)
		}
		time.Sleep(50 * time.Millisecond)
	}
	served.Store(true)
	select {
	case <-accepted:
	case <-time.After(time.Minute):
		t.Fatal("the item was not delivered again once the handler serves it")
	}
	waitEmpty(t, c.SQS, work)
	if n := visibleMessages(t, c.SQS, poison); n != 0 {
		t.Errorf("%d messages in the poison queue", n)
	}
	for i, n := range receiveCounts(t, logs, "work_item_deferred") {
		if n != 1 {
			t.Errorf("deferral %d was of receive %d, want every delivery a first receive", i+1, n)
		}
	}
}

// TestPollerFailuresStillReachPoisonQueue: handing deferred items back
// as fresh messages leaves real failures alone: an item whose handler
// fails (an error, a panic) on every delivery still reaches the poison
// queue after schema.PoisonAfter receives, unchanged.
func TestPollerFailuresStillReachPoisonQueue(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	work, poison := workAndPoison(t, c, 30*time.Second)
	var calls atomic.Int32
	startPoller(t, c.SQS, work, func(context.Context, dispatch.WorkItem) error {
		if calls.Add(1)%2 == 0 {
			panic("step crashed")
		}
		return errBackend
	}, sqsbackend.PollerOptions{VisibilityTimeout: 2 * time.Second, RetryDelay: time.Second})
	item := dispatch.WorkItem{TenantID: "tenant-f", ExecutionID: "exec-failing"}
	if err := sqsbackend.NewDispatcher(c.SQS, work).Dispatch(context.Background(), dispatch.Message{Item: item}); err != nil {
		t.Fatal(err)
	}
	got := drain(t, c.SQS, poison, 1, time.Minute)
	if len(got) != 1 {
		t.Fatalf("the failing item did not reach the poison queue (%d handler calls)", calls.Load())
	}
	var body dispatch.WorkItem
	if err := json.Unmarshal([]byte(aws.ToString(got[0].Body)), &body); err != nil || body != item {
		t.Errorf("poison queue holds %s (%v), want %+v", aws.ToString(got[0].Body), err, item)
	}
	if n := calls.Load(); n != schema.PoisonAfter {
		t.Errorf("%d handler calls, want %d", n, schema.PoisonAfter)
	}
}

// fakeRequeue is a dispatcher that keeps what it is given and fails with
// err.
type fakeRequeue struct {
	mu   sync.Mutex
	msgs []dispatch.Message
	err  error
}

func (f *fakeRequeue) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msgs...)
	return f.err
}

// hider records the visibility changes it is asked for, failing with err.
type hider struct {
	waits []time.Duration
	err   error
}

func (h *hider) hide(_ context.Context, d time.Duration) error {
	h.waits = append(h.waits, d)
	return h.err
}

// deferredEvent is the work_item_deferred event.
type deferredEvent struct {
	Reason     string        `json:"reason"`
	RetryIn    time.Duration `json:"retry_in"`
	HandedBack string        `json:"handed_back"`
	DeliverIn  time.Duration `json:"deliver_in"`
}

// TestHandBackRoundsAndCaps: a deferral up to SQS's 900 s delay limit is
// a fresh message delayed by the deferral rounded up to whole seconds (at
// least one); a longer one keeps the received message invisible (up to
// 12 h) on its first receive, and is a fresh message delayed 900 s once
// the message has a receive behind it.
func TestHandBackRoundsAndCaps(t *testing.T) {
	t.Parallel()
	item := dispatch.WorkItem{TenantID: "t", ExecutionID: "e", PipelineID: "p"}
	for _, tc := range []struct {
		wait     time.Duration
		receives int
		fresh    bool
		want     time.Duration // the fresh message's delay, or the visibility
	}{
		{0, 1, true, time.Second},
		{300 * time.Millisecond, 1, true, time.Second},
		{time.Second, 4, true, time.Second},
		{1500 * time.Millisecond, 1, true, 2 * time.Second},
		{30 * time.Second, 1, true, 30 * time.Second},
		{899*time.Second + time.Millisecond, 1, true, 900 * time.Second},
		{900 * time.Second, 1, true, 900 * time.Second},
		{900*time.Second + time.Millisecond, 1, false, 901 * time.Second},
		{2 * time.Hour, 1, false, 2 * time.Hour},
		{2 * time.Hour, 0, false, 2 * time.Hour}, // receive count unknown: a first receive
		{13 * time.Hour, 1, false, 12 * time.Hour},
		{2 * time.Hour, 2, true, 900 * time.Second},
		{13 * time.Hour, 5, true, 900 * time.Second},
		{1000 * time.Hour, 1, false, 12 * time.Hour},
	} {
		req, h := &fakeRequeue{}, &hider{}
		logs, log := logtest.New()
		d := sqsbackend.Deferral{Item: item, Receives: tc.receives, Wait: &dispatch.RetryAfterError{Delay: tc.wait, Reason: "not_due"},
			Requeue: req, Hide: h.hide}
		ack := d.HandBack(context.Background(), log)
		evs, err := logtest.Events[deferredEvent](logs, "work_item_deferred")
		if err != nil || len(evs) != 1 {
			t.Fatalf("%s (receive %d): work_item_deferred events %v (%v)", tc.wait, tc.receives, evs, err)
		}
		ev := evs[0]
		if ev.Reason != "not_due" || ev.RetryIn != tc.wait || ev.DeliverIn != tc.want {
			t.Errorf("%s (receive %d): logged %+v", tc.wait, tc.receives, ev)
		}
		if tc.fresh {
			if !ack || len(req.msgs) != 1 || req.msgs[0] != (dispatch.Message{Item: item, Delay: tc.want}) || len(h.waits) != 0 || ev.HandedBack != "fresh_message" {
				t.Errorf("%s (receive %d): ack %v, sent %+v, hidden %v, %s; want a fresh message delayed %s", tc.wait, tc.receives, ack, req.msgs, h.waits, ev.HandedBack, tc.want)
			}
			continue
		}
		if ack || len(req.msgs) != 0 || len(h.waits) != 1 || h.waits[0] != tc.want || ev.HandedBack != "visibility" {
			t.Errorf("%s (receive %d): ack %v, sent %+v, hidden %v, %s; want the message kept invisible %s", tc.wait, tc.receives, ack, req.msgs, h.waits, ev.HandedBack, tc.want)
		}
	}
}

// TestHandBackFallsBackToVisibility: when the fresh message cannot be
// sent, the received message is kept, invisible for the deferral (so the
// item is not lost), and work_item_requeue_failed names the cause; when
// that fails too, it comes back at its visibility timeout. Without a
// requeue dispatcher the message is kept as well, with no send tried.
func TestHandBackFallsBackToVisibility(t *testing.T) {
	t.Parallel()
	item := dispatch.WorkItem{TenantID: "t", ExecutionID: "e"}
	wait := &dispatch.RetryAfterError{Delay: 1500 * time.Millisecond, Reason: "pipeline_version_unavailable"}
	for _, tc := range []struct {
		name       string
		requeue    *fakeRequeue
		hideErr    error
		requeueLog int
		resetLog   int
		handedBack string
	}{
		{"send fails", &fakeRequeue{err: errors.New("sqs down")}, nil, 1, 0, "visibility"},
		{"send and visibility fail", &fakeRequeue{err: errors.New("sqs down")}, errors.New("sqs still down"), 1, 1, "visibility_timeout"},
		{"no requeue", nil, nil, 0, 0, "visibility"},
	} {
		h := &hider{err: tc.hideErr}
		logs, log := logtest.New()
		d := sqsbackend.Deferral{Item: item, Receives: 1, Wait: wait, Hide: h.hide}
		if tc.requeue != nil {
			d.Requeue = tc.requeue
		}
		if d.HandBack(context.Background(), log) {
			t.Errorf("%s: the received message would be acknowledged", tc.name)
		}
		if len(h.waits) != 1 || h.waits[0] != 2*time.Second {
			t.Errorf("%s: visibility changes %v, want one of 2s", tc.name, h.waits)
		}
		if tc.requeue != nil && len(tc.requeue.msgs) != 1 {
			t.Errorf("%s: %d sends, want 1", tc.name, len(tc.requeue.msgs))
		}
		failed, _ := logtest.Events[struct {
			Level string `json:"level"`
			Error string `json:"error"`
		}](logs, "work_item_requeue_failed")
		if len(failed) != tc.requeueLog || (len(failed) > 0 && (failed[0].Level != "WARN" || failed[0].Error == "")) {
			t.Errorf("%s: work_item_requeue_failed events %+v", tc.name, failed)
		}
		reset, _ := logtest.Events[struct{}](logs, "visibility_reset_failed")
		evs, _ := logtest.Events[deferredEvent](logs, "work_item_deferred")
		if len(reset) != tc.resetLog || len(evs) != 1 || evs[0].HandedBack != tc.handedBack {
			t.Errorf("%s: %d visibility_reset_failed, work_item_deferred %+v; want %d and handed back by %s", tc.name, len(reset), evs, tc.resetLog, tc.handedBack)
		}
	}
}
