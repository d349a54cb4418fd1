package lambdahandlers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/store"
)

const orderInput = `{"orderId":"1001","items":[{"sku":"book","qty":2}],"amountCents":4599}`

// inputFor is a valid input of pipeline p.
func inputFor(p string) string {
	if p == drillPipelineID {
		return `{"echo":"fixture"}`
	}
	return orderInput
}

// failureIDs lists the batch item failures' message ids.
func failureIDs(r events.SQSEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

// TestWorkerFixture: every record of the batch fixture names an execution
// that exists; each runs a real transition (claim, step, commit), the
// batch reports no failures, and the in-process dispatcher takes each
// execution to SUCCEEDED from there.
func TestWorkerFixture(t *testing.T) {
	env, _ := openMem(t, nil)
	rt := env.p.Runtime
	_, items := sqsItems(t, fixture(t, "worker-sqs-batch.json"))
	if len(items) < 2 {
		t.Fatalf("fixture has %d records", len(items))
	}
	for _, it := range items {
		if it.TenantID != fixtureTenant {
			t.Fatalf("fixture tenant %q", it.TenantID)
		}
		seed(t, rt, it.ExecutionID, it.PipelineID, inputFor(it.PipelineID), nil)
	}

	var resp events.SQSEventResponse
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	invoke(t, ctx, lambdahandlers.Worker(rt, env.cfg.Lease, env.log), fixture(t, "worker-sqs-batch.json"), &resp)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures %v", failureIDs(resp))
	}
	for _, it := range items {
		row := get(t, rt, it.ExecutionID)
		if row.Version < 3 || !strings.HasPrefix(row.LastTransitionKey, it.ExecutionID+":") {
			t.Errorf("%s: no transition committed: version %d, last transition %q", it.ExecutionID, row.Version, row.LastTransitionKey)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, it := range items {
		for {
			row := get(t, rt, it.ExecutionID)
			if row.Status == store.Succeeded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still %s", it.ExecutionID, row.Status)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestWorkerMarginSkipsEveryRecord: with less time left than the margin,
// no record is started (the store is never read) and all are failures.
func TestWorkerMarginSkipsEveryRecord(t *testing.T) {
	rt, hs, _, logs := unitRuntime(t, engine.Config{})
	ev, items := sqsItems(t, fixture(t, "worker-sqs-batch.json"))
	for _, it := range items {
		seed(t, rt, it.ExecutionID, it.PipelineID, inputFor(it.PipelineID), nil)
	}
	before := hs.getCount()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	resp, err := lambdahandlers.Worker(rt, time.Second, rt.Logger())(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range ev.Records {
		want = append(want, r.MessageId)
	}
	slices.Sort(want)
	if got := failureIDs(resp); !slices.Equal(got, want) {
		t.Fatalf("failures %v, want every record %v", got, want)
	}
	if n := hs.getCount() - before; n != 0 {
		t.Errorf("the store was read %d times: a record was started", n)
	}
	for _, it := range items {
		if row := get(t, rt, it.ExecutionID); row.Version != 1 || row.Status != store.Queued {
			t.Errorf("%s changed: %s v%d", it.ExecutionID, row.Status, row.Version)
		}
	}
	if n := len(logEvents(t, logs, "worker_time_exhausted")); n != len(ev.Records) {
		t.Errorf("%d worker_time_exhausted events, want %d", n, len(ev.Records))
	}
}

// TestWorkerMalformedBody: a body that is not a work item is a failure of
// that record only, logged without the body.
func TestWorkerMalformedBody(t *testing.T) {
	rt, _, _, logs := unitRuntime(t, engine.Config{})
	ev, items := sqsItems(t, fixture(t, "worker-sqs-batch.json"))
	for _, it := range items {
		seed(t, rt, it.ExecutionID, it.PipelineID, inputFor(it.PipelineID), nil)
	}
	ev.Records[1].Body = `{"tenantId":"s3cr3t-tenant"}`
	ev.Records = append(ev.Records, events.SQSMessage{MessageId: "garbage-1", Body: "not json s3cr3t"})
	resp, err := lambdahandlers.Worker(rt, time.Second, rt.Logger())(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"garbage-1", ev.Records[1].MessageId}
	slices.Sort(want)
	if got := failureIDs(resp); !slices.Equal(got, want) {
		t.Fatalf("failures %v, want %v", got, want)
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Error("a message body reached the logs")
	}
	if n := len(logEvents(t, logs, "work_item_malformed")); n != 2 {
		t.Errorf("%d work_item_malformed events, want 2", n)
	}
	if row := get(t, rt, items[0].ExecutionID); row.Version < 3 {
		t.Errorf("the well-formed record was not processed: v%d", row.Version)
	}
}

// TestWorkerProcessErrorFailsOnlyThatRecord: a backend error for one
// execution (and a panic for another) fails those records only.
func TestWorkerProcessErrorFailsOnlyThatRecord(t *testing.T) {
	rt, hs, _, logs := unitRuntime(t, engine.Config{})
	ev, items := sqsItems(t, fixture(t, "worker-sqs-batch.json"))
	if len(items) < 3 {
		t.Fatalf("fixture has %d records, want 3", len(items))
	}
	for _, it := range items {
		seed(t, rt, it.ExecutionID, it.PipelineID, inputFor(it.PipelineID), nil)
	}
	broken, panicky := items[0].ExecutionID, items[2].ExecutionID
	hs.get = func(key store.Key) error {
		switch key.ExecutionID {
		case broken:
			return errors.New("dynamodb: throttled")
		case panicky:
			panic("boom")
		}
		return nil
	}
	resp, err := lambdahandlers.Worker(rt, time.Second, rt.Logger())(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ev.Records[0].MessageId, ev.Records[2].MessageId}
	slices.Sort(want)
	if got := failureIDs(resp); !slices.Equal(got, want) {
		t.Fatalf("failures %v, want %v", got, want)
	}
	if row := get(t, rt, items[1].ExecutionID); row.Version < 3 {
		t.Errorf("the healthy record was not processed: v%d", row.Version)
	}
	if len(logEvents(t, logs, "work_item_failed")) != 1 || len(logEvents(t, logs, "work_item_panicked")) != 1 {
		t.Errorf("want one work_item_failed and one work_item_panicked event:\n%s", logs.String())
	}
}

// TestWorkerDuplicateIsSuccess: a record for an execution that is already
// finished (a duplicate delivery) or unknown is acknowledged.
func TestWorkerDuplicateIsSuccess(t *testing.T) {
	rt, _, _, _ := unitRuntime(t, engine.Config{})
	ev, items := sqsItems(t, fixture(t, "worker-sqs-batch.json"))
	seed(t, rt, items[0].ExecutionID, orderPipelineID, orderInput, func(e *store.Execution) {
		e.Status, e.NextDueAt = store.Succeeded, time.Time{}
	})
	// items[1] and items[2] do not exist: orphaned work items.
	resp, err := lambdahandlers.Worker(rt, time.Second, rt.Logger())(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, err %v", failureIDs(resp), err)
	}
	if row := get(t, rt, items[0].ExecutionID); row.Version != 1 {
		t.Errorf("a finished execution changed: v%d", row.Version)
	}
}
