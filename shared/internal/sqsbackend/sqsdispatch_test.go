package sqsbackend_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// newQueue creates a plain queue for the test and returns its URL.
func newQueue(t *testing.T, c awsclient.Clients, visibility time.Duration) string {
	t.Helper()
	name := awstest.Name(t, "q")
	return awstest.Queues(t, c, schema.Queue{Name: name, VisibilityTimeout: visibility, Retention: time.Hour})[name]
}

// startPoller runs a poller until the test ends. Its log goes to the
// returned buffer (and to the test log when the test fails).
func startPoller(t *testing.T, c *sqs.Client, url string, h dispatch.Handler, opts sqsbackend.PollerOptions) *logtest.Buffer {
	t.Helper()
	buf, log := logtest.New()
	opts.Logger = log
	if opts.WaitTimeSeconds == 0 {
		opts.WaitTimeSeconds = 1
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	p := sqsbackend.NewPoller(c, url, h, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("poller did not stop")
		}
		if t.Failed() {
			t.Logf("poller log:\n%s", buf.String())
		}
	})
	return buf
}

// newDispatcher is the conformance factory: a dispatcher and a poller
// calling h on a fresh queue, the poller stopped when the test ends.
func newDispatcher(t *testing.T, h dispatch.Handler) dispatch.Dispatcher {
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	startPoller(t, c.SQS, url, h, sqsbackend.PollerOptions{RetryDelay: time.Second})
	return sqsbackend.NewDispatcher(c.SQS, url)
}

// drain receives every message of the queue until want were read or the
// wait passed, deleting them.
func drain(t *testing.T, c *sqs.Client, url string, want int, wait time.Duration) []types.Message {
	t.Helper()
	var got []types.Message
	deadline := time.Now().Add(wait)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		}
	}
	return got
}

func TestBatchOf25SendsThreeBatches(t *testing.T) {
	t.Parallel()
	c, counter := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	d := sqsbackend.NewDispatcher(c.SQS, url)
	msgs := make([]dispatch.Message, 25)
	want := map[string]dispatch.WorkItem{}
	for i := range msgs {
		item := dispatch.WorkItem{TenantID: "tenant-b", ExecutionID: "exec-" + string(rune('a'+i)), PipelineID: "p.batch"}
		msgs[i] = dispatch.Message{Item: item}
		want[item.ExecutionID] = item
	}
	counter.Reset()
	if err := d.Dispatch(context.Background(), msgs...); err != nil {
		t.Fatalf("Dispatch: %v", err)
	}
	counts := counter.Snapshot()
	if counts["SQS.SendMessageBatch"] != 3 || counts["SQS.SendMessage"] != 0 {
		t.Fatalf("calls %v, want 3 SQS.SendMessageBatch and no SQS.SendMessage", counts)
	}
	got := drain(t, c.SQS, url, 25, 10*time.Second)
	if len(got) != 25 {
		t.Fatalf("received %d messages, want 25", len(got))
	}
	for _, m := range got {
		var item dispatch.WorkItem
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &item); err != nil {
			t.Fatalf("body: %v", err)
		}
		if item != want[item.ExecutionID] {
			t.Errorf("received %+v, want %+v", item, want[item.ExecutionID])
		}
		delete(want, item.ExecutionID)
		if a := m.MessageAttributes[sqsbackend.AttrTenant]; aws.ToString(a.DataType) != "String" || aws.ToString(a.StringValue) != "tenant-b" {
			t.Errorf("tenant attribute %s %q, want String tenant-b", aws.ToString(a.DataType), aws.ToString(a.StringValue))
		}
	}
	if len(want) > 0 {
		t.Errorf("never received %d items", len(want))
	}
}

func TestSingleMessageSendsOneMessage(t *testing.T) {
	t.Parallel()
	c, counter := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	d := sqsbackend.NewDispatcher(c.SQS, url)
	counter.Reset()
	item := dispatch.WorkItem{TenantID: "tenant-s", ExecutionID: "exec-1"}
	if err := d.Dispatch(context.Background(), dispatch.Message{Item: item}); err != nil {
		t.Fatalf("Dispatch: %v", err)
	}
	if counts := counter.Snapshot(); counts["SQS.SendMessage"] != 1 || len(counts) != 1 {
		t.Fatalf("calls %v, want one SQS.SendMessage", counts)
	}
	got := drain(t, c.SQS, url, 1, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("received %d messages, want 1", len(got))
	}
	// No pipelineId: the field is omitted, as dispatch.WorkItem says.
	if body := aws.ToString(got[0].Body); body != `{"tenantId":"tenant-s","executionId":"exec-1"}` {
		t.Errorf("body %s", body)
	}
	if a := got[0].MessageAttributes[sqsbackend.AttrTenant]; aws.ToString(a.StringValue) != "tenant-s" {
		t.Errorf("tenant attribute %q, want tenant-s", aws.ToString(a.StringValue))
	}
}

func TestLongDelayIsCappedNotRefused(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	d := sqsbackend.NewDispatcher(c.SQS, url)
	long := dispatch.Message{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: "exec-long"}, Delay: 2 * time.Hour}
	if err := d.Dispatch(context.Background(), long); err != nil {
		t.Fatalf("Dispatch one: %v", err)
	}
	if err := d.Dispatch(context.Background(), long, long); err != nil {
		t.Fatalf("Dispatch batch: %v", err)
	}
	out, err := c.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	if n := out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)]; n != "3" {
		t.Errorf("delayed messages %s, want 3", n)
	}
}

func TestDelaySeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		delay time.Duration
		want  int32
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2},
		{899 * time.Second, 899}, {900 * time.Second, 900}, {900*time.Second + 1, 900}, {2 * time.Hour, 900},
	} {
		if got := sqsbackend.DelaySeconds(tc.delay); got != tc.want {
			t.Errorf("DelaySeconds(%s) = %d, want %d", tc.delay, got, tc.want)
		}
	}
}

// queueCounts returns ApproximateNumberOfMessages and ...NotVisible.
func queueCounts(t *testing.T, c *sqs.Client, url string) (visible, notVisible string) {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)],
		out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)]
}

// waitEmpty waits until the queue holds no message, visible or not.
func waitEmpty(t *testing.T, c *sqs.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, nv := queueCounts(t, c, url)
		if v == "0" && nv == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not empty: %s visible, %s not visible", v, nv)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestVisibilityIsExtendedWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	pc, counter := awstest.Clients(t)
	url := newQueue(t, c, 2*time.Second)
	var calls atomic.Int32
	finished := make(chan struct{})
	startPoller(t, pc.SQS, url, func(ctx context.Context, item dispatch.WorkItem) error {
		if calls.Add(1) == 1 {
			defer close(finished)
		}
		time.Sleep(5 * time.Second)
		return nil
	}, sqsbackend.PollerOptions{VisibilityTimeout: 2 * time.Second})
	if err := sqsbackend.NewDispatcher(c.SQS, url).Dispatch(context.Background(), dispatch.Message{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: "exec-slow"}}); err != nil {
		t.Fatalf("Dispatch: %v", err)
	}
	select {
	case <-finished:
	case <-time.After(backendtest.Timeout):
		t.Fatalf("handler never finished")
	}
	waitEmpty(t, c.SQS, url)
	if n := calls.Load(); n != 1 {
		t.Fatalf("handled %d times, want once", n)
	}
	if n := counter.Snapshot()["SQS.ChangeMessageVisibility"]; n < 2 {
		t.Errorf("%d ChangeMessageVisibility calls, want at least 2 for a 5 s handler and 2 s visibility", n)
	}
}

func TestMalformedBodyEndsInPoisonQueue(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	work, poison := awstest.Name(t, "work"), awstest.Name(t, "poison")
	urls := awstest.Queues(t, c,
		schema.Queue{Name: poison, VisibilityTimeout: 30 * time.Second, Retention: time.Hour},
		schema.Queue{Name: work, VisibilityTimeout: time.Second, Retention: time.Hour, RedriveTo: poison, MaxReceiveCount: 2})
	var calls atomic.Int32
	logs := startPoller(t, c.SQS, urls[work], func(context.Context, dispatch.WorkItem) error {
		calls.Add(1)
		return nil
	}, sqsbackend.PollerOptions{VisibilityTimeout: time.Second})
	const secret = "garbage-s3cr3t"
	bodies := []string{"{not json " + secret, `{"tenantId":"` + secret + `"}`}
	for _, body := range bodies {
		if _, err := c.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(urls[work]), MessageBody: aws.String(body)}); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
	}
	got := drain(t, c.SQS, urls[poison], len(bodies), 20*time.Second)
	if len(got) != len(bodies) {
		t.Fatalf("%d of %d malformed messages reached the poison queue", len(got), len(bodies))
	}
	for _, m := range got {
		if b := aws.ToString(m.Body); b != bodies[0] && b != bodies[1] {
			t.Errorf("poison queue holds %q", b)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler called %d times for malformed bodies", n)
	}
	var malformed int
	for _, line := range logs.Lines() {
		if strings.Contains(line, secret) {
			t.Errorf("log line quotes the body: %s", line)
		}
		var rec struct {
			Event     string `json:"event"`
			Level     string `json:"level"`
			MessageID string `json:"message_id"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Event == "work_item_malformed" {
			malformed++
			if rec.Level != "ERROR" || rec.MessageID == "" {
				t.Errorf("work_item_malformed logged as %s with message_id %q", rec.Level, rec.MessageID)
			}
		}
	}
	if malformed < 2*len(bodies) {
		t.Errorf("%d work_item_malformed events, want at least %d (one per receive)", malformed, 2*len(bodies))
	}
}

func TestShutdownWaitsForHandlers(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	var live atomic.Bool
	p := sqsbackend.NewPoller(c.SQS, url, func(ctx context.Context, _ dispatch.WorkItem) error {
		close(started)
		<-release
		live.Store(ctx.Err() == nil)
		return nil
	}, sqsbackend.PollerOptions{WaitTimeSeconds: 1})
	done, cancel := runWithOneItem(t, c, url, p, started, "exec-drain")
	cancel() // Run's context ends while the handler is in flight
	select {
	case <-done:
		t.Fatalf("Run returned while a handler was running")
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return after the handler did")
	}
	if !live.Load() {
		t.Errorf("the handler's context was cancelled with Run's")
	}
	waitEmpty(t, c.SQS, url)
}

func TestDrainTimeoutCancelsHandlers(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	started := make(chan struct{})
	p := sqsbackend.NewPoller(c.SQS, url, func(ctx context.Context, _ dispatch.WorkItem) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, sqsbackend.PollerOptions{WaitTimeSeconds: 1, DrainTimeout: 300 * time.Millisecond, RetryDelay: time.Second})
	done, cancel := runWithOneItem(t, c, url, p, started, "exec-cut")
	cancel() // Run's context ends while the handler is in flight
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return after the drain timeout")
	}
	// The failed message comes back after RetryDelay, not the queue's 30 s.
	got := drain(t, c.SQS, url, 1, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("the cut-short message was not redelivered")
	}
	if n := got[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]; n != "2" {
		t.Errorf("ApproximateReceiveCount %s, want 2", n)
	}
}

// fakeSQS answers SendMessageBatch refusing the entries whose body
// contains "refuse", and fails SendMessage calls with a server error.
func fakeSQS(t *testing.T) *sqs.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SendMessageBatch") {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#InvalidAddress","message":"no such queue"}`)
			return
		}
		var in struct {
			Entries []struct{ Id, MessageBody string }
		}
		if err := json.Unmarshal(b, &in); err != nil {
			t.Errorf("fake SQS: %v", err)
		}
		type entry struct {
			Id, MessageId, Code string `json:",omitempty"`
			SenderFault         bool   `json:",omitempty"`
		}
		out := struct{ Successful, Failed []entry }{Successful: []entry{}, Failed: []entry{}}
		for _, e := range in.Entries {
			if strings.Contains(e.MessageBody, "refuse") {
				out.Failed = append(out.Failed, entry{Id: e.Id, Code: "InvalidMessageContents", SenderFault: true})
			} else {
				out.Successful = append(out.Successful, entry{Id: e.Id, MessageId: "m-" + e.Id})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
}

func TestRefusedEntriesAreReported(t *testing.T) {
	t.Parallel()
	buf, log := logtest.New()
	d := sqsbackend.NewDispatcher(fakeSQS(t), "http://fake/q", sqsbackend.WithLogger(log))
	var msgs []dispatch.Message
	for i := range 23 {
		id := "exec-ok"
		if i%10 == 3 { // items 3 and 13, in the first and second batch
			id = "exec-refuse"
		}
		msgs = append(msgs, dispatch.Message{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: id}})
	}
	err := d.Dispatch(context.Background(), msgs...)
	var se *sqsbackend.SendError
	if !errors.As(err, &se) {
		t.Fatalf("Dispatch returned %v, want a *SendError", err)
	}
	if se.Failed != 2 || se.Total != 23 || len(se.Items) != 2 || se.Items[0].ExecutionID != "exec-refuse" {
		t.Errorf("SendError %+v, want 2 of 23 refused", se)
	}
	if !strings.Contains(err.Error(), "2 of 23") || !strings.Contains(err.Error(), "InvalidMessageContents") {
		t.Errorf("error %q does not name the count and code", err)
	}
	if n := strings.Count(buf.String(), `"event":"dispatch_entry_failed"`); n != 2 {
		t.Errorf("%d dispatch_entry_failed events, want 2", n)
	}

	// A call that fails as a whole reports its messages, and its cause.
	err = d.Dispatch(context.Background(), msgs[0])
	if !errors.As(err, &se) || se.Failed != 1 || se.Total != 1 || se.Err == nil {
		t.Errorf("single send failure: %v (%+v)", err, se)
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := dispatch.Message{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: "e"}}
	if err := sqsbackend.NewDispatcher(client, srv.URL).Dispatch(ctx, msg, msg); !errors.Is(err, context.Canceled) {
		t.Errorf("Dispatch returned %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("%d calls reached SQS", calls)
	}
}

// runWithOneItem runs p, dispatches one work item for executionID to url
// and waits until its handler has started (it closes started). It returns
// Run's result and the cancel of Run's context.
func runWithOneItem(t *testing.T, c awsclient.Clients, url string, p *sqsbackend.Poller, started <-chan struct{}, executionID string) (<-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if err := sqsbackend.NewDispatcher(c.SQS, url).Dispatch(context.Background(), dispatch.Message{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: executionID}}); err != nil {
		cancel()
		t.Fatalf("Dispatch: %v", err)
	}
	select {
	case <-started:
	case <-time.After(backendtest.Timeout):
		cancel()
		t.Fatalf("handler never started")
	}
	return done, cancel
}
