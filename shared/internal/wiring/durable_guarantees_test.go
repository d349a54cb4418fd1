package wiring_test

// The guarantees issue's scenarios where DynamoDB is involved, against
// DynamoDB Local and the SQS server.

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// lostAnswers makes DynamoDB calls land and then lose their answer: for
// the first calls whose input match accepts, the real call succeeds and
// the caller gets a 500 instead. sdkRetries false answers after the SDK's
// retry loop (the runtime sees an unknown outcome); true answers inside
// it, so the SDK itself retries the write that had landed.
type lostAnswers struct {
	match      func(input any) bool
	budget     atomic.Int32
	sdkRetries bool
	injected   atomic.Int32
}

type lostKey struct{}

func (l *lostAnswers) option(stack *middleware.Stack) error {
	lost := func() error {
		l.injected.Add(1)
		resp := &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{}, Body: http.NoBody}}
		return &smithyhttp.ResponseError{Response: resp, Err: errInjected}
	}
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("qasyncLostAnswer",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if middleware.GetServiceID(ctx) != "DynamoDB" || !l.match(in.Parameters) || l.budget.Add(-1) < 0 {
				return next.HandleInitialize(ctx, in)
			}
			if l.sdkRetries {
				var once atomic.Bool
				return next.HandleInitialize(context.WithValue(ctx, lostKey{}, &once), in)
			}
			out, md, err := next.HandleInitialize(ctx, in)
			if err != nil {
				return out, md, err
			}
			return out, md, lost()
		}), middleware.Before); err != nil {
		return err
	}
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("qasyncLostAnswerAttempt",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if once, ok := ctx.Value(lostKey{}).(*atomic.Bool); ok && err == nil && once.CompareAndSwap(false, true) {
				return out, md, lost()
			}
			return out, md, err
		}), middleware.After)
}

type injectedError struct{}

func (injectedError) Error() string { return "injected: the answer was lost" }

var errInjected = injectedError{}

// isCommit reports whether a DynamoDB input is a step's leased commit
// (it records the transition key under the worker's lease).
func isCommit(in any) bool {
	u, ok := in.(*dynamodb.UpdateItemInput)
	return ok && u.UpdateExpression != nil && strings.Contains(*u.UpdateExpression, "#"+dynamo.AttrLastTransitionKey) &&
		u.ConditionExpression != nil && strings.Contains(*u.ConditionExpression, "#"+dynamo.AttrLeaseOwner+" = ")
}

// (5) A commit whose answer is lost, once after the SDK's retries (an
// unknown outcome for the runtime) and once inside them (the SDK retries
// a write that had landed and is refused): each is resolved by reading
// the row back, so no step runs twice and no attempt is lost, even with
// no retries left (a lost attempt would end worker_lost).
func TestDurableLostCommitAnswersAreResolved(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	once := pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}
	count := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			runs.Add(1)
			return in, nil
		}, pipeline.WithRetry(once))
	}
	p := pipeline.Pipeline{ID: "p.lost", Steps: []pipeline.Step{count("a"), count("b"), count("c")}}
	for _, sdk := range []bool{false, true} {
		runs.Store(0)
		lost := &lostAnswers{match: isCommit, sdkRetries: sdk}
		lost.budget.Store(2)
		d := openDurableWith(t, nil, []func(*middleware.Stack) error{lost.option}, nil, p)
		d.start()
		e := d.submit(p.ID, "k1", map[string]any{})
		got := d.await(e, store.Succeeded, 30*time.Second)
		d.stop()
		// Version: created, one claim, three commits (each claiming the next step).
		if lost.injected.Load() != 2 || runs.Load() != 3 || got.Version != 5 || got.Attempt != 1 {
			t.Fatalf("sdk retries %v: %d answers lost, %d runs, version %d attempt %d; want 2, 3 runs, version 5, attempt 1",
				sdk, lost.injected.Load(), runs.Load(), got.Version, got.Attempt)
		}
	}
}

// (11) A submit write that landed but whose answer was lost is retried by
// the SDK and refused (the row exists): the row's create token shows it is
// this very create, so it reports a new execution and dispatches it, not
// a duplicate with nothing sent.
func TestDurableSubmitRetriedAfterItLanded(t *testing.T) {
	t.Parallel()
	lost := &lostAnswers{sdkRetries: true, match: func(in any) bool {
		put, ok := in.(*dynamodb.PutItemInput)
		return ok && strings.HasSuffix(*put.TableName, "-exec")
	}}
	lost.budget.Store(1)
	d := openDurableWith(t, nil, []func(*middleware.Stack) error{lost.option}, nil, flaky(0, true))
	d.counter.Reset()
	in, _ := payload.JSON(map[string]any{})
	res, err := d.set.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.flaky", IdempotencyKey: "k1", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	counts := d.counter.Snapshot()
	if lost.injected.Load() != 1 || res.Duplicate || counts["SQS.SendMessage"] != 1 {
		t.Fatalf("lost %d answers; duplicate=%v, requests %v; want a new execution, dispatched once", lost.injected.Load(), res.Duplicate, counts)
	}
	d.start()
	d.await(res.Execution, store.Succeeded, 30*time.Second)
}

// (12) A late await completion larger than the inline budget was stored
// inline, past DynamoDB's item limit (a row already holding a full input
// and result). It is always a payload reference.
func TestDurableLateCompletionIsAReference(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var awaitID, token string
	big := strings.Repeat("x", 180<<10)
	grow := pipeline.NewStep("grow", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		return map[string]any{"blob2": big[:len(big)-100]}, nil // a result as large as the input
	})
	wait := await.Step("approve", await.Spec{Timeout: time.Second}, func(_ context.Context, r await.Request) error {
		mu.Lock()
		defer mu.Unlock()
		awaitID, token = r.AwaitID, r.Token
		return nil
	}, pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}))
	p := pipeline.Pipeline{ID: "p.late", Steps: []pipeline.Step{grow, wait}}
	d := openDurable(t, func(c *config.Config) {
		c.AwaitResumeTokenSecret = "durable-secret"
		c.InlineBudgetBytes = 190 << 10
		// A lease a loaded machine cannot outrun. With the suite's 1.5 s,
		// a renewal delayed by load (make test under -race at load 18
		// failed here once) can let the sweeper take the await step over:
		// a takeover spends an attempt, and with MaxRetries 0 it
		// dead-letters the execution (worker_lost) before its await is
		// recorded. The await's timeout, not the lease, is under test.
		c.Lease = 15 * time.Second
	}, p)
	d.start()
	d.sweepEvery(300 * time.Millisecond)
	e := d.submit(p.ID, "k1", map[string]any{"blob": big[:len(big)-200]})
	if e.Input.ManifestID != "" {
		t.Fatalf("input not inline")
	}
	dead := d.await(e, store.DLQ, 30*time.Second)
	if dead.Await == nil || dead.Await.Status != store.AwaitTimedOut || dead.Result.ManifestID != "" {
		t.Fatalf("row: await %+v, result inline %v, error %+v", dead.Await, dead.Result.ManifestID == "", dead.Error)
	}
	mu.Lock()
	id, tok := awaitID, token
	mu.Unlock()
	late, _ := payload.JSON(map[string]string{"verdict": big})
	got, _, err := d.set.Runtime.CompleteAwait(context.Background(), e.ExecutionID, id, tok, late)
	if err != nil {
		t.Fatalf("late completion of %d bytes: %v", len(late.Data), err)
	}
	if !got.Await.Late || got.Await.LatePayload.ManifestID == "" || got.Status != store.DLQ {
		t.Fatalf("late completion: await %+v status %s", got.Await, got.Status)
	}
	if _, err := payload.Read(context.Background(), d.set.Runtime.Payloads(), got.Await.LatePayload); err != nil {
		t.Fatalf("late payload unreadable: %v", err)
	}
}
