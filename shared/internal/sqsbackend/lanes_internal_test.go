package sqsbackend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/dispatch"
)

// TestLanesBoundStarvation walks the receive plan of a poller with an
// urgent queue: urgent first while it has messages, the work queue every
// WorkEvery-th receive; once the urgent queue is empty, long polls of
// the work queue with a probe of the urgent queue after WorkEvery-1 of
// them or after one that did not fill up.
func TestLanesBoundStarvation(t *testing.T) {
	l := &lanes{work: "w", urgent: "u", wait: 20}
	step := func(full bool, urgentHas bool) string {
		url, wait := l.next()
		n := 0
		if url == "w" && full || url == "u" && urgentHas {
			n = 10
		}
		l.got(url, 10, n)
		return fmt.Sprintf("%s%d", url, wait)
	}
	var got []string
	for range 8 { // both lanes have a backlog
		got = append(got, step(true, true))
	}
	if want := []string{"u0", "u0", "u0", "w0", "u0", "u0", "u0", "w0"}; !slices.Equal(got, want) {
		t.Fatalf("both lanes busy: receives %v, want %v", got, want)
	}
	got = nil
	for range 9 { // the urgent lane runs dry, the work queue keeps a backlog
		got = append(got, step(true, false))
	}
	if want := []string{"u0", "w20", "w20", "w20", "u0", "w20", "w20", "w20", "u0"}; !slices.Equal(got, want) {
		t.Fatalf("urgent empty: receives %v, want %v", got, want)
	}
	got = nil
	for range 6 { // both idle: a long poll of the work queue, a probe after each
		got = append(got, step(false, false))
	}
	if want := []string{"w20", "u0", "w20", "u0", "w20", "u0"}; !slices.Equal(got, want) {
		t.Fatalf("idle: receives %v, want %v", got, want)
	}
	got = append(got[:0], step(false, true), step(false, true)) // urgent work arrives
	if want := []string{"w20", "u0"}; !slices.Equal(got, want) {
		t.Fatalf("urgent arrives: receives %v, want %v", got, want)
	}
	if url, _ := l.next(); url != "u" {
		t.Fatalf("after urgent messages came: next receive from %s, want the urgent queue", url)
	}

	off := &lanes{work: "w", wait: 20}
	for range 5 {
		if url, wait := off.next(); url != "w" || wait != 20 {
			t.Fatalf("no urgent lane: receive from %s waiting %d, want w and 20", url, wait)
		}
		off.got("w", 10, 0)
	}
}

// TestPollerReceivesUrgentFirst: with a backlog on both queues, a poller
// handling one message at a time takes three urgent items for each
// normal one, and normal work is not starved. (Before the urgent lane,
// a single queue: urgent items waited behind the whole backlog.)
func TestPollerReceivesUrgentFirst(t *testing.T) {
	q, c := newFakeQueue(t)
	for i := range 6 {
		q.push(fmt.Sprint("n", i))
		q.pushUrgent(fmt.Sprint("u", i))
	}
	var mu sync.Mutex
	var order []string
	stop, _ := runPoller(t, c, func(_ context.Context, item dispatch.WorkItem) error {
		mu.Lock()
		order = append(order, item.ExecutionID)
		mu.Unlock()
		return nil
	}, PollerOptions{Concurrency: 1, WaitTimeSeconds: 1, UrgentURL: urgentURL})
	eventually(t, "12 items handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 12 })
	stop()
	want := []string{"u0", "u1", "u2", "n0", "u3", "u4", "u5", "n1", "n2", "n3", "n4", "n5"}
	if !slices.Equal(order, want) {
		t.Fatalf("handled %v, want %v", order, want)
	}
	q.get(func(q *fakeQueue) {
		if len(q.deleted) != 12 {
			t.Errorf("%d deletes, want 12", len(q.deleted))
		}
	})
}

// TestPollerWithoutUrgentLaneSendsNothingMore: without queue.urgent-url
// every receive is a long poll of the work queue, as before.
func TestPollerWithoutUrgentLaneSendsNothingMore(t *testing.T) {
	q, c := newFakeQueue(t)
	q.push("n0", "n1")
	stop, _ := runPoller(t, c, func(context.Context, dispatch.WorkItem) error { return nil }, PollerOptions{Concurrency: 1, WaitTimeSeconds: 3})
	eventually(t, "4 receives", func() bool { n := 0; q.get(func(q *fakeQueue) { n = q.receives }); return n >= 4 })
	stop()
	q.get(func(q *fakeQueue) {
		for url, waits := range q.waits {
			if url != fakeURL || slices.ContainsFunc(waits, func(w int32) bool { return w != 3 }) {
				t.Errorf("receives of %s waiting %v, want only long polls (3 s) of %s", url, waits, fakeURL)
			}
		}
	})
}

// sent is one send request a fake SQS recorded: its queue and how many
// entries.
type sent struct {
	url string
	n   int
}

// recordingSQS accepts every send and records where each went.
func recordingSQS(t *testing.T) (*sqs.Client, func() []sent) {
	var mu sync.Mutex
	var got []sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		var in struct {
			QueueUrl string
			Entries  []struct{ Id string }
		}
		_ = json.Unmarshal(b, &in)
		mu.Lock()
		got = append(got, sent{in.QueueUrl, max(len(in.Entries), 1)})
		mu.Unlock()
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SendMessageBatch") {
			type entry struct{ Id, MessageId string }
			out := struct{ Successful, Failed []entry }{Failed: []entry{}}
			for _, e := range in.Entries {
				out.Successful = append(out.Successful, entry{e.Id, "m-" + e.Id})
			}
			_ = json.NewEncoder(w).Encode(out)
			return
		}
		_, _ = io.WriteString(w, `{"MessageId":"m"}`)
	}))
	t.Cleanup(srv.Close)
	return sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
			Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1}), func() []sent {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(got)
		}
}

func prioritized(prios ...int) []dispatch.Message {
	var msgs []dispatch.Message
	for i, p := range prios {
		msgs = append(msgs, dispatch.Message{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: fmt.Sprint("e", i), Priority: p}})
	}
	return msgs
}

// TestDispatcherRoutesUrgentItems: an item of priority at most the
// threshold goes to the urgent queue, the rest to the work queue, one
// batch per queue; without an urgent lane every request goes to the
// work queue exactly as before.
func TestDispatcherRoutesUrgentItems(t *testing.T) {
	ctx := context.Background()
	c, got := recordingSQS(t)
	off := NewDispatcher(c, "work", WithUrgentLane("", 1))
	if err := off.Dispatch(ctx, prioritized(1)...); err != nil {
		t.Fatal(err)
	}
	if err := off.Dispatch(ctx, prioritized(1, 2, 3, 1, 5)...); err != nil {
		t.Fatal(err)
	}
	if want := []sent{{"work", 1}, {"work", 5}}; !slices.Equal(got(), want) {
		t.Fatalf("without an urgent lane: sends %v, want %v", got(), want)
	}

	c, got = recordingSQS(t)
	d := NewDispatcher(c, "work", WithUrgentLane("urgent", 2))
	for _, p := range []int{1, 2, 3, 0} {
		if err := d.Dispatch(ctx, prioritized(p)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Dispatch(ctx, prioritized(3, 1, 5, 2, 4)...); err != nil {
		t.Fatal(err)
	}
	if err := d.Dispatch(ctx, prioritized(3, 4)...); err != nil {
		t.Fatal(err)
	}
	want := []sent{{"urgent", 1}, {"urgent", 1}, {"work", 1}, {"work", 1}, {"urgent", 2}, {"work", 3}, {"work", 2}}
	if !slices.Equal(got(), want) {
		t.Fatalf("urgent at 2: sends %v, want %v", got(), want)
	}
}

// TestDeferFromPicksTheRecordsQueue: the worker function keeps a
// deferred record in the queue it came from, told by its event source
// ARN.
func TestDeferFromPicksTheRecordsQueue(t *testing.T) {
	var mu sync.Mutex
	var urls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ QueueUrl string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		urls = append(urls, in.QueueUrl)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
	work, urgent := "https://sqs.example/123/app-work", "https://sqs.example/123/app-urgent"
	d := NewDispatcher(c, work, WithUrgentLane(urgent, 1))
	for _, arn := range []string{"arn:aws:sqs:eu-west-1:123:app-urgent", "arn:aws:sqs:eu-west-1:123:app-work", ""} {
		if err := d.DeferFrom(context.Background(), arn, "r", 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := NewDispatcher(c, work).DeferFrom(context.Background(), "arn:aws:sqs:eu-west-1:123:app-urgent", "r", 5); err != nil {
		t.Fatal(err)
	}
	if want := []string{urgent, work, work, work}; !slices.Equal(urls, want) {
		t.Fatalf("visibility changes on %v, want %v", urls, want)
	}
}
