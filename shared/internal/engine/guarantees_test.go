package engine_test

// The scenarios of the guarantees issue: each test is one edge path on
// which an accepted execution must not be lost, stuck, silently changed
// or dead-lettered by the runtime's own mistake.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// deliver runs every queued work item on rt once and returns what the
// deliveries answered.
func deliver(rt *engine.Runtime, q *queue) []error {
	var errs []error
	for _, m := range q.take() {
		errs = append(errs, rt.Process(context.Background(), m.Item))
	}
	return errs
}

// (1) A remote worker answering 2xx application/x-protobuf without
// X-Message-Type: the output cannot be stored. Today it was handed back at
// the same attempt forever (25 deliveries, 25 remote calls, QUEUED at
// attempt 1). It must fail the step non-retryably with its own code.
func TestUnstorableStepOutputDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		f := &fakeWorker{behave: func(w http.ResponseWriter, _ *http.Request, _ int) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/x-protobuf") // no X-Message-Type
			_, _ = w.Write([]byte{0x08, 0x01})
		}}
		c := newCluster(t)
		rt := c.worker("w1", engine.Config{Retry: fastRetry}, nil, remotePipeline(f, time.Second))
		e := submitTo(t, rt, "p.remote", "k1", map[string]any{})
		for range 25 {
			rt.Process(context.Background(), workItem(e))
			c.queue.take()
		}
		got := c.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != engine.CodeOutputUnstorable ||
			got.Error.TerminalReason != store.ReasonNonRetryable {
			t.Fatalf("row = %s %+v", got.Status, got.Error)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d remote calls for 25 deliveries, want 1", n)
		}
	})
}

// (1, in general) A step that keeps handing its work back (here: a
// hand-back on every run) is released at most release-limit times per
// attempt; then the hand-back counts as a failed attempt, and the
// execution ends DLQ with the hand-back's code: never an endless loop.
func TestRepeatedReleaseEndsVisibly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int32
		s := pipeline.Step{Name: "stuck", Run: func(context.Context, pipeline.StepInfo, payload.Payload) (payload.Payload, error) {
			runs.Add(1)
			return payload.Payload{}, pipeline.HandBack("no_capacity", errors.New("nothing to run it with"))
		}}
		pol := pipeline.RetryPolicy{MaxRetries: 1, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}
		s.Retry = &pol
		c := newCluster(t)
		rt := c.worker("w1", engine.Config{Retry: fastRetry, ReleaseLimit: 3}, nil, pipeline.Pipeline{ID: "p.stuck", Steps: []pipeline.Step{s}})
		e := submitTo(t, rt, "p.stuck", "k1", map[string]any{})
		for i := 0; i < 100 && !c.get(e.ExecutionID).Status.Terminal(); i++ {
			time.Sleep(2 * time.Second)
			rt.Process(context.Background(), workItem(e))
		}
		got := c.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error.Code != "no_capacity" || got.Error.TerminalReason != store.ReasonRetryExhausted {
			t.Fatalf("row = %s %+v", got.Status, got.Error)
		}
		// 2 attempts x (3 releases + the one that fails the attempt).
		if n := runs.Load(); n != 8 {
			t.Fatalf("%d runs, want 8", n)
		}
	})
}

// (2) Definitions change between deploys: an execution of [a,b,c] whose
// worker now has [a,c] was SUCCEEDED with b skipped. It must never run
// under another definition: it waits for a worker that serves its own.
func TestPipelineDefinitionChangeNeverSkipsSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		abc := pipeline.Pipeline{ID: "p.v", Steps: []pipeline.Step{appendStep("a"), appendStep("b"), appendStep("c")}}
		ac := pipeline.Pipeline{ID: "p.v", Steps: []pipeline.Step{appendStep("a"), appendStep("c")}}
		old := c.worker("old", engine.Config{Retry: fastRetry}, nil, abc)
		updated := c.worker("new", engine.Config{Retry: fastRetry}, nil, ac)
		e := submitTo(t, old, "p.v", "k1", map[string]any{})
		if e.PipelineVersion != abc.VersionID() || e.PipelineVersion == ac.VersionID() {
			t.Fatalf("bound to %q; [a,b,c] is %q, [a,c] %q", e.PipelineVersion, abc.VersionID(), ac.VersionID())
		}
		for _, err := range deliver(updated, c.queue) {
			ra, ok := dispatch.AsRetryAfter(err)
			if !ok || ra.Reason != engine.CodePipelineVersionUnavailable {
				t.Fatalf("new worker answered %v, want to leave the item for another worker", err)
			}
		}
		waiting := c.get(e.ExecutionID)
		if waiting.Status != store.Queued || waiting.StepIndex != 0 || waiting.VersionWaitSince.IsZero() ||
			waiting.Error == nil || waiting.Error.Code != engine.CodePipelineVersionUnavailable {
			t.Fatalf("waiting row = %s step %d since %v err %+v", waiting.Status, waiting.StepIndex, waiting.VersionWaitSince, waiting.Error)
		}
		if !strings.Contains(c.logs.String(), `"event":"pipeline_version_unavailable"`) {
			t.Error("pipeline_version_unavailable not logged")
		}
		// The old worker runs it, every step of its own definition.
		if err := old.Process(context.Background(), workItem(e)); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			deliver(old, c.queue)
		}
		_, res, err := old.Result(context.Background(), e.Key())
		if err != nil || string(res.Data) != `{"path":["a","b","c"]}` {
			t.Fatalf("result %s, %v", res.Data, err)
		}
	})
}

// (2) A worker that lacks the pipeline (an old worker in a rolling
// deploy) dead-lettered it at once. It must leave it, and only after the
// version wait does the execution end DLQ with pipeline_version_unavailable.
func TestWorkerWithoutPipelineWaitsThenDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		cfg := engine.Config{Retry: fastRetry, PipelineVersionWait: 10 * time.Minute}
		submitter := c.worker("submit", cfg, nil, threeSteps())
		other := c.worker("other", cfg, nil, pipeline.Pipeline{ID: "p.unrelated", Steps: []pipeline.Step{appendStep("x")}})
		e := submitTo(t, submitter, "p.three", "k1", map[string]any{})
		c.queue.take()
		for i := 0; ; i++ {
			err := other.Process(context.Background(), workItem(e))
			got := c.get(e.ExecutionID)
			if got.Status.Terminal() {
				if got.Status != store.DLQ || got.Error.Code != engine.CodePipelineVersionUnavailable || time.Since(got.CreatedAt) < 10*time.Minute {
					t.Fatalf("ended %s %+v after %s", got.Status, got.Error, time.Since(got.CreatedAt))
				}
				break
			}
			ra, ok := dispatch.AsRetryAfter(err)
			if !ok || i > 1000 {
				t.Fatalf("delivery %d: %v", i, err)
			}
			time.Sleep(ra.Delay)
		}
	})
}

// (2) Two definitions side by side: new submissions take the current one,
// executions bound to the draining one still run it.
func TestVersionsRegisteredSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		v1 := pipeline.Pipeline{ID: "p.v", Steps: []pipeline.Step{appendStep("a"), appendStep("b")}}
		v2 := pipeline.Pipeline{ID: "p.v", Version: "v2", Steps: []pipeline.Step{appendStep("a"), appendStep("b2"), appendStep("c")}}
		before := c.worker("before", engine.Config{Retry: fastRetry}, nil, v1)
		old := submitTo(t, before, "p.v", "k-old", map[string]any{})
		c.queue.take()
		v1.Draining = true
		both := c.worker("both", engine.Config{Retry: fastRetry}, nil, v1, v2)
		fresh := submitTo(t, both, "p.v", "k-new", map[string]any{})
		if fresh.PipelineVersion != v2.VersionID() || !strings.HasPrefix(fresh.PipelineVersion, "v2-") {
			t.Fatalf("new submission bound to %q, want %q", fresh.PipelineVersion, v2.VersionID())
		}
		both.Process(context.Background(), workItem(old))
		for range 6 {
			deliver(both, c.queue)
		}
		for id, want := range map[string]string{old.ExecutionID: `{"path":["a","b"]}`, fresh.ExecutionID: `{"path":["a","b2","c"]}`} {
			_, res, err := both.Result(context.Background(), store.Key{TenantID: "t1", ExecutionID: id})
			if err != nil || string(res.Data) != want {
				t.Errorf("%s: result %s, %v; want %s", id, res.Data, err, want)
			}
		}
	})
}

// (2) Command ids and step idempotency keys name the step, not its index:
// inserting a step before it does not give it another step's key.
func TestStepKeysDoNotDependOnStepIndex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := map[string]string{}
		var mu sync.Mutex
		rec := func(name string) pipeline.Step {
			return step(name, func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
				mu.Lock()
				defer mu.Unlock()
				keys[fmt.Sprintf("%d/%s", info.StepIndex, name)] = info.IdempotencyKey
				return in, nil
			})
		}
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, pipeline.Pipeline{ID: "p.k", Steps: []pipeline.Step{rec("a"), rec("c")}})
		e := submitTo(t, rt, "p.k", "k1", map[string]any{})
		for range 4 {
			deliver(rt, c.queue)
		}
		if keys["1/c"] == "" || keys["1/c"] != store.StepIdempotencyKey("t1", e.ExecutionID, "c") ||
			keys["1/c"] == store.StepIdempotencyKey("t1", e.ExecutionID, "b") {
			t.Fatalf("keys %v", keys)
		}
	})
}

// (3) FAILED rows whose dead letter cannot be published (a DLQ outage)
// sat at the head of the due index: with sweep-limit 3, three of them kept
// a lost QUEUED row from ever being re-dispatched (20 sweeps, none). Failed
// publishes back off on the row and never block other due work.
func TestStuckDeadLettersDoNotStarveTheSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		cfg := engine.Config{Retry: fastRetry, SweepLimit: 3, SweepGrace: time.Second}
		rt := c.worker("w", cfg, nil, pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", false)}}, threeSteps())
		c.dlq.failNext = 1 << 30 // the DLQ is down for the whole test
		for i := range 3 {
			submitTo(t, rt, "p.bad", fmt.Sprint("bad", i), map[string]any{})
			deliver(rt, c.queue) // fails non-retryably: FAILED, dead letter pending
		}
		time.Sleep(time.Second)
		lost := submitTo(t, rt, "p.three", "lost", map[string]any{})
		c.queue.take() // its work item is lost
		attemptsBefore := c.dlq.attempts
		redispatched := 0
		for range 20 {
			time.Sleep(time.Second)
			res, err := rt.SweepOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			redispatched += res.Redispatched
		}
		if redispatched == 0 {
			t.Fatalf("20 sweeps re-dispatched the lost row 0 times")
		}
		if got := c.get(lost.ExecutionID); got.Status != store.Queued {
			t.Fatalf("lost row = %s", got.Status)
		}
		// Spaced publishes: each stuck row is tried at 1, 2, 4, 8 s...
		// apart, not at every sweep (3 rows x 20 sweeps = 60).
		if tries := c.dlq.attempts - attemptsBefore; tries > 3*6 {
			t.Fatalf("%d publish tries in 20 sweeps for 3 stuck rows", tries)
		}
	})
}

// (4) Sweeper amplification: a re-dispatch did not move the row, so every
// sweep re-sent every row still waiting in a queue backlog (50 queued
// items and 10 sweeps: 500 duplicates). Each re-dispatch pushes the row's
// next look out with growing spacing.
func TestSweeperDoesNotAmplifyAQueueBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry, SweepGrace: 2 * time.Second}, nil, threeSteps())
		for i := range 50 {
			submitTo(t, rt, "p.three", fmt.Sprint("k", i), map[string]any{})
		}
		sent := c.queue.count() // 50: the backlog no worker drains
		for range 10 {
			time.Sleep(time.Second)
			if _, err := rt.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		// Looks at 2 s (overdue: re-send), then 2 s and 4 s later: at most 3
		// re-sends per row within 10 s, where every sweep re-sent before.
		if dup := c.queue.count() - sent; dup > 3*50 || dup < 50 {
			t.Fatalf("%d re-dispatches of 50 backlogged rows in 10 sweeps", dup)
		}
	})
}

// (4) One sweeper invocation reads each due row at most once: the
// Lambda sweeper's paging asked for 12,750 index rows to handle 500.
func TestSweepPassReadsEachRowOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		counting := &dueCounter{Store: c.store}
		c.store = counting
		rt := c.worker("w", engine.Config{Retry: fastRetry, SweepGrace: time.Second, SweepLimit: 20}, nil, threeSteps())
		for i := range 500 {
			submitTo(t, rt, "p.three", fmt.Sprint("k", i), map[string]any{})
		}
		c.queue.take()
		time.Sleep(2 * time.Second)
		pass := &engine.SweepPass{}
		for {
			res, err := rt.Sweep(context.Background(), pass)
			if err != nil {
				t.Fatal(err)
			}
			if !res.More {
				break
			}
		}
		if n := counting.refs.Load(); n != 500 {
			t.Fatalf("the pass read %d index rows for 500 due rows", n)
		}
	})
}

// dueCounter counts the index rows Due returns.
type dueCounter struct {
	store.Store
	refs atomic.Int64
}

func (d *dueCounter) Due(ctx context.Context, q store.DueQuery) (store.DuePage, error) {
	p, err := d.Store.Due(ctx, q)
	d.refs.Add(int64(len(p.Refs)))
	return p, err
}

// flakyCommits fails the leased commits (Update with a lease owner) of a
// store: before the write for failBefore of them, and after the write
// landed (the caller cannot tell) for failAfter.
type flakyCommits struct {
	store.Store
	mu                    sync.Mutex
	failBefore, failAfter int
}

func (f *flakyCommits) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	f.mu.Lock()
	before, after := g.LeaseOwner != "" && f.failBefore > 0, g.LeaseOwner != "" && f.failBefore == 0 && f.failAfter > 0
	if before {
		f.failBefore--
	}
	if after {
		f.failAfter--
	}
	f.mu.Unlock()
	if before {
		return store.Execution{}, fmt.Errorf("injected: %w", store.ErrUnavailable)
	}
	got, err := f.Store.Update(ctx, g, next)
	if after && err == nil {
		return store.Execution{}, fmt.Errorf("injected after the write: %w", store.ErrUnavailable)
	}
	return got, err
}

// (5) A transient commit failure after a step succeeded dead-lettered
// the execution as worker_lost once its attempts were used up. A commit
// whose outcome is unknown is resolved by reading the row back; a failed
// commit never costs an attempt the step did not use.
func TestTransientCommitFailureCostsNoAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		flaky := &flakyCommits{Store: c.store, failBefore: 3, failAfter: 1}
		c.store = flaky
		var runs atomic.Int32
		once := pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}
		s := step("only", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			runs.Add(1)
			return in, nil
		})
		s.Retry = &once
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, pipeline.Pipeline{ID: "p.one", Steps: []pipeline.Step{s, appendStep("z")}})
		e := submitTo(t, rt, "p.one", "k1", map[string]any{})
		for range 4 {
			for _, err := range deliver(rt, c.queue) {
				if err != nil {
					t.Fatalf("delivery: %v", err)
				}
			}
		}
		got := c.get(e.ExecutionID)
		if got.Status != store.Succeeded || runs.Load() != 1 {
			t.Fatalf("row %s %+v after %d runs; want SUCCEEDED after 1", got.Status, got.Error, runs.Load())
		}
		if !strings.Contains(c.logs.String(), `"event":"commit_outcome_resolved"`) {
			t.Error("the unknown outcome was not resolved by reading the row")
		}
	})
}

// (6) TTL never deletes a live execution: an await with a 3 h timeout
// under a shorter retention vanished with no timeout, DLQ or event.
// Configuration that cannot hold is refused at startup; retention counts
// from the terminal time; a parked execution is kept past its timeout.
func TestRetentionNeverDeletesALiveExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		c := newCluster(t)
		reg, _ := pipeline.NewRegistry(awaitPipeline(k, 3*time.Hour, false))
		_, err := engine.New(engine.Config{ExecutionTTL: time.Hour, AwaitSecret: testSecret}, engine.Deps{
			Registry: reg, Store: c.store, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq})
		if err == nil || !strings.Contains(err.Error(), "execution-ttl-days") {
			t.Fatalf("an await timeout above the retention: err = %v", err)
		}

		// A first step that takes 2 h, then an await of 3 h, under a 4 h
		// retention: the expiry fixed at submit (+4 h) would lapse an hour
		// into the wait.
		slow := step("slow", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			time.Sleep(2 * time.Hour)
			return in, ctx.Err()
		})
		wait := await.Step("approve", await.Spec{Timeout: 3 * time.Hour}, nil,
			pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}))
		cfg := engine.Config{Retry: fastRetry, ExecutionTTL: 4 * time.Hour, AwaitSecret: testSecret, SweepGrace: time.Second}
		rt := c.worker("w", cfg, nil, pipeline.Pipeline{ID: "p.long", Steps: []pipeline.Step{slow, wait, appendStep("c")}})
		e := submitTo(t, rt, "p.long", "k1", map[string]any{})
		for range 3 {
			deliver(rt, c.queue)
		}
		if got := c.get(e.ExecutionID); got.Status != store.WaitingExternal {
			t.Fatalf("not parked: %s", got.Status)
		}
		time.Sleep(3*time.Hour + time.Minute)
		if res, err := rt.SweepOnce(context.Background()); err != nil || res.AwaitsTimedOut != 1 {
			t.Fatalf("sweep = %+v, %v", res, err)
		}
		dead := c.get(e.ExecutionID) // found: not deleted before its timeout
		if dead.Status != store.DLQ || dead.Error.Code != pipeline.CodeAwaitTimeout {
			t.Fatalf("after the timeout: %s %+v", dead.Status, dead.Error)
		}
		if want := dead.UpdatedAt.Add(4 * time.Hour); dead.ExpiresAt.Before(want.Add(-time.Second)) {
			t.Fatalf("expires %v, want a retention after the terminal time %v", dead.ExpiresAt, dead.UpdatedAt)
		}
		// A re-drive extends it.
		time.Sleep(3 * time.Hour)
		red, err := rt.Redrive(context.Background(), e.Key(), "retry the approval", nil)
		if err != nil || !red.ExpiresAt.After(dead.ExpiresAt) {
			t.Fatalf("re-drive: expires %v (was %v), %v", red.ExpiresAt, dead.ExpiresAt, err)
		}
	})
}

// (7) A remote call cut short by the worker's own shutdown was released
// and called again automatically. It ends REMOTE_OUTCOME_UNKNOWN.
func TestRemoteCallCutShortIsAnUnknownOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		f := &fakeWorker{behave: func(_ http.ResponseWriter, r *http.Request, _ int) {
			calls.Add(1)
			<-r.Context().Done()
		}}
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry, Lease: time.Minute}, nil, remotePipeline(f, 30*time.Second))
		e := submitTo(t, rt, "p.remote", "k1", map[string]any{})
		deliver(rt, c.queue) // step a
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Second, cancel) // the worker shuts down mid-call
		for _, m := range c.queue.take() {
			rt.Process(ctx, m.Item)
		}
		for range 3 {
			deliver(rt, c.queue)
			rt.Process(context.Background(), workItem(e))
		}
		got := c.get(e.ExecutionID)
		if got.Status != store.RemoteOutcomeUnknown || calls.Load() != 1 {
			t.Fatalf("row %s after %d calls; want REMOTE_OUTCOME_UNKNOWN after 1", got.Status, calls.Load())
		}
	})
}

// (7) Never start a remote call that cannot finish before the worker's
// own deadline (a Lambda invocation's time left): the step is handed back,
// its attempt unused, and no call is made.
func TestRemoteCallNotStartedWithoutTimeToFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeWorker{}
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry, Lease: time.Minute, ChainMaxSteps: 1}, nil, remotePipeline(f, 30*time.Second))
		e := submitTo(t, rt, "p.remote", "k1", map[string]any{})
		deliver(rt, c.queue)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // less than the call's deadline
		defer cancel()
		for _, m := range c.queue.take() {
			if err := rt.Process(ctx, m.Item); err == nil {
				t.Fatal("a hand-back must be delivered again")
			}
		}
		got := c.get(e.ExecutionID)
		if len(f.calls()) != 0 || got.Status != store.Queued || got.Attempt != 1 || got.Releases != 1 {
			t.Fatalf("%d calls, row %s attempt %d releases %d", len(f.calls()), got.Status, got.Attempt, got.Releases)
		}
		if err := rt.Process(context.Background(), workItem(e)); err != nil || len(f.calls()) != 1 {
			t.Fatalf("with time: %v, %d calls", err, len(f.calls()))
		}
	})
}

// objects records the objects an Output publish writes.
type objects struct {
	mu   sync.Mutex
	puts map[string][]byte
}

func (o *objects) Put(_ context.Context, uri string, data []byte, _ string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.puts == nil {
		o.puts = map[string][]byte{}
	}
	o.puts[uri] = data
	return nil
}

func (o *objects) Get(_ context.Context, uri string) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b, ok := o.puts[uri]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}

// (8) An await step as the last step published no terminal object
// (0 objects). The completion is the step's output: it is published before
// SUCCEEDED like any last step's.
func TestAwaitLastStepPublishesTheOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		p := awaitPipeline(k, 0, true)
		p.Output = &pipeline.Output{To: "file:///out/{executionId}.json"}
		c := newCluster(t)
		reg, _ := pipeline.NewRegistry(p)
		objs := &objects{}
		rt, err := engine.New(engine.Config{Retry: fastRetry, AwaitSecret: testSecret, WorkerID: "w"}, engine.Deps{
			Registry: reg, Store: c.store, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq, Objects: objs})
		if err != nil {
			t.Fatal(err)
		}
		e := submitTo(t, rt, p.ID, "k1", map[string]any{"path": []string{}})
		for range 3 {
			deliver(rt, c.queue)
		}
		id, tok := k.last()
		if _, _, err := rt.CompleteAwait(context.Background(), e.ExecutionID, id, tok, payload.Raw("text/plain", []byte("approved"))); err != nil {
			t.Fatal(err)
		}
		deliver(rt, c.queue)
		if got := c.get(e.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("row = %s %+v", got.Status, got.Error)
		}
		if b := objs.puts["file:///out/"+e.ExecutionID+".json"]; string(b) != "approved" || len(objs.puts) != 1 {
			t.Fatalf("objects = %v", objs.puts)
		}
	})
}

// (9) A configured zero means zero: sweep grace 0 re-dispatches a lost row
// at the first sweep, inline budget 0 chunks every non-empty payload.
func TestConfiguredZeroMeansZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry, SweepGrace: 0, InlineBudget: 0}, nil, threeSteps())
		if cfg := rt.Config(); cfg.SweepGrace != 0 || cfg.InlineBudget != 0 {
			t.Fatalf("effective config: grace %s, inline budget %d", cfg.SweepGrace, cfg.InlineBudget)
		}
		e := submitTo(t, rt, "p.three", "k1", map[string]any{"x": 1})
		if e.Input.ManifestID == "" {
			t.Fatalf("a %d-byte input was kept inline with a zero budget", e.Input.Length)
		}
		c.queue.take()
		if res, _ := rt.SweepOnce(context.Background()); res.Redispatched != 1 {
			t.Fatalf("sweep with zero grace = %+v", res)
		}
		def := engine.DefaultConfig()
		if def.SweepGrace != 10*time.Second || def.InlineBudget != payload.DefaultInlineBudget || def.ClockSkewTolerance != 2*time.Second {
			t.Fatalf("DefaultConfig = %+v", def)
		}
	})
}

// (10) A worker whose clock runs 2 s behind acknowledged a fresh work
// item as not yet due, leaving it to the sweeper. Within the tolerance it
// claims it; beyond it the item is kept in the queue until it is due.
func TestClockBehindKeepsTheItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		submitter := c.worker("s", engine.Config{Retry: fastRetry}, nil, threeSteps())
		tolerant := c.worker("behind-2s", engine.Config{Retry: fastRetry, ClockSkewTolerance: 2 * time.Second, ChainMaxSteps: 1}, skewed(-2*time.Second), threeSteps())
		strict := c.worker("behind-3s", engine.Config{Retry: fastRetry, ClockSkewTolerance: 2 * time.Second}, skewed(-3*time.Second), threeSteps())
		e := submitTo(t, submitter, "p.three", "k1", map[string]any{})
		c.queue.take()
		err := strict.Process(context.Background(), workItem(e))
		ra, ok := dispatch.AsRetryAfter(err)
		if !ok || ra.Delay <= 0 || ra.Delay > 3*time.Second {
			t.Fatalf("3 s behind with 2 s tolerance: %v, want the item kept for about 1 s", err)
		}
		if err := tolerant.Process(context.Background(), workItem(e)); err != nil {
			t.Fatal(err)
		}
		if got := c.get(e.ExecutionID); got.StepIndex != 1 {
			t.Fatalf("2 s behind within the tolerance did not run it: %+v", got)
		}
	})
}

// (10) A worker whose clock runs 31 s ahead took over a live 30 s lease
// and the step ran twice at once. A lease is taken over only after its
// expiry plus the tolerance.
func TestClockAheadDoesNotTakeOverALiveLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var running atomic.Int32
		var maxRunning atomic.Int32
		slow := step("slow", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			if n > maxRunning.Load() {
				maxRunning.Store(n)
			}
			select {
			case <-time.After(20 * time.Second):
			case <-ctx.Done():
			}
			return in, nil
		})
		p := pipeline.Pipeline{ID: "p.slow", Steps: []pipeline.Step{slow}}
		cfg := engine.Config{Retry: fastRetry, Lease: 30 * time.Second, ClockSkewTolerance: 2 * time.Second}
		a := c.worker("a", cfg, nil, p)
		ahead := c.worker("ahead", cfg, skewed(31*time.Second), p)
		e := submitTo(t, a, "p.slow", "k1", map[string]any{})
		c.queue.take()
		go a.Process(context.Background(), workItem(e))
		// Its lease expires at +30 s; the other clock reads +31.5 s. Without
		// the tolerance that was a takeover; with 2 s it is not.
		time.Sleep(500 * time.Millisecond)
		// No takeover: the item is kept until one would be safe.
		if _, ok := dispatch.AsRetryAfter(ahead.Process(context.Background(), workItem(e))); !ok {
			t.Fatal("the worker ahead did not keep the item for later")
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := c.get(e.ExecutionID); got.Status != store.Succeeded || got.Attempt != 1 || maxRunning.Load() != 1 {
			t.Fatalf("row %s attempt %d, %d runs at once", got.Status, got.Attempt, maxRunning.Load())
		}
	})
}

// (13) A re-drive of a FAILED execution whose dead letter was still
// pending dropped that dead letter. It is published first.
func TestRedriveOfAPendingDeadLetterPublishesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", false)}})
		c.dlq.failNext = 1
		e := submitTo(t, rt, "p.bad", "k1", map[string]any{})
		deliver(rt, c.queue)
		if got := c.get(e.ExecutionID); got.Status != store.Failed || !got.DLQPending {
			t.Fatalf("row = %s pending %v", got.Status, got.DLQPending)
		}
		c.dlq.failNext = 1 // still down: the re-drive must not drop it
		if _, err := rt.Redrive(context.Background(), e.Key(), "try again", nil); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("re-drive while the DLQ is down: %v", err)
		}
		if got := c.get(e.ExecutionID); got.Status != store.Failed || !got.DLQPending {
			t.Fatalf("re-drive that failed changed the row: %s", got.Status)
		}
		got, err := rt.Redrive(context.Background(), e.Key(), "try again", nil)
		if err != nil || got.Status != store.Queued {
			t.Fatalf("re-drive = %s, %v", got.Status, err)
		}
		if envs := c.dlq.published(); len(envs) != 1 || envs[0].ExecutionID != e.ExecutionID {
			t.Fatalf("published %d envelopes", len(envs))
		}
	})
}

// (16) Submit must answer while the queue does not: with the queue frozen
// a submit got no answer for 90 s after its row was committed. The send
// after the commit has its own deadline; the sweeper finishes the job.
func TestSubmitAnswersWhileTheQueueHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.queue.freeze(true)
		rt := c.worker("w", engine.Config{Retry: fastRetry, DispatchTimeout: 2 * time.Second, SweepGrace: time.Second}, nil, threeSteps())
		start := time.Now()
		e := submitTo(t, rt, "p.three", "k1", map[string]any{})
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("submit took %s, want the 2 s dispatch deadline", took)
		}
		if got := c.get(e.ExecutionID); got.Status != store.Queued || got.SweepAt.IsZero() {
			t.Fatalf("row = %+v", got)
		}
		c.queue.freeze(false)
		time.Sleep(time.Second)
		if res, _ := rt.SweepOnce(context.Background()); res.Redispatched != 1 {
			t.Fatalf("sweep = %+v", res)
		}
	})
}

var _ store.Store = (*memory.StateStore)(nil)
