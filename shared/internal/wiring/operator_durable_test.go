package wiring_test

// The operator plane on DynamoDB and SQS: cancel (a running step and a
// queued execution), listing, and a bulk re-drive resumed by another
// process.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// reopen opens another process's runtime on d's tables and queues.
func (d *durable) reopen() *wiring.Process {
	d.t.Helper()
	set, err := open(context.Background(), d.cfg, d.reg, slog.New(slog.DiscardHandler), withDrainTimeout(5*time.Second))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = set.Close(context.Background()) })
	return set
}

// cancelEvents counts the cancelled events a runtime reports.
type cancelEvents struct{ n atomic.Int32 }

func (c *cancelEvents) Observe(_ context.Context, ev engine.Event) {
	if ev.Kind == engine.EventCancelled {
		c.n.Add(1)
	}
}

// TestDurableCancelRunningStep: a step that runs until its context ends
// is cancelled through the SQS worker on DynamoDB: the request lands on
// the row, the worker's next renewal ends the execution CANCELLED (out of
// the sweep index) and cancels the step with cause ErrCancelled.
func TestDurableCancelRunningStep(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	var (
		mu    sync.Mutex
		cause error
	)
	p := pipeline.Pipeline{ID: "p.long", Steps: []pipeline.Step{
		pipeline.NewStep("long", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			started <- struct{}{}
			<-ctx.Done()
			mu.Lock()
			cause = context.Cause(ctx)
			mu.Unlock()
			return nil, ctx.Err()
		}),
	}}
	events := &cancelEvents{}
	d := openDurableWith(t, nil, nil, []option{withObserver(events)}, p)
	d.start()
	e := d.submit("p.long", "k1", map[string]any{})
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the step did not start")
	}
	ctx := context.Background()
	got, changed, err := d.set.Runtime.Cancel(ctx, e.Key(), "not needed any more")
	if err != nil || !changed || got.Status != store.Running || got.CancelRequestedAt.IsZero() {
		t.Fatalf("Cancel = %s changed=%v, %v; want the request on the RUNNING row", got.Status, changed, err)
	}
	done := d.await(e, store.Cancelled, 10*time.Second)
	if done.CancelReason != "not needed any more" || !done.SweepAt.IsZero() || done.LeaseOwner != "" {
		t.Fatalf("cancelled row %+v", done)
	}
	// The worker's renewal ended it (not a lapsed lease: the step's
	// context cause says which), however long the machine took.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		c := cause
		mu.Unlock()
		if errors.Is(c, engine.ErrCancelled) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the step's context cause is %v, want ErrCancelled", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	page, err := d.set.Runtime.Store().Due(ctx, store.DueQuery{By: time.Now().Add(time.Hour), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range page.Refs {
		if ref.Key == e.Key() {
			t.Fatalf("the cancelled row is still in the sweep index")
		}
	}
	if events.n.Load() != 1 {
		t.Fatalf("%d cancelled events, want 1", events.n.Load())
	}
}

// TestDurableCancelQueuedAndList: a queued execution is cancelled before
// a worker sees it (its work item then runs nothing), and the list shows
// the tenant's executions newest first, filtered by status.
func TestDurableCancelQueuedAndList(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	p := pipeline.Pipeline{ID: "p.count", Steps: []pipeline.Step{
		pipeline.NewStep("count", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			runs.Add(1)
			return in, nil
		}),
	}}
	d := openDurable(t, nil, p)
	ctx := context.Background()
	var execs []store.Execution
	for i := range 4 {
		execs = append(execs, d.submit("p.count", fmt.Sprintf("k%d", i), map[string]any{"i": i}))
		time.Sleep(2 * time.Millisecond) // distinct creation times
	}
	if _, changed, err := d.set.Runtime.Cancel(ctx, execs[1].Key(), "duplicate"); err != nil || !changed {
		t.Fatalf("Cancel of a queued execution: changed=%v, %v", changed, err)
	}
	d.start()
	for i, e := range execs {
		if i != 1 {
			d.await(e, store.Succeeded, 30*time.Second)
		}
	}
	time.Sleep(time.Second) // the cancelled one's work item is consumed too
	if got := d.await(execs[1], store.Cancelled, time.Second); got.Attempt != 1 || runs.Load() != 3 {
		t.Fatalf("cancelled execution at attempt %d; %d runs, want 3", got.Attempt, runs.Load())
	}
	page, err := d.set.Runtime.List(ctx, store.ListQuery{TenantID: "t1", PipelineID: "p.count"})
	if err != nil || len(page.Executions) != 4 || page.Cursor != "" {
		t.Fatalf("List = %d executions (cursor %q), %v", len(page.Executions), page.Cursor, err)
	}
	for i, x := range page.Executions {
		if want := execs[3-i].ExecutionID; x.ExecutionID != want {
			t.Fatalf("list position %d is %s, want %s (newest first)", i, x.ExecutionID, want)
		}
	}
	cancelled, err := d.set.Runtime.List(ctx, store.ListQuery{TenantID: "t1", Statuses: []store.Status{store.Cancelled}})
	if err != nil || len(cancelled.Executions) != 1 || cancelled.Executions[0].ExecutionID != execs[1].ExecutionID {
		t.Fatalf("List of CANCELLED = %+v, %v", cancelled.Executions, err)
	}
	if other, err := d.set.Runtime.List(ctx, store.ListQuery{TenantID: "t2"}); err != nil || len(other.Executions) != 0 {
		t.Fatalf("another tenant lists %d executions, %v", len(other.Executions), err)
	}
}

// stopAfterRedrives calls the function stop holds (once) when the n-th
// re-drive of a bulk re-drive for reason has been written: the driver's
// context ends right after that re-drive, before the driver counts it,
// whatever the machine's speed.
func stopAfterRedrives(n int32, reason string, stop *atomic.Pointer[context.CancelFunc]) func(*middleware.Stack) error {
	var seen atomic.Int32
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("stopAfterRedrives",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && err == nil && isRedrive(u, reason) && seen.Add(1) == n {
					if f := stop.Swap(nil); f != nil {
						(*f)()
					}
				}
				return out, md, err
			}), middleware.After)
	}
}

// isRedrive reports whether u is a bulk re-drive's write of an execution
// for reason: guarded on no lease holder (a worker's commit, which keeps
// the note, is guarded on its own lease) and setting the audit note.
func isRedrive(u *dynamodb.UpdateItemInput, reason string) bool {
	unleased := false
	for placeholder, name := range u.ExpressionAttributeNames {
		if name == dynamo.AttrLeaseOwner && strings.Contains(aws.ToString(u.ConditionExpression), "attribute_not_exists("+placeholder+")") {
			unleased = true
		}
	}
	for _, v := range u.ExpressionAttributeValues {
		if sv, ok := v.(*types.AttributeValueMemberS); ok && unleased && strings.HasPrefix(sv.Value, "redrive ") && strings.HasSuffix(sv.Value, ": "+reason) {
			return true
		}
	}
	return false
}

// TestDurableBulkRedriveResumedByAnotherProcess: a bulk re-drive started
// and driven by one process that stops mid-job (its context ends, as at a
// Lambda invocation's deadline: here right after its third re-drive) is
// finished by another process's driver: each dead-lettered execution
// re-driven exactly once, then run to success.
func TestDurableBulkRedriveResumedByAnotherProcess(t *testing.T) {
	t.Parallel()
	const reason = "the scripted failure is over"
	var stop atomic.Pointer[context.CancelFunc]
	d := openDurableWith(t, func(c *config.Config) { c.MaxRetries = 0 }, []func(*middleware.Stack) error{stopAfterRedrives(3, reason, &stop)}, nil, flaky(1, false))
	d.start()
	var execs []store.Execution
	for i := range 12 {
		execs = append(execs, d.submit("p.flaky", fmt.Sprintf("k%d", i), map[string]any{}))
	}
	for _, e := range execs {
		d.await(e, store.DLQ, 30*time.Second)
	}
	ctx := context.Background()
	job, err := d.set.Runtime.StartRedrives(ctx, "t1", engine.RedriveFilter{PipelineID: "p.flaky", Statuses: []store.Status{store.DLQ}},
		reason, 8, false)
	if err != nil || job.Matched != 12 || job.Done {
		t.Fatalf("StartRedrives = %+v, %v", job, err)
	}
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	stop.Store(&cancel)
	if _, err := d.set.Runtime.DriveRedrives(short, time.Minute); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mid, err := d.set.Runtime.RedriveJob(ctx, "t1", job.ID)
	if err != nil || mid.Done || mid.Redriven != 2 {
		t.Fatalf("after the first driver stopped: %+v, %v; want 2 re-driven (the third uncounted), not done", mid, err)
	}
	other := d.reopen()
	if held, err := other.Runtime.DriveRedrives(ctx, time.Minute); err != nil || held != 1 {
		t.Fatalf("the other process drove %d jobs, %v", held, err)
	}
	got, err := other.Runtime.RedriveJob(ctx, "t1", job.ID)
	if err != nil || got.Redriven != 12 || got.Skipped != 0 || got.Failed != 0 || !got.Done {
		t.Fatalf("progress %+v, %v; want 12 re-driven, done", got, err)
	}
	for _, e := range execs {
		row := d.await(e, store.Succeeded, 30*time.Second)
		if row.RedriveCount != 1 || row.Note != "redrive "+job.ID+": "+reason {
			t.Fatalf("%s re-driven %d times, note %q", e.ExecutionID, row.RedriveCount, row.Note)
		}
	}
}

// TestLocalDeadLettersAreListed: on the memory store with the log
// dead-letter provider (no dead-letter consumer), the runtime records
// each dead letter itself, so the tenant's dead letters are listed like a
// deployment's; a bulk re-drive is available on the memory store too.
// (The embedded default records and lists its own: see
// TestOpenDefaultsToTheEmbeddedStore.)
func TestLocalDeadLettersAreListed(t *testing.T) {
	c := config.Default()
	c.StateProvider = "memory" // the log dead-letter provider follows it
	c.MaxRetries = 0
	reg, err := pipeline.NewRegistry(flaky(1, false))
	if err != nil {
		t.Fatal(err)
	}
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close(context.Background())
	rt := set.Runtime
	ctx := context.Background()
	in, _ := payload.JSON(map[string]any{})
	res, err := rt.Submit(ctx, engine.SubmitRequest{TenantID: "t1", PipelineID: "p.flaky", IdempotencyKey: "k1", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := rt.Status(ctx, res.Execution.Key())
		if got.Status == store.DLQ {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution is %s, want DLQ", got.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	page, err := rt.DeadLetters(ctx, deadletter.ListQuery{TenantID: "t1"})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("DeadLetters = %d records, %v; want the one", len(page.Records), err)
	}
	if r := page.Records[0]; r.ExecutionID != res.Execution.ExecutionID || r.Envelope == nil || r.Envelope.ErrorCode != "scripted" {
		t.Fatalf("record %+v", r)
	}
	if other, err := rt.DeadLetters(ctx, deadletter.ListQuery{TenantID: "t2"}); err != nil || len(other.Records) != 0 {
		t.Fatalf("another tenant's dead letters: %d, %v", len(other.Records), err)
	}
	job, err := rt.StartRedrives(ctx, "t1", engine.RedriveFilter{}, "retry", 0, true)
	if err != nil || job.Matched != 1 {
		t.Fatalf("a dry bulk re-drive on the memory store: %+v, %v", job, err)
	}
}
