package wiring_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

type line struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type batch struct {
	Lines []line `json:"lines"`
}

type accepted struct {
	Lines    []line `json:"lines"`
	Rejected int    `json:"rejected"`
}

// importPipeline keeps the lines with a SKU and rejects the others; a
// batch with no valid line is rejected as a whole stream.
var importPipeline = pipeline.Pipeline{ID: "test.import", Steps: []pipeline.Step{
	pipeline.NewStep("validate", func(ctx context.Context, info pipeline.StepInfo, in batch) (accepted, error) {
		out := accepted{Lines: []line{}}
		for _, l := range in.Lines {
			if l.SKU == "" {
				if err := reject.RejectItem(ctx, info, l, pipeline.NonRetryable("missing_sku", errors.New("line has no sku"))); err != nil {
					return accepted{}, err
				}
				out.Rejected++
				continue
			}
			out.Lines = append(out.Lines, l)
		}
		if len(out.Lines) == 0 {
			if err := reject.RejectStream(ctx, info, len(in.Lines), errors.New("no valid line")); err != nil {
				return accepted{}, err
			}
		}
		return out, nil
	}),
}}

// openMemory opens a memory runtime serving importPipeline with the
// memory Item Reject Sink; it returns the set and its captured log.
func openMemory(t *testing.T, adjust func(*config.Config)) (*wiring.Process, *logtest.Buffer) {
	t.Helper()
	c := config.Default()
	c.StateProvider, c.ItemRejectProvider = "memory", "memory"
	c.MaxRetries, c.RetryDelay, c.RetryMaxDelay = 1, 20*time.Millisecond, 20*time.Millisecond
	if adjust != nil {
		adjust(&c)
	}
	reg, err := pipeline.NewRegistry(importPipeline)
	if err != nil {
		t.Fatal(err)
	}
	buf, log := logtest.New()
	set, err := open(context.Background(), c, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close(context.Background()) })
	return set, buf
}

// run submits in and waits for a terminal status.
func run(t *testing.T, set *wiring.Process, in any) store.Execution {
	t.Helper()
	p, err := payload.JSON(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := set.Runtime.Submit(ctx, engine.SubmitRequest{TenantID: "acme", PipelineID: importPipeline.ID, Input: p})
	if err != nil {
		t.Fatal(err)
	}
	key := store.Key{TenantID: "acme", ExecutionID: res.Execution.ExecutionID}
	deadline := time.Now().Add(10 * time.Second)
	for {
		row, err := set.Runtime.Status(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status == store.Succeeded || row.Status == store.DLQ {
			return row
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution still %s", row.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fingerprint(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestRejectedItemsContinue: a step rejects single items and the whole
// stream, goes on and succeeds; the envelopes carry every field, and the
// item's bytes only with item-reject.include-payload.
func TestRejectedItemsContinue(t *testing.T) {
	t.Parallel()
	for _, include := range []bool{false, true} {
		set, _ := openMemory(t, func(c *config.Config) { c.ItemRejectIncludePayload = include })
		bad := line{SKU: "", Qty: 3}
		row := run(t, set, batch{Lines: []line{{SKU: "pen", Qty: 1}, bad, {SKU: "ink", Qty: 2}}})
		if row.Status != store.Succeeded {
			t.Fatalf("include=%v: status %s (%+v), want SUCCEEDED", include, row.Status, row.Error)
		}
		_, out, err := set.Runtime.Result(context.Background(), row.Key())
		if err != nil {
			t.Fatal(err)
		}
		if got := string(out.Data); got != `{"lines":[{"sku":"pen","qty":1},{"sku":"ink","qty":2}],"rejected":1}` {
			t.Fatalf("result %s", got)
		}
		envs := rejectMemory(set).Envelopes()
		if len(envs) != 1 {
			t.Fatalf("include=%v: %d envelopes, want 1: %+v", include, len(envs), envs)
		}
		env := envs[0]
		want := reject.Envelope{
			TenantID: "acme", ExecutionID: row.ExecutionID, PipelineID: importPipeline.ID, StepIndex: 0, StepName: "validate",
			Scope: reject.ScopeItem, Attempt: 1, TransitionKey: row.ExecutionID + ":0:1",
			ErrorCode: "missing_sku", ErrorMessage: "line has no sku", Fingerprint: fingerprint(t, bad),
		}
		if include {
			want.Payload, _ = json.Marshal(bad)
		}
		if env.RejectedAt.IsZero() {
			t.Errorf("RejectedAt not set")
		}
		env.RejectedAt = time.Time{}
		if string(env.Payload) != string(want.Payload) || (env.Payload == nil) != (want.Payload == nil) {
			t.Errorf("include=%v: payload %q, want %q", include, env.Payload, want.Payload)
		}
		env.Payload, want.Payload = nil, nil
		if !reflect.DeepEqual(env, want) {
			t.Errorf("include=%v: envelope\n got  %+v\n want %+v", include, env, want)
		}

		row = run(t, set, batch{Lines: []line{{SKU: ""}, {SKU: "", Qty: 9}}})
		if row.Status != store.Succeeded {
			t.Fatalf("all rejected: status %s", row.Status)
		}
		envs = rejectMemory(set).Envelopes()[1:]
		if len(envs) != 3 || envs[2].Scope != reject.ScopeStream || envs[2].ItemCount != 2 || envs[2].ErrorCode != reject.CodeRejected ||
			envs[2].Fingerprint != "" || envs[2].Payload != nil || envs[2].ExecutionID != row.ExecutionID {
			t.Errorf("stream reject: %+v", envs)
		}
	}
}

// TestRejectPublishFailurePolicy: with a failing sink, CONTINUE logs
// reject_publish_failed and the execution succeeds; FAIL_PIPELINE fails
// the step retryably: it succeeds on the retry once the sink works, and
// dead-letters with code item_reject_publish_failed when it never does.
func TestRejectPublishFailurePolicy(t *testing.T) {
	t.Parallel()
	in := batch{Lines: []line{{SKU: "pen", Qty: 1}, {SKU: ""}}}
	sinkDown := errors.New("sink down")

	set, buf := openMemory(t, nil)
	rejectMemory(set).FailWith(sinkDown)
	if row := run(t, set, in); row.Status != store.Succeeded || row.Attempt != 1 {
		t.Fatalf("CONTINUE: status %s attempt %d, want SUCCEEDED on attempt 1", row.Status, row.Attempt)
	}
	if !strings.Contains(buf.String(), `"event":"`+reject.EventPublishFailed+`"`) {
		t.Errorf("CONTINUE: no %s event logged", reject.EventPublishFailed)
	}

	set, _ = openMemory(t, func(c *config.Config) { c.ItemRejectPublishFailurePolicy = "FAIL_PIPELINE" })
	rejectMemory(set).FailWith(sinkDown)
	row := run(t, set, in)
	if row.Status != store.DLQ || row.Error == nil || row.Error.Code != reject.CodePublishFailed || row.Attempt != 2 {
		t.Fatalf("FAIL_PIPELINE, sink down: status %s attempt %d error %+v, want DLQ after 2 attempts with %s", row.Status, row.Attempt, row.Error, reject.CodePublishFailed)
	}

	set, _ = openMemory(t, func(c *config.Config) { c.ItemRejectPublishFailurePolicy = "FAIL_PIPELINE" })
	rejectMemory(set).FailTimes(1, sinkDown) // down for the first attempt, back for the retry
	row = run(t, set, in)
	if row.Status != store.Succeeded || row.Attempt != 2 {
		t.Fatalf("FAIL_PIPELINE, sink back: status %s attempt %d, want SUCCEEDED on attempt 2", row.Status, row.Attempt)
	}
	if envs := rejectMemory(set).Envelopes(); len(envs) != 1 || envs[0].Attempt != 2 {
		t.Fatalf("envelopes %+v, want the retry's one", envs)
	}
}
