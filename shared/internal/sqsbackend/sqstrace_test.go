package sqsbackend_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
)

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceParentIsAMessageAttribute: a work item's traceparent travels
// as the traceparent message attribute, not in the body; an item without
// one (tracing off) sends no such attribute and the same body as before.
func TestTraceParentIsAMessageAttribute(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	d := sqsbackend.NewDispatcher(c.SQS, url)
	traced := dispatch.WorkItem{TenantID: "t", ExecutionID: "traced", TraceParent: testTraceParent}
	plain := dispatch.WorkItem{TenantID: "t", ExecutionID: "plain"}
	for _, msgs := range [][]dispatch.Message{{{Item: traced}}, {{Item: traced}, {Item: plain}}} {
		if err := d.Dispatch(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
	}
	got := drain(t, c.SQS, url, 3, 10*time.Second)
	if len(got) != 3 {
		t.Fatalf("received %d messages", len(got))
	}
	for _, m := range got {
		body := aws.ToString(m.Body)
		if strings.Contains(body, "traceParent") || strings.Contains(body, testTraceParent) {
			t.Errorf("body %s carries the trace context", body)
		}
		a, ok := m.MessageAttributes[sqsbackend.AttrTraceParent]
		switch {
		case strings.Contains(body, `"traced"`) && aws.ToString(a.StringValue) != testTraceParent:
			t.Errorf("traced item's attribute %q", aws.ToString(a.StringValue))
		case strings.Contains(body, `"plain"`) && ok:
			t.Errorf("an item without trace context has attribute %q", aws.ToString(a.StringValue))
		}
	}
}

// TestPollerHandsTheTraceParentOn: the poller gives the handler the
// item's traceparent from the message attribute.
func TestPollerHandsTheTraceParentOn(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, 30*time.Second)
	seen := make(chan dispatch.WorkItem, 1)
	startPoller(t, c.SQS, url, func(_ context.Context, item dispatch.WorkItem) error {
		seen <- item
		return nil
	}, sqsbackend.PollerOptions{})
	item := dispatch.WorkItem{TenantID: "t", ExecutionID: "e", TraceParent: testTraceParent}
	if err := sqsbackend.NewDispatcher(c.SQS, url).Dispatch(context.Background(), dispatch.Message{Item: item}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-seen:
		if got != item {
			t.Fatalf("handler got %+v, want %+v", got, item)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}
}

// TestEventTraceParent: the worker function reads the attribute from a
// Lambda SQS event's message.
func TestEventTraceParent(t *testing.T) {
	v := testTraceParent
	m := events.SQSMessage{MessageAttributes: map[string]events.SQSMessageAttribute{
		sqsbackend.AttrTraceParent: {DataType: "String", StringValue: &v}}}
	if got := sqsbackend.EventTraceParent(m); got != testTraceParent {
		t.Fatalf("got %q", got)
	}
	if got := sqsbackend.EventTraceParent(events.SQSMessage{}); got != "" {
		t.Fatalf("no attribute: got %q", got)
	}
}
