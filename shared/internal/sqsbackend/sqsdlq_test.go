package sqsbackend_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// received is one message read back from the DLQ queue.
type received struct {
	env   deadletter.Envelope
	attrs map[string]types.MessageAttributeValue
}

// readQueue receives from url until want envelopes were read or wait has
// passed, deleting what it reads.
func readQueue(ctx context.Context, c *sqs.Client, url string, want int, wait time.Duration) ([]received, error) {
	msgs, err := awstest.Receive(ctx, c, url, want, wait)
	got := make([]received, 0, len(msgs))
	for _, m := range msgs {
		var env deadletter.Envelope
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
			return got, err
		}
		got = append(got, received{env: env, attrs: m.MessageAttributes})
	}
	return got, err
}

func queue(t *testing.T) (*sqs.Client, string) {
	c, _ := awstest.Clients(t)
	name := awstest.Name(t, "dlq")
	urls := awstest.Queues(t, c, schema.Queue{Name: name, VisibilityTimeout: 30 * time.Second, Retention: time.Hour})
	return c.SQS, urls[name]
}

func checkAttrs(t *testing.T, r received) {
	t.Helper()
	for name, want := range map[string]string{sqsbackend.AttrTenant: r.env.TenantID, sqsbackend.AttrTerminalReason: r.env.TerminalReason} {
		a, ok := r.attrs[name]
		if !ok {
			t.Errorf("%s: attribute %s missing (have %v)", r.env.ExecutionID, name, r.attrs)
			continue
		}
		if aws.ToString(a.DataType) != "String" || aws.ToString(a.StringValue) != want {
			t.Errorf("%s: attribute %s = %s %q, want String %q", r.env.ExecutionID, name, aws.ToString(a.DataType), aws.ToString(a.StringValue), want)
		}
	}
}

// newDLQ is the conformance factory: a DLQ publisher on a fresh queue
// and a read-back that also checks each message's attributes.
func newDLQ(t *testing.T) (deadletter.Publisher, backendtest.ReadBack[deadletter.Envelope]) {
	c, url := queue(t)
	var mu sync.Mutex
	var all []deadletter.Envelope
	return sqsbackend.NewDLQ(c, url), func(ctx context.Context, want int) ([]deadletter.Envelope, error) {
		mu.Lock()
		defer mu.Unlock()
		got, err := readQueue(ctx, c, url, want-len(all), 10*time.Second)
		for _, r := range got {
			checkAttrs(t, r)
			all = append(all, r.env)
		}
		return append([]deadletter.Envelope(nil), all...), err
	}
}

func TestAttributes(t *testing.T) {
	t.Parallel()
	c, url := queue(t)
	pub := sqsbackend.NewDLQ(c, url)
	ctx := context.Background()
	full := deadletter.Envelope{TenantID: "tenant-x", ExecutionID: "exec-full", TransitionKey: "exec-full:0:1",
		TerminalReason: "non_retryable", ErrorCode: "bad_input", FailedAt: time.Now().UTC()}
	// SQS refuses empty attribute values: an empty field leaves its
	// attribute out rather than failing the publish.
	bare := deadletter.Envelope{TenantID: "tenant-x", ExecutionID: "exec-bare", TransitionKey: "exec-bare:0:1"}
	for _, env := range []deadletter.Envelope{full, bare} {
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatalf("Publish %s: %v", env.ExecutionID, err)
		}
	}
	got, err := readQueue(ctx, c, url, 2, 10*time.Second)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("read %d messages, want 2", len(got))
	}
	for _, r := range got {
		switch r.env.ExecutionID {
		case full.ExecutionID:
			if len(r.attrs) != 2 {
				t.Errorf("attributes %v, want exactly tenant and terminal_reason", r.attrs)
			}
			checkAttrs(t, r)
		case bare.ExecutionID:
			if a, ok := r.attrs[sqsbackend.AttrTenant]; !ok || aws.ToString(a.StringValue) != "tenant-x" {
				t.Errorf("bare envelope: tenant attribute %v", r.attrs)
			}
			if _, ok := r.attrs[sqsbackend.AttrTerminalReason]; ok {
				t.Errorf("bare envelope: unexpected terminal_reason attribute %v", r.attrs)
			}
		default:
			t.Errorf("unexpected envelope %+v", r.env)
		}
	}
}
