package sqsbackend_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// TestConsumerDeliversLambdaShapedBatches: the consumer hands received
// messages to the batch handler as Lambda's SQS event source would (ids,
// receipt handles, bodies, receive counts, message attributes, the
// queue's ARN), deletes what the handler did not report as failed, and
// delivers a reported failure again with a higher receive count.
func TestConsumerDeliversLambdaShapedBatches(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, time.Second)
	ctx := context.Background()
	for i := range 3 {
		if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("body-" + strconv.Itoa(i)),
			MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("t" + strconv.Itoa(i))}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string][]events.SQSMessage{} // by body
	done := make(chan struct{})
	h := func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			seen[r.Body] = append(seen[r.Body], r)
			if r.Body == "body-1" && len(seen[r.Body]) == 1 {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
		}
		if len(seen) == 3 && len(seen["body-1"]) == 2 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return resp, nil
	}
	buf, log := logtest.New()
	cons := sqsbackend.NewConsumer(c.SQS, url, h, sqsbackend.ConsumerOptions{WaitTimeSeconds: 1, Logger: log})
	if cons.QueueURL() != url {
		t.Errorf("QueueURL %q", cons.QueueURL())
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("not every message handled (and the failed one again): %v\n%s", seen, buf.String())
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for body, recs := range seen {
		r := recs[0]
		if r.MessageId == "" || r.ReceiptHandle == "" || r.EventSource != "aws:sqs" || !strings.HasPrefix(r.EventSourceARN, "arn:") ||
			r.Md5OfBody == "" || r.Attributes["ApproximateReceiveCount"] != "1" || r.AWSRegion == "" {
			t.Errorf("%s: record %+v", body, r)
		}
		if want := "t" + strings.TrimPrefix(body, "body-"); r.MessageAttributes["tenant"].StringValue == nil || *r.MessageAttributes["tenant"].StringValue != want {
			t.Errorf("%s: message attributes %+v", body, r.MessageAttributes)
		}
		if body != "body-1" && len(recs) != 1 {
			t.Errorf("%s delivered %d times, want once (deleted after success)", body, len(recs))
		}
	}
	if again := seen["body-1"]; len(again) < 2 || again[1].Attributes["ApproximateReceiveCount"] != "2" {
		t.Errorf("the failed message came back as %+v", again)
	}
}

// TestConsumerHandlerErrorDeletesNothing: a failed batch (error or panic)
// stays in the queue for its next delivery.
func TestConsumerHandlerErrorDeletesNothing(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	url := newQueue(t, c, time.Second)
	ctx := context.Background()
	if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	h := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return events.SQSEventResponse{}, errors.New("boom")
		}
		panic("boom again")
	}
	cons := sqsbackend.NewConsumer(c.SQS, url, h, sqsbackend.ConsumerOptions{WaitTimeSeconds: 1})
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Run(runCtx) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler called %d times, want the failed message delivered again", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-stopped
}

// TestRedriveTargetURL: the work queue's redrive target is its poison
// queue; a queue without a redrive policy has none.
func TestRedriveTargetURL(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	n := awstest.Names(t)
	urls := awstest.Queues(t, c, schema.Queues(n)...)
	ctx := context.Background()
	got, err := sqsbackend.RedriveTargetURL(ctx, c.SQS, urls[n.WorkQueue])
	if err != nil || got != urls[n.PoisonQueue] {
		t.Errorf("work queue redrives to %q (%v), want %q", got, err, urls[n.PoisonQueue])
	}
	got, err = sqsbackend.RedriveTargetURL(ctx, c.SQS, urls[n.DLQQueue])
	if err != nil || got != "" {
		t.Errorf("DLQ queue redrives to %q (%v), want none", got, err)
	}
}
