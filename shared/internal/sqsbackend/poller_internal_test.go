package sqsbackend

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/logtest"
)

// fakeQueue is an SQS queue in memory behind the SQS JSON protocol, for
// the poller's tests: ReceiveMessage hands out the queued work items (an
// empty receive answers after emptyWait, or at once when an item is
// pushed), DeleteMessage and DeleteMessageBatch record what they delete
// (failing receipts named in refuse). Gates, when set, hold receives that
// found messages, or deletes, until a value is sent on them.
type fakeQueue struct {
	mu        sync.Mutex
	items     []string // bodies not yet received
	urgent    []string // bodies not yet received from urgentURL
	lanes     []string // per receive that found messages: "urgent:n" or "work:n"
	waits     map[string][]int32
	nextID    int
	emptyWait time.Duration
	wake      chan struct{}

	receiveGate chan struct{}
	deleteGate  chan struct{}
	refuse      map[string]bool

	receiving, maxReceiving, receives int
	deleting                          int
	deleted                           []string
	requests                          []string // "DeleteMessage:1", "DeleteMessageBatch:10"
}

func newFakeQueue(t *testing.T) (*fakeQueue, *sqs.Client) {
	q := &fakeQueue{emptyWait: 20 * time.Millisecond, wake: make(chan struct{}, 1), refuse: map[string]bool{}, waits: map[string][]int32{}}
	srv := httptest.NewServer(http.HandlerFunc(q.serve))
	t.Cleanup(srv.Close)
	return q, sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
}

// push queues work items for executions ids.
func (q *fakeQueue) push(ids ...string) {
	q.mu.Lock()
	for _, id := range ids {
		q.items = append(q.items, `{"tenantId":"t","executionId":"`+id+`"}`)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// fakeURL and urgentURL are the fake's queues.
const (
	fakeURL   = "http://fake/000/q"
	urgentURL = "http://fake/000/urgent"
)

// pushUrgent queues work items for executions ids on urgentURL.
func (q *fakeQueue) pushUrgent(ids ...string) {
	q.mu.Lock()
	for _, id := range ids {
		q.urgent = append(q.urgent, `{"tenantId":"t","executionId":"`+id+`","priority":1}`)
	}
	q.mu.Unlock()
}

// get reads the fake's state under its lock.
func (q *fakeQueue) get(f func(q *fakeQueue)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f(q)
}

func (q *fakeQueue) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	var in struct {
		MaxNumberOfMessages int
		WaitTimeSeconds     int32
		QueueUrl            string
		ReceiptHandle       string
		Entries             []struct{ Id, ReceiptHandle string }
	}
	_ = json.Unmarshal(b, &in)
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	switch op {
	case "ReceiveMessage":
		q.mu.Lock()
		q.receiving++
		q.receives++
		q.maxReceiving = max(q.maxReceiving, q.receiving)
		q.waits[in.QueueUrl] = append(q.waits[in.QueueUrl], in.WaitTimeSeconds)
		q.mu.Unlock()
		defer func() { q.mu.Lock(); q.receiving--; q.mu.Unlock() }()
		msgs := q.take(r.Context(), in.QueueUrl, in.WaitTimeSeconds, max(in.MaxNumberOfMessages, 1))
		if len(msgs) > 0 && q.receiveGate != nil {
			select {
			case <-q.receiveGate:
			case <-r.Context().Done():
				return
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"Messages": msgs})
	case "DeleteMessage", "DeleteMessageBatch":
		entries := in.Entries
		if op == "DeleteMessage" {
			entries = append(entries, struct{ Id, ReceiptHandle string }{"", in.ReceiptHandle})
		}
		q.mu.Lock()
		q.deleting++
		q.requests = append(q.requests, fmt.Sprintf("%s:%d", op, len(entries)))
		q.mu.Unlock()
		if q.deleteGate != nil {
			select {
			case <-q.deleteGate:
			case <-r.Context().Done():
			}
		}
		type entry struct{ Id, Code, Message string }
		out := struct{ Successful, Failed []entry }{Successful: []entry{}, Failed: []entry{}}
		q.mu.Lock()
		q.deleting--
		for _, e := range entries {
			if q.refuse[e.ReceiptHandle] {
				out.Failed = append(out.Failed, entry{Id: e.Id, Code: "ReceiptHandleIsInvalid", Message: "refused"})
				continue
			}
			q.deleted = append(q.deleted, e.ReceiptHandle)
			out.Successful = append(out.Successful, entry{Id: e.Id})
		}
		q.mu.Unlock()
		if op == "DeleteMessage" {
			if len(out.Failed) > 0 {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#ReceiptHandleIsInvalid","message":"refused"}`)
				return
			}
			_, _ = io.WriteString(w, `{}`)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	default:
		_, _ = io.WriteString(w, `{}`)
	}
}

// take removes up to n items queued on url as messages, waiting
// emptyWait (or until an item is pushed) when there is none, unless wait
// is 0 (a short poll).
func (q *fakeQueue) take(ctx context.Context, url string, wait int32, n int) []map[string]any {
	for waited := wait == 0; ; waited = true {
		q.mu.Lock()
		items, lane := &q.items, "work"
		if url == urgentURL {
			items, lane = &q.urgent, "urgent"
		}
		k := min(n, len(*items))
		var msgs []map[string]any
		for _, body := range (*items)[:k] {
			q.nextID++
			sum := md5.Sum([]byte(body))
			msgs = append(msgs, map[string]any{"MessageId": fmt.Sprint("m-", q.nextID), "ReceiptHandle": fmt.Sprint("r-", q.nextID),
				"Body": body, "MD5OfBody": hex.EncodeToString(sum[:]), "Attributes": map[string]string{"ApproximateReceiveCount": "1"}})
		}
		*items = (*items)[k:]
		if k > 0 {
			q.lanes = append(q.lanes, fmt.Sprintf("%s:%d", lane, k))
		}
		q.mu.Unlock()
		if len(msgs) > 0 || waited {
			return msgs
		}
		select {
		case <-q.wake:
		case <-time.After(q.emptyWait):
		case <-ctx.Done():
			return nil
		}
	}
}

// runPoller runs a poller on the fake until the test ends (or stop is
// called); stop returns once Run has.
func runPoller(t *testing.T, c *sqs.Client, h dispatch.Handler, opts PollerOptions) (stop func(), logs *logtest.Buffer) {
	t.Helper()
	logs, log := logtest.New()
	opts.Logger = log
	p := NewPoller(c, fakeURL, h, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("poller did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop, logs
}

// eventually waits for cond, failing the test after a generous bound (a
// liveness bound, not a measured time).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPollerKeepsSeveralReceivesInFlight: while the queue has a backlog,
// a slot freed while a receive is in flight starts another receive: two
// workers finishing one after the other each get their next message
// without waiting for the other's receive. (Before, one receive at a
// time: the second freed slot waited for the first receive's answer.)
func TestPollerKeepsSeveralReceivesInFlight(t *testing.T) {
	q, c := newFakeQueue(t)
	for i := range 40 {
		q.push(fmt.Sprint("exec-", i))
	}
	release := make(chan struct{})
	var mu sync.Mutex
	started := 0
	runPoller(t, c, func(ctx context.Context, _ dispatch.WorkItem) error {
		mu.Lock()
		started++
		mu.Unlock()
		<-release
		return nil
	}, PollerOptions{Concurrency: 8, WaitTimeSeconds: 1})
	eventually(t, "8 handlers running", func() bool { mu.Lock(); defer mu.Unlock(); return started == 8 })
	q.get(func(q *fakeQueue) { q.receiveGate = make(chan struct{}) })
	release <- struct{}{} // a slot frees: a receive starts and is held
	eventually(t, "a receive in flight", func() bool { n := 0; q.get(func(q *fakeQueue) { n = q.receiving }); return n == 1 })
	release <- struct{}{} // another slot frees while it is held
	eventually(t, "a second receive in flight", func() bool { n := 0; q.get(func(q *fakeQueue) { n = q.receiving }); return n == 2 })
	close(q.receiveGate)
	close(release)
}

// TestPollerIdleKeepsOneReceive: on an empty queue the poller keeps a
// single long poll in flight, however many slots are free.
func TestPollerIdleKeepsOneReceive(t *testing.T) {
	q, c := newFakeQueue(t)
	stop, _ := runPoller(t, c, func(context.Context, dispatch.WorkItem) error { return nil }, PollerOptions{Concurrency: 8, WaitTimeSeconds: 1})
	eventually(t, "5 empty receives", func() bool { n := 0; q.get(func(q *fakeQueue) { n = q.receives }); return n >= 5 })
	stop()
	q.get(func(q *fakeQueue) {
		if q.maxReceiving != 1 {
			t.Errorf("%d receives in flight at once on an idle queue, want 1", q.maxReceiving)
		}
	})
}

// TestPollerFreesTheSlotBeforeTheDelete: a handler's slot is free as soon
// as it returns; its message's delete does not hold it. With one slot and
// the deletes held, the second message is still handled. (Before, the
// slot was held until the delete answered.)
func TestPollerFreesTheSlotBeforeTheDelete(t *testing.T) {
	q, c := newFakeQueue(t)
	q.deleteGate = make(chan struct{})
	handled := make(chan string, 2)
	q.push("exec-1", "exec-2")
	stop, _ := runPoller(t, c, func(_ context.Context, item dispatch.WorkItem) error {
		handled <- item.ExecutionID
		return nil
	}, PollerOptions{Concurrency: 1, WaitTimeSeconds: 1})
	var open sync.Once
	t.Cleanup(func() { open.Do(func() { close(q.deleteGate) }) }) // before the poller stops
	for range 2 {
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatal("the second message waited for the first one's delete")
		}
	}
	open.Do(func() { close(q.deleteGate) })
	stop()
	q.get(func(q *fakeQueue) {
		if len(q.deleted) != 2 {
			t.Errorf("deleted %v, want both messages", q.deleted)
		}
	})
}

// TestPollerDeletesHandledMessagesBeforeStopping: a message handled while
// Run's context ends is deleted before Run returns.
func TestPollerDeletesHandledMessagesBeforeStopping(t *testing.T) {
	q, c := newFakeQueue(t)
	called := make(chan struct{})
	q.push("exec-1")
	stop, _ := runPoller(t, c, func(context.Context, dispatch.WorkItem) error {
		close(called)
		return nil
	}, PollerOptions{Concurrency: 2, WaitTimeSeconds: 1})
	<-called
	stop()
	q.get(func(q *fakeQueue) {
		if len(q.deleted) != 1 {
			t.Errorf("after Run returned: deleted %v, want the handled message", q.deleted)
		}
	})
}

// TestDeleterBatchesWhatQueuedMeanwhile: a delete alone is a
// DeleteMessage; the receipts queued while it is in flight go in
// DeleteMessageBatch calls of up to 10; an entry SQS refuses is logged
// as delete_failed, the others deleted.
func TestDeleterBatchesWhatQueuedMeanwhile(t *testing.T) {
	q, c := newFakeQueue(t)
	q.deleteGate = make(chan struct{})
	q.refuse["r-5"] = true
	logs, log := logtest.New()
	d := newDeleter(c, "http://fake/000/q", 16)
	d.add(aws.String("r-0"), log)
	eventually(t, "the first delete in flight", func() bool { n := 0; q.get(func(q *fakeQueue) { n = q.deleting }); return n == 1 })
	for i := 1; i <= 12; i++ {
		d.add(aws.String(fmt.Sprint("r-", i)), log)
	}
	close(q.deleteGate)
	d.close()
	q.get(func(q *fakeQueue) {
		if got := strings.Join(q.requests, " "); got != "DeleteMessage:1 DeleteMessageBatch:10 DeleteMessageBatch:2" {
			t.Errorf("requests %s, want DeleteMessage:1 DeleteMessageBatch:10 DeleteMessageBatch:2", got)
		}
		if len(q.deleted) != 12 {
			t.Errorf("deleted %d, want 12 (13 less the refused one)", len(q.deleted))
		}
	})
	if n := strings.Count(logs.String(), `"event":"delete_failed"`); n != 1 {
		t.Errorf("%d delete_failed events, want 1:\n%s", n, logs.String())
	}
}
