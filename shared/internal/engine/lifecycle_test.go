package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

var fastRetry = pipeline.RetryPolicy{MaxRetries: 2, Delay: time.Second, Multiplier: 2, MaxDelay: time.Minute}

func threeSteps() pipeline.Pipeline {
	return pipeline.Pipeline{ID: "p.three", Steps: []pipeline.Step{appendStep("a"), appendStep("b"), appendStep("c")}}
}

func TestSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, threeSteps())
		e := h.submit("p.three", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.Succeeded || got.StepIndex != 2 || got.Attempt != 1 || got.Error != nil {
			t.Fatalf("row = %+v", got)
		}
		// Version: created 1, one claim, then one commit per step (each
		// commit claims the next step: chained).
		if got.Version != 5 {
			t.Errorf("version = %d, want 5", got.Version)
		}
		_, res, err := h.rt.Result(context.Background(), e.Key())
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Data) != `{"path":["a","b","c"]}` || res.ContentType != payload.ContentTypeJSON {
			t.Fatalf("result = %s (%s)", res.Data, res.ContentType)
		}
		if got.LastTransitionKey != e.ExecutionID+":2:1" {
			t.Errorf("last transition key = %s", got.LastTransitionKey)
		}
	})
}

func TestRetryThenSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen attempts
		flaky := step("flaky", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			seen.record(info)
			if info.Attempt < 3 {
				return nil, fmt.Errorf("transient failure %d", info.Attempt)
			}
			return in, nil
		})
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.flaky", Steps: []pipeline.Step{appendStep("a"), flaky}})
		start := time.Now()
		e := h.submit("p.flaky", "k1", map[string]any{})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.WaitRetry || got.StepIndex != 1 || got.Attempt != 2 {
			t.Fatalf("after first failure: %+v", got)
		}
		if want := start.Add(time.Second); !got.NextDueAt.Equal(want) {
			t.Errorf("next due %v, want %v (retry-delay)", got.NextDueAt, want)
		}
		if got.Error == nil || got.Error.Code != pipeline.CodeStepFailed || got.Error.TerminalReason != "" {
			t.Errorf("error = %+v", got.Error)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		got = h.get(e.ExecutionID)
		if got.Attempt != 3 || !got.NextDueAt.Equal(start.Add(3*time.Second)) {
			t.Errorf("after second failure attempt %d due %v, want 3 and +3s (delay x multiplier)", got.Attempt, got.NextDueAt)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got = h.get(e.ExecutionID)
		if got.Status != store.Succeeded || got.Error != nil {
			t.Fatalf("final row = %+v", got)
		}
		if a := seen.list(); !reflect.DeepEqual(a, []int{1, 2, 3}) {
			t.Fatalf("attempts = %v", a)
		}
		if !strings.HasSuffix(seen.keys[2], ":1:3") {
			t.Errorf("transition key of attempt 3 = %s", seen.keys[2])
		}
	})
}

func failing(code string, retryable bool) pipeline.Step {
	return step("work", func(_ context.Context, info pipeline.StepInfo, _ map[string]any) (map[string]any, error) {
		err := fmt.Errorf("boom on attempt %d", info.Attempt)
		if retryable {
			return nil, pipeline.Retryable(code, err)
		}
		return nil, pipeline.NonRetryable(code, err)
	})
}

func TestRetriesExhaustedDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.fail", Steps: []pipeline.Step{appendStep("a"), failing("flaky_dep", true)}})
		e := h.submit("p.fail", "k1", map[string]any{})
		time.Sleep(time.Minute)
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.DLQPending || !got.NextDueAt.IsZero() {
			t.Fatalf("row = %+v", got)
		}
		if got.Error == nil || got.Error.TerminalReason != store.ReasonRetryExhausted || got.Error.Code != "flaky_dep" {
			t.Fatalf("error = %+v", got.Error)
		}
		envs := h.dlq.published()
		if len(envs) != 1 {
			t.Fatalf("%d envelopes, want 1", len(envs))
		}
		env := envs[0]
		want := fmt.Sprintf("%+v", struct {
			T, E, P, K, R, C, M string
			N                   int
		}{"t1", e.ExecutionID, "p.fail", e.ExecutionID + ":1:3", "retry_exhausted", "flaky_dep", "boom on attempt 3", 2})
		gotS := fmt.Sprintf("%+v", struct {
			T, E, P, K, R, C, M string
			N                   int
		}{env.TenantID, env.ExecutionID, env.PipelineID, env.TransitionKey, env.TerminalReason, env.ErrorCode, env.ErrorMessage, env.RetriesObserved})
		if gotS != want {
			t.Fatalf("envelope\n got  %s\n want %s", gotS, want)
		}
	})
}

func TestNonRetryableDeadLettersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("invalid_order", false)}})
		e := h.submit("p.bad", "k1", map[string]any{})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Attempt != 1 || got.Error.TerminalReason != store.ReasonNonRetryable {
			t.Fatalf("row = %+v error %+v", got, got.Error)
		}
		if envs := h.dlq.published(); len(envs) != 1 || envs[0].RetriesObserved != 0 || envs[0].TerminalReason != "non_retryable" {
			t.Fatalf("envelopes = %+v", envs)
		}
	})
}

func TestStepRetryOverride(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		once := pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}
		s := failing("x", true)
		s.Retry = &once
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.once", Steps: []pipeline.Step{s}})
		e := h.submit("p.once", "k1", map[string]any{})
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.DLQ || got.Attempt != 1 {
			t.Fatalf("with MaxRetries 0 override: %+v", got)
		}
	})
}

// TestLeaseExpiryTakeover: a worker claims and dies. Once the lease has
// lapsed (plus the sweep grace) the sweeper re-dispatches and another
// worker takes over as the next attempt.
func TestLeaseExpiryTakeover(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, SweepGrace: time.Second}
		var seen attempts
		work := step("work", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			seen.record(info)
			return in, nil
		})
		h := newHarness(t, cfg, pipeline.Pipeline{ID: "p.take", Steps: []pipeline.Step{work}})
		h.dropNext = 1 // the submit's work item goes to the dead worker instead
		e := h.submit("p.take", "k1", map[string]any{})
		// The dead worker's claim.
		dead, err := h.store.Claim(context.Background(), store.ClaimRequest{Key: e.Key(), ExpectVersion: 1, Owner: "dead", Now: time.Now(), DueBy: time.Now(), TakeoverBy: time.Now(), LeaseUntil: time.Now().Add(cfg.Lease), Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(cfg.Lease) // lease lapsed, grace not yet
		if res := h.sweep(); res.Redispatched != 0 {
			t.Fatalf("swept within grace: %+v", res)
		}
		time.Sleep(cfg.SweepGrace)
		if res := h.sweep(); res.Redispatched != 1 {
			t.Fatalf("sweep = %+v, want 1 redispatch", res)
		}
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.Succeeded || got.Attempt != 2 || got.Version != dead.Version+2 {
			t.Fatalf("after takeover: %+v", got)
		}
		if a := seen.list(); !reflect.DeepEqual(a, []int{2}) {
			t.Fatalf("attempts = %v, want [2]", a)
		}
		if !strings.Contains(h.logs.String(), `"takeover":true`) {
			t.Error("takeover not logged")
		}
	})
}

// TestTakeoverOfLastAttemptFails: when the dead worker held the last
// allowed attempt, the takeover records worker_lost and dead-letters.
func TestTakeoverOfLastAttemptFails(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		cfg := engine.Config{Retry: pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}, Lease: time.Second, SweepGrace: time.Millisecond}
		h := newHarness(t, cfg, pipeline.Pipeline{ID: "p.one", Steps: []pipeline.Step{appendStep("a")}})
		h.dropNext = 1
		e := h.submit("p.one", "k1", map[string]any{})
		if _, err := h.store.Claim(context.Background(), store.ClaimRequest{Key: e.Key(), ExpectVersion: 1, Owner: "dead", Now: time.Now(), DueBy: time.Now(), TakeoverBy: time.Now(), LeaseUntil: time.Now().Add(cfg.Lease), Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		h.sweep()
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error.Code != engine.CodeWorkerLost || got.Error.TerminalReason != store.ReasonRetryExhausted {
			t.Fatalf("row = %+v err %+v", got, got.Error)
		}
	})
}

// TestRenewalKeepsLongStepAlive: a step three times longer than the lease
// is never taken over, because the lease is renewed every lease/3.
func TestRenewalKeepsLongStepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, SweepGrace: time.Millisecond}
		var seen attempts
		slow := step("slow", func(ctx context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			seen.record(info)
			select {
			case <-time.After(10 * time.Second):
				return in, nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		})
		h := newHarness(t, cfg, pipeline.Pipeline{ID: "p.slow", Steps: []pipeline.Step{slow}})
		e := h.submit("p.slow", "k1", map[string]any{})
		for range 9 { // a sweeper racing the step every second
			time.Sleep(time.Second)
			h.sweep()
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.Succeeded || got.Attempt != 1 {
			t.Fatalf("row = %+v", got)
		}
		if a := seen.list(); !reflect.DeepEqual(a, []int{1}) {
			t.Fatalf("step ran %v times, want once", a)
		}
		if n := strings.Count(h.logs.String(), `"event":"lease_renewed"`); n < 3 {
			t.Fatalf("%d renewals logged, want at least 3", n)
		}
	})
}

// leaseStealer wraps the store so that renewals report a lost lease.
type leaseStealer struct{ store.Store }

func (leaseStealer) Renew(context.Context, store.Key, string, int64, time.Time) error {
	return store.ErrLeaseLost
}

func TestLostLeaseCancelsStepAndRefusesCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second}
		var cause error
		slow := step("slow", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return in, nil // even a "success" must not commit
		})
		h := newHarness(t, cfg, pipeline.Pipeline{ID: "p.lost", Steps: []pipeline.Step{slow}})
		// Rebuild the runtime on the stealing store, sharing everything else.
		rt, err := engine.New(cfg, engine.Deps{Registry: mustRegistry(t, pipeline.Pipeline{ID: "p.lost", Steps: []pipeline.Step{slow}}),
			Store: leaseStealer{h.store}, Payloads: h.rt.Payloads(), Dispatcher: h, DeadLetter: h.dlq, Logger: h.rt.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		h.rt = rt
		e := h.submit("p.lost", "k1", map[string]any{})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !errors.Is(cause, engine.ErrLeaseLost) {
			t.Fatalf("step context cause = %v, want ErrLeaseLost", cause)
		}
		got := h.get(e.ExecutionID)
		if got.Status != store.Running || got.Version != 2 || got.LastTransitionKey != "" {
			t.Fatalf("a step with a lost lease committed: %+v", got)
		}
	})
}

func mustRegistry(t *testing.T, ps ...pipeline.Pipeline) *pipeline.Registry {
	reg, err := pipeline.NewRegistry(ps...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestSweeperFindsLostDispatch(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		// One step per work item, so that step b's item can be lost.
		h := newHarness(t, engine.Config{Retry: fastRetry, SweepGrace: 2 * time.Second, ChainMaxSteps: 1}, threeSteps())
		// Lose the submit's item (1st) and step b's (3rd: after the sweep's).
		h.drop = func(n int) bool { return n == 1 || n == 3 }
		e := h.submit("p.three", "k1", map[string]any{})
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.Queued || got.StepIndex != 0 {
			t.Fatalf("row = %+v", got)
		}
		if res := h.sweep(); res.Redispatched != 0 {
			t.Fatalf("redispatched within grace: %+v", res)
		}
		time.Sleep(2 * time.Second)
		if res := h.sweep(); res.Redispatched != 1 {
			t.Fatalf("sweep = %+v", res)
		}
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.Queued || got.StepIndex != 1 {
			t.Fatalf("after first sweep: %+v", got)
		}
		// Step b's item is lost too: found once the claim of a (which came
		// through) is a lease, the tolerance and the grace old, as any
		// execution's lost hand-over is.
		time.Sleep(30*time.Second + 2*time.Second)
		h.sweep()
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("after second sweep: %+v", got)
		}
	})
}

func TestFailedDeadLetterPublishRetriedBySweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry, SweepGrace: time.Second}, pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{failing("bad", false)}})
		h.dlq.failNext = 2
		e := h.submit("p.bad", "k1", map[string]any{})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.Failed || !got.DLQPending {
			t.Fatalf("after failed publish: %+v", got)
		}
		time.Sleep(time.Second)
		if res := h.sweep(); res.DeadLettersPublished != 0 || res.Failed != 1 {
			t.Fatalf("sweep with DLQ still down = %+v", res)
		}
		// The failed publish backed off on the row: not again at once.
		if res := h.sweep(); res.Due != 0 {
			t.Fatalf("sweep right after a failed publish = %+v", res)
		}
		time.Sleep(time.Second)
		if res := h.sweep(); res.DeadLettersPublished != 1 {
			t.Fatalf("sweep = %+v", res)
		}
		got = h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.DLQPending || !got.NextDueAt.IsZero() {
			t.Fatalf("after sweep: %+v", got)
		}
		if n := len(h.dlq.published()); n != 1 {
			t.Fatalf("%d envelopes published, want 1", n)
		}
		if res := h.sweep(); res.Due != 0 {
			t.Fatalf("DLQ row still due: %+v", res)
		}
	})
}

func TestRedrive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fixed := false
		work := step("work", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if !fixed {
				return nil, pipeline.NonRetryable("bad_dep", errors.New("dependency broken"))
			}
			in["attempt"] = info.Attempt
			return in, nil
		})
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.rd", Steps: []pipeline.Step{appendStep("a"), work}})
		e := h.submit("p.rd", "k1", map[string]any{})
		synctest.Wait()
		dlq := h.get(e.ExecutionID)
		if dlq.Status != store.DLQ {
			t.Fatalf("row = %+v", dlq)
		}
		ctx := context.Background()
		stale := dlq.Version - 1
		if _, err := h.rt.Redrive(ctx, e.Key(), "fixed", &stale); !errors.Is(err, engine.ErrVersionMismatch) {
			t.Fatalf("redrive with stale version err = %v", err)
		}
		fixed = true
		got, err := h.rt.Redrive(ctx, e.Key(), "dependency repaired, ticket OPS-1", &dlq.Version)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != store.Queued || got.StepIndex != 1 || got.Attempt != 2 || got.Note == "" || got.Error != nil {
			t.Fatalf("redriven row = %+v", got)
		}
		synctest.Wait()
		final := h.get(e.ExecutionID)
		if final.Status != store.Succeeded || final.RedriveCount != 1 || final.Note != "dependency repaired, ticket OPS-1" {
			t.Fatalf("final = %+v", final)
		}
		if _, err := h.rt.Redrive(ctx, e.Key(), "again", nil); !errors.Is(err, engine.ErrNotRedrivable) {
			t.Fatalf("redrive of SUCCEEDED err = %v", err)
		}
		if !strings.Contains(h.logs.String(), `"event":"execution_redriven"`) {
			t.Error("redrive not logged")
		}
	})
}

// TestRedriveGivesExactlyOneAttempt: a redriven execution that fails again
// goes straight back to the DLQ, retryable error or not.
func TestRedriveGivesExactlyOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.f", Steps: []pipeline.Step{failing("dep", true)}})
		e := h.submit("p.f", "k1", map[string]any{})
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, err := h.rt.Redrive(context.Background(), e.Key(), "try once more", nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Attempt != 4 {
			t.Fatalf("row = %+v", got)
		}
		if n := len(h.dlq.published()); n != 2 {
			t.Fatalf("%d envelopes, want 2", n)
		}
	})
}

func TestParkedRowsAreNeitherClaimedNorSwept(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry, SweepGrace: time.Millisecond}, threeSteps())
		for _, st := range []store.Status{store.WaitingExternal, store.RemoteOutcomeUnknown} {
			h.dropNext = 1
			e := h.submit("p.three", "k-"+string(st), map[string]any{})
			next := e
			next.Status = st
			next.NextDueAt, next.SweepAt = time.Time{}, time.Time{} // as the runtime parks a row
			parked, err := h.store.Update(context.Background(), store.Guard{Key: e.Key(), Version: e.Version}, next)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if res := h.sweep(); res.Due != 0 {
				t.Fatalf("%s swept: %+v", st, res)
			}
			if err := h.rt.Process(context.Background(), workItem(e)); err != nil {
				t.Fatal(err)
			}
			if got := h.get(e.ExecutionID); got.Version != parked.Version || got.Status != st {
				t.Fatalf("%s row changed: %+v", st, got)
			}
		}
	})
}

func TestShutdownReleasesLeaseWithoutUsingAnAttempt(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		slow := step("slow", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		h := newHarness(t, engine.Config{Retry: fastRetry}, pipeline.Pipeline{ID: "p.s", Steps: []pipeline.Step{slow}})
		h.dropNext = 1
		e := h.submit("p.s", "k1", map[string]any{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- h.rt.Process(ctx, workItem(e)) }()
		<-started
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Process = %v, want context.Canceled for redelivery", err)
		}
		got := h.get(e.ExecutionID)
		if got.Status != store.Queued || got.Attempt != 1 || got.LeaseOwner != "" || got.Error != nil {
			t.Fatalf("released row = %+v", got)
		}
	})
}

func TestIdempotency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{}, threeSteps())
		ctx := context.Background()
		in, _ := payload.JSON(map[string]any{"a": 1})
		req := engine.SubmitRequest{TenantID: "t1", PipelineID: "p.three", IdempotencyKey: "order-1", Input: in}
		first, err := h.rt.Submit(ctx, req)
		if err != nil || first.Duplicate {
			t.Fatalf("first = %+v, %v", first, err)
		}
		synctest.Wait() // let the first execution finish dispatching its steps
		sent := h.dispatched()
		dup, err := h.rt.Submit(ctx, req)
		if err != nil || !dup.Duplicate || dup.Execution.ExecutionID != first.Execution.ExecutionID {
			t.Fatalf("dup = %+v, %v", dup, err)
		}
		if h.dispatched() != sent {
			t.Fatal("a duplicate submission dispatched work")
		}
		other, _ := payload.JSON(map[string]any{"a": 2})
		mismatch := req
		mismatch.Input = other
		if _, err := h.rt.Submit(ctx, mismatch); !errors.Is(err, store.ErrKeyMismatch) {
			t.Fatalf("same key, other payload err = %v", err)
		}
		// Keys are scoped to the tenant.
		otherTenant := req
		otherTenant.TenantID = "t2"
		if r, err := h.rt.Submit(ctx, otherTenant); err != nil || r.Duplicate {
			t.Fatalf("other tenant = %+v, %v", r, err)
		}
		// Under OPTIONAL_CLIENT_KEY a submit without a key is a new
		// execution, however alike the bodies (audit item 2: the second
		// of two identical key-less submits answered "duplicate" and
		// nothing ran for it).
		noKey := req
		noKey.IdempotencyKey = ""
		a, errA := h.rt.Submit(ctx, noKey)
		b, errB := h.rt.Submit(ctx, noKey)
		if errA != nil || errB != nil || a.Duplicate || b.Duplicate || a.Execution.ExecutionID == b.Execution.ExecutionID {
			t.Fatalf("two key-less submits: %s duplicate=%v (%v) / %s duplicate=%v (%v); want two new executions",
				a.Execution.ExecutionID, a.Duplicate, errA, b.Execution.ExecutionID, b.Duplicate, errB)
		}
		if _, err := h.rt.Submit(ctx, engine.SubmitRequest{TenantID: "t1", PipelineID: "nope", Input: in}); !errors.Is(err, engine.ErrPipelineNotFound) {
			t.Fatalf("unknown pipeline err = %v", err)
		}
	})
}

func TestIdempotencyPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, _ := payload.JSON(map[string]any{"a": 1})
		req := engine.SubmitRequest{TenantID: "t1", PipelineID: "p.three", Input: in}
		ctx := context.Background()

		strict := newHarness(t, engine.Config{IdempotencyPolicy: engine.ClientKeyRequired}, threeSteps())
		if _, err := strict.rt.Submit(ctx, req); !errors.Is(err, engine.ErrKeyRequired) {
			t.Fatalf("CLIENT_KEY_REQUIRED without key err = %v", err)
		}
		server := newHarness(t, engine.Config{IdempotencyPolicy: engine.ServerKeyOnly}, threeSteps())
		r1 := req
		r1.IdempotencyKey = "client-1"
		r2 := req
		r2.IdempotencyKey = "client-2"
		a, err1 := server.rt.Submit(ctx, r1)
		b, err2 := server.rt.Submit(ctx, r2)
		if err1 != nil || err2 != nil || !b.Duplicate || a.Execution.ExecutionID != b.Execution.ExecutionID {
			t.Fatalf("SERVER_KEY_ONLY must ignore client keys: %+v %v / %+v %v", a, err1, b, err2)
		}
	})
}

func TestLargePayloadsAreChunked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := strings.Repeat("x", 300*1024)
		h := newHarness(t, engine.Config{InlineBudget: 1024}, threeSteps())
		e := h.submit("p.three", "k1", map[string]any{"blob": big})
		if e.Input.ManifestID == "" || e.Input.Inline != nil {
			t.Fatalf("input not chunked: %+v", e.Input.Length)
		}
		synctest.Wait()
		got, res, err := h.rt.Result(context.Background(), e.Key())
		if err != nil || got.Result.ManifestID == "" {
			t.Fatalf("result: %v, ref %+v", err, got.Result.Length)
		}
		var out struct {
			Blob string
			Path []string
		}
		if err := json.Unmarshal(res.Data, &out); err != nil || out.Blob != big || len(out.Path) != 3 {
			t.Fatalf("result decode: %v, path %v", err, out.Path)
		}
	})
}

// TestUnreadableInputDeadLetters: a row whose input cannot be read (its
// manifest is gone) fails non-retryably instead of looping.
func TestUnreadableInputDeadLetters(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry}, threeSteps())
		now := time.Now()
		row := store.Execution{TenantID: "t1", ExecutionID: "e-lost", PipelineID: "p.three", Status: store.Queued, Version: 1,
			StepName: "a", Attempt: 1, NextDueAt: now, IdempotencyKey: "k", CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
			Input: payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 1 << 20, SHA256: payload.Digest(nil), ManifestID: "gone"}}
		if _, _, err := h.store.CreateOrGet(context.Background(), store.CreateRequest{Execution: row}); err != nil {
			t.Fatal(err)
		}
		if err := h.rt.Process(context.Background(), workItem(row)); err != nil {
			t.Fatal(err)
		}
		got := h.get("e-lost")
		if got.Status != store.DLQ || got.Error.Code != engine.CodePayloadUnreadable || got.Error.TerminalReason != store.ReasonNonRetryable {
			t.Fatalf("row = %+v err %+v", got, got.Error)
		}
	})
}

// TestSweepPagesWithSeen: repeated sweeps of one pass never handle a row
// twice, even while the rows stay due.
func TestSweepPagesWithSeen(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, engine.Config{Retry: fastRetry, SweepGrace: time.Second, SweepLimit: 2}, threeSteps())
		h.dropNext = 5 // every submit's work item is lost
		for i := range 5 {
			h.submit("p.three", fmt.Sprint("k", i), map[string]any{})
		}
		h.drop = func(int) bool { return true } // and so are the sweeps' items: the rows stay due
		time.Sleep(2 * time.Second)
		pass := &engine.SweepPass{}
		var total, due int
		for range 3 {
			res, err := h.rt.Sweep(context.Background(), pass)
			if err != nil {
				t.Fatal(err)
			}
			total += res.Redispatched
			due += res.Due
		}
		if total != 5 || due != 5 {
			t.Fatalf("3 sweeps re-dispatched %d rows (%d looked at), want each of the 5 once", total, due)
		}
		if res, _ := h.rt.Sweep(context.Background(), pass); res.Due != 0 || res.More {
			t.Fatalf("a fourth sweep of the pass found %+v", res)
		}
		// A re-dispatch pushed each row's next look out by the grace: a new
		// pass right away finds nothing, one a grace later finds them again.
		if res, _ := h.rt.SweepOnce(context.Background()); res.Due != 0 {
			t.Fatalf("a new pass at once: %+v", res)
		}
		time.Sleep(time.Second)
		if res, _ := h.rt.SweepOnce(context.Background()); res.Redispatched != 2 || !res.More {
			t.Fatalf("a new pass a grace later: %+v", res)
		}
	})
}
