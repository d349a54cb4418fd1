package lambdahandlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/metrics"
	"github.com/qasync/qasync/shared/store"
)

// metricCount counts the EMF lines carrying metric name with value 1.
func metricCount(t *testing.T, buf *bytes.Buffer, name, kind string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("EMF line %q: %v", line, err)
		}
		if m[name] == 1.0 && m["Kind"] == kind {
			n++
		}
	}
	return n
}

// envelopeOf decodes the envelope of an SQS fixture's first record.
func envelopeOf(t *testing.T, b []byte) (events.SQSEvent, deadletter.Envelope) {
	t.Helper()
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	var env deadletter.Envelope
	if err := json.Unmarshal([]byte(ev.Records[0].Body), &env); err != nil {
		t.Fatal(err)
	}
	return ev, env
}

// TestDLQEnvelopeFixture: the envelope fixture through the real handler
// stores an execution record and marks the FAILED, publish-pending
// execution DLQ; a second delivery stores nothing, changes nothing and
// emits no metric.
func TestDLQEnvelopeFixture(t *testing.T) {
	envr, logs := openMem(t, nil)
	rt := envr.p.Runtime
	payloadFixture := fixture(t, "dlq-envelope.json")
	sqsEv, env := envelopeOf(t, payloadFixture)
	seed(t, rt, env.ExecutionID, env.PipelineID, `{"failAttempts":1,"failMode":"non_retryable"}`, func(e *store.Execution) {
		e.Status, e.DLQPending, e.StepIndex, e.StepName = store.Failed, true, env.StepIndex, env.StepName
		e.LastTransitionKey = env.TransitionKey
		e.Error = &store.Failure{Code: env.ErrorCode, Message: env.ErrorMessage, TerminalReason: env.TerminalReason}
	})
	rec := envr.p.Seams.Recorder // the configured recorder, as the dlq function gets it
	if rec == nil {
		t.Fatal("the memory providers have no dead-letter recorder")
	}
	var emf bytes.Buffer
	h := lambdahandlers.DLQ(rt, rec, metrics.New(&emf, "qasync-test"), envr.log)

	var resp events.SQSEventResponse
	invoke(t, context.Background(), h, payloadFixture, &resp)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", failureIDs(resp))
	}
	r, err := rec.Get(context.Background(), env.TransitionKey)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != deadletter.KindExecution || r.TenantID != fixtureTenant || r.ExecutionID != env.ExecutionID ||
		r.Envelope == nil || *r.Envelope != env || r.RecordedAt.IsZero() || r.ExpiresAt.Sub(r.RecordedAt) != lambdahandlers.RecordRetention {
		t.Fatalf("record %+v", r)
	}
	row := get(t, rt, env.ExecutionID)
	if row.Status != store.DLQ || row.DLQPending {
		t.Fatalf("execution %s pending=%v, want DLQ", row.Status, row.DLQPending)
	}

	var again events.SQSEventResponse
	invoke(t, context.Background(), h, payloadFixture, &again)
	if len(again.BatchItemFailures) != 0 {
		t.Fatalf("second delivery failures %v", failureIDs(again))
	}
	if after := get(t, rt, env.ExecutionID); after.Version != row.Version || after.Status != store.DLQ {
		t.Errorf("second delivery changed the execution: v%d -> v%d %s", row.Version, after.Version, after.Status)
	}
	if n := metricCount(t, &emf, lambdahandlers.MetricDeadLetterRecords, deadletter.KindExecution); n != 1 {
		t.Errorf("%d DeadLetterRecords metrics, want 1", n)
	}
	alerts := logEvents(t, logs, "dead_letter_recorded")
	if len(alerts) != 2 || alerts[0]["created"] != true || alerts[1]["created"] != false ||
		alerts[0]["level"] != "ERROR" || alerts[0]["transition_key"] != env.TransitionKey ||
		alerts[0]["terminal_reason"] != env.TerminalReason || alerts[0]["kind"] != deadletter.KindExecution ||
		alerts[0]["marked_dlq"] != true || alerts[1]["marked_dlq"] != false {
		t.Errorf("alerts %v", alerts)
	}
	if strings.Contains(logs.String(), env.ErrorMessage) || strings.Contains(logs.String(), sqsEv.Records[0].Body) {
		t.Error("the body reached the logs")
	}
}

// TestDLQPoisonFixture: a work item from the poison queue is recorded as
// poison with its ids and receive count; its execution is not touched.
func TestDLQPoisonFixture(t *testing.T) {
	envr, logs := openMem(t, nil)
	rt := envr.p.Runtime
	b := fixture(t, "dlq-poison-item.json")
	ev, items := sqsItems(t, b)
	item := items[0]
	seeded := seed(t, rt, item.ExecutionID, item.PipelineID, orderInput, func(e *store.Execution) {
		e.NextDueAt = time.Now().Add(time.Hour) // not due: the local dispatcher must not pick it up either
	})
	rec := envr.p.Seams.Recorder
	if rec == nil {
		t.Fatal("the memory providers have no dead-letter recorder")
	}
	var emf bytes.Buffer
	var resp events.SQSEventResponse
	invoke(t, context.Background(), lambdahandlers.DLQ(rt, rec, metrics.New(&emf, "qasync-test"), envr.log), b, &resp)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", failureIDs(resp))
	}
	msgID := ev.Records[0].MessageId
	r, err := rec.Get(context.Background(), "poison:"+msgID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != deadletter.KindPoison || r.TenantID != fixtureTenant || r.ExecutionID != item.ExecutionID ||
		r.MessageID != msgID || r.ReceiveCount != 5 || r.Envelope != nil {
		t.Fatalf("record %+v", r)
	}
	after := get(t, rt, item.ExecutionID)
	if after.Version != seeded.Version || after.Status != seeded.Status || !after.NextDueAt.Equal(seeded.NextDueAt) {
		t.Errorf("the execution changed: %+v", after)
	}
	if n := metricCount(t, &emf, lambdahandlers.MetricDeadLetterRecords, deadletter.KindPoison); n != 1 {
		t.Errorf("%d poison metrics", n)
	}
	alerts := logEvents(t, logs, "dead_letter_recorded")
	if len(alerts) != 1 || alerts[0]["message_id"] != msgID || alerts[0]["execution_id"] != item.ExecutionID || alerts[0]["receive_count"] != 5.0 {
		t.Errorf("alerts %v", alerts)
	}
}

// TestDLQGarbageAndFailures: a body that is neither an envelope nor a
// work item is recorded as poison without ids (body never logged); a
// record the recorder cannot store is a batch item failure.
func TestDLQGarbageAndFailures(t *testing.T) {
	rt, _, _, logs := unitRuntime(t, engine.Config{})
	rec := newMemRecorder()
	h := lambdahandlers.DLQ(rt, rec, nil, rt.Logger()) // nil metrics: a no-op
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1", Body: "s3cr3t not json"}}}
	resp, err := h(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v %v", failureIDs(resp), err)
	}
	r, err := rec.Get(context.Background(), "poison:m-1")
	if err != nil || r.Kind != deadletter.KindPoison || r.TenantID != "" || r.ExecutionID != "" {
		t.Fatalf("record %+v, %v", r, err)
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Error("the body reached the logs")
	}

	rec.failPut = true
	ev.Records = append(ev.Records, events.SQSMessage{MessageId: "m-2", Body: `{"tenantId":"t","executionId":"e"}`})
	resp, err = h(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 2 {
		t.Fatalf("failures %v, err %v", failureIDs(resp), err)
	}
	if len(logEvents(t, logs, "dead_letter_record_failed")) != 2 {
		t.Errorf("no dead_letter_record_failed events")
	}
}

// TestDLQEnvelopeOfRedrivenExecution: an envelope whose execution was
// re-driven meanwhile is recorded, and the execution is left alone.
func TestDLQEnvelopeOfRedrivenExecution(t *testing.T) {
	rt, _, _, _ := unitRuntime(t, engine.Config{})
	_, env := envelopeOf(t, fixture(t, "dlq-envelope.json"))
	seeded := seed(t, rt, env.ExecutionID, drillPipelineID, `{}`, func(e *store.Execution) {
		e.StepIndex, e.StepName, e.Attempt, e.RedriveCount = env.StepIndex, env.StepName, 2, 1
	})
	rec := newMemRecorder()
	resp, err := lambdahandlers.DLQ(rt, rec, nil, rt.Logger())(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: mustJSON(t, env)}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v %v", failureIDs(resp), err)
	}
	if after := get(t, rt, env.ExecutionID); after.Version != seeded.Version || after.Status != store.Queued {
		t.Errorf("re-driven execution changed: %s v%d", after.Status, after.Version)
	}
	if rec.len() != 1 {
		t.Errorf("%d records", rec.len())
	}
}

// TestDLQNeedsRecorder: DLQ refuses a nil recorder.
func TestDLQNeedsRecorder(t *testing.T) {
	rt, _, _, _ := unitRuntime(t, engine.Config{})
	defer func() {
		if recover() == nil {
			t.Error("DLQ accepted a nil recorder")
		}
	}()
	lambdahandlers.DLQ(rt, nil, nil, nil)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
