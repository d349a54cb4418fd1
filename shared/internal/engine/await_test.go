package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

const testSecret = "s3cret"

// tokens records the await ids and tokens an await step handed out.
type tokens struct {
	mu  sync.Mutex
	ids []string
	tok []string
}

func (k *tokens) last() (string, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.ids) == 0 {
		return "", ""
	}
	return k.ids[len(k.ids)-1], k.tok[len(k.tok)-1]
}

func (k *tokens) n() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.ids)
}

func awaitPipeline(k *tokens, timeout time.Duration, last bool, opts ...pipeline.StepOption) pipeline.Pipeline {
	s := await.Step("approve", await.Spec{Timeout: timeout}, func(_ context.Context, req await.Request) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.ids, k.tok = append(k.ids, req.AwaitID), append(k.tok, req.Token)
		return nil
	}, opts...)
	if last {
		return pipeline.Pipeline{ID: "p.await-last", Steps: []pipeline.Step{appendStep("a"), s}}
	}
	return pipeline.Pipeline{ID: "p.await", Steps: []pipeline.Step{appendStep("a"), s, appendStep("c")}}
}

func jsonPayload(t *testing.T, v any) payload.Payload {
	t.Helper()
	p, err := payload.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAwaitParkCompleteNextStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		h := newHarness(t, engine.Config{Retry: fastRetry, AwaitSecret: testSecret}, awaitPipeline(k, 0, false))
		e := h.submit("p.await", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		id, tok := k.last()
		if got.Status != store.WaitingExternal || got.Await == nil || got.Await.ID != id || got.Await.Status != store.AwaitWaiting || !got.NextDueAt.IsZero() {
			t.Fatalf("parked row = %+v await %+v", got, got.Await)
		}
		if !await.Verify([]byte(testSecret), "t1", e.ExecutionID, id, tok) {
			t.Fatalf("token does not verify")
		}
		// Parked rows are never claimed or re-dispatched.
		sent := h.dispatched()
		if err := h.rt.Process(context.Background(), workItem(e)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		h.sweep()
		synctest.Wait()
		if again := h.get(e.ExecutionID); again.Version != got.Version || h.dispatched() != sent || k.n() != 1 {
			t.Fatalf("parked row changed: %+v (dispatched %d->%d, awaits %d)", again, sent, h.dispatched(), k.n())
		}

		done := jsonPayload(t, map[string]any{"path": []string{"a", "approved"}})
		after, dup, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, id, tok, done)
		// On time: back to QUEUED at the await step with the completion as
		// its output, for a worker of the execution's definition to commit.
		if err != nil || dup || after.Status != store.Queued || after.StepIndex != 1 || after.Await.Status != store.AwaitCompleted {
			t.Fatalf("CompleteAwait = %+v dup=%v err=%v", after, dup, err)
		}
		synctest.Wait()
		fin := h.get(e.ExecutionID)
		if fin.Status != store.Succeeded || fin.Await.Status != store.AwaitCompleted {
			t.Fatalf("row = %+v", fin)
		}
		_, res, err := h.rt.Result(context.Background(), e.Key())
		if err != nil || string(res.Data) != `{"path":["a","approved","c"]}` {
			t.Fatalf("result %s, %v", res.Data, err)
		}
		// Same payload again: duplicate, no change.
		again, dup, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, id, tok, done)
		if err != nil || !dup || again.Version != fin.Version {
			t.Fatalf("duplicate = %+v dup=%v err=%v", again, dup, err)
		}
		// A different payload: conflict.
		if _, _, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, id, tok, jsonPayload(t, map[string]any{"x": 1})); !errors.Is(err, engine.ErrAwaitAlreadyCompleted) {
			t.Fatalf("different payload err = %v", err)
		}
	})
}

func TestAwaitLastStepSucceedsWithCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		h := newHarness(t, engine.Config{Retry: fastRetry, AwaitSecret: testSecret}, awaitPipeline(k, 0, true))
		e := h.submit("p.await-last", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		id, tok := k.last()
		got, _, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, id, tok, payload.Raw("text/plain", []byte("ok")))
		if err != nil || got.Status != store.Queued {
			t.Fatalf("CompleteAwait = %+v, %v", got, err)
		}
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("after the worker's commit = %+v", got)
		}
		_, res, err := h.rt.Result(context.Background(), e.Key())
		if err != nil || string(res.Data) != "ok" || res.ContentType != "text/plain" {
			t.Fatalf("result %q %q, %v", res.Data, res.ContentType, err)
		}
		if n := len(h.observed(engine.EventSucceeded)); n != 1 {
			t.Fatalf("succeeded events = %d", n)
		}
	})
}

func TestAwaitCompletionRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		h := newHarness(t, engine.Config{Retry: fastRetry, AwaitSecret: testSecret}, awaitPipeline(k, 0, false))
		e := h.submit("p.await", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		id, tok := k.last()
		p := jsonPayload(t, 1)
		ctx := context.Background()
		if _, _, err := h.rt.CompleteAwait(ctx, e.ExecutionID, id, await.Sign([]byte(testSecret), "t2", e.ExecutionID, id), p); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("other tenant err = %v", err)
		}
		if _, _, err := h.rt.CompleteAwait(ctx, e.ExecutionID, id, "", p); !errors.Is(err, engine.ErrResumeTokenMissing) {
			t.Errorf("missing token err = %v", err)
		}
		if _, _, err := h.rt.CompleteAwait(ctx, e.ExecutionID, id, tok+"0", p); !errors.Is(err, engine.ErrResumeTokenInvalid) {
			t.Errorf("forged token err = %v", err)
		}
		other := "aw-other"
		if _, _, err := h.rt.CompleteAwait(ctx, e.ExecutionID, other, await.Sign([]byte(testSecret), "t1", e.ExecutionID, other), p); !errors.Is(err, engine.ErrAwaitNotCurrent) {
			t.Errorf("wrong await id err = %v", err)
		}
		if got := h.get(e.ExecutionID); got.Status != store.WaitingExternal {
			t.Fatalf("row changed: %+v", got)
		}
	})
}

func TestAwaitWithoutSecretFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		h := newHarness(t, engine.Config{Retry: fastRetry}, awaitPipeline(k, 0, false))
		e := h.submit("p.await", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != pipeline.CodeAwaitTokenSecretMissing {
			t.Fatalf("row = %+v", got)
		}
	})
}

func TestAwaitTimeoutRetriesThenDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		pol := pipeline.RetryPolicy{MaxRetries: 1, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}
		h := newHarness(t, engine.Config{Retry: fastRetry, AwaitSecret: testSecret, SweepGrace: time.Second},
			awaitPipeline(k, time.Minute, false, pipeline.WithRetry(pol)))
		e := h.submit("p.await", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		first, firstTok := k.last()
		parked := h.get(e.ExecutionID)
		if parked.SweepAt.IsZero() || !parked.SweepAt.Equal(parked.Await.TimeoutAt) {
			t.Fatalf("parked = %+v", parked)
		}
		time.Sleep(59 * time.Second)
		if res := h.sweep(); res.AwaitsTimedOut != 0 {
			t.Fatalf("timed out early: %+v", res)
		}
		time.Sleep(2 * time.Second)
		if res := h.sweep(); res.AwaitsTimedOut != 1 {
			t.Fatalf("sweep = %+v", res)
		}
		synctest.Wait()
		time.Sleep(2 * time.Second) // the retry delay
		synctest.Wait()
		retried := h.get(e.ExecutionID)
		second, _ := k.last()
		if k.n() != 2 || second == first || retried.Status != store.WaitingExternal || retried.Await.ID != second || retried.Attempt != 2 {
			t.Fatalf("retry: awaits %d (%s, %s), row %+v", k.n(), first, second, retried)
		}
		// The first await's completion is no longer current.
		if _, _, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, first, firstTok, jsonPayload(t, 1)); !errors.Is(err, engine.ErrAwaitNotCurrent) {
			t.Fatalf("stale await err = %v", err)
		}
		time.Sleep(62 * time.Second)
		h.sweep()
		synctest.Wait()
		dead := h.get(e.ExecutionID)
		if dead.Status != store.DLQ || dead.Error == nil || dead.Error.Code != pipeline.CodeAwaitTimeout ||
			dead.Error.TerminalReason != store.ReasonRetryExhausted || dead.Await.Status != store.AwaitTimedOut {
			t.Fatalf("dead = %+v err %+v", dead, dead.Error)
		}
		if envs := h.dlq.published(); len(envs) != 1 || envs[0].ErrorCode != pipeline.CodeAwaitTimeout {
			t.Fatalf("envelopes = %+v", envs)
		}

		// A late completion is kept for reconciliation and visible.
		_, tok := k.last()
		late, dup, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, second, tok, jsonPayload(t, "late"))
		if err != nil || dup || late.Status != store.DLQ || !late.Await.Late || late.Await.LatePayload.IsZero() || late.Await.CompletedAt.IsZero() {
			t.Fatalf("late = %+v await %+v, dup=%v err=%v", late, late.Await, dup, err)
		}
		lp, err := payload.Read(context.Background(), h.rt.Payloads(), late.Await.LatePayload)
		if err != nil || string(lp.Data) != `"late"` {
			t.Fatalf("late payload %s, %v", lp.Data, err)
		}
		if _, dup, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, second, tok, jsonPayload(t, "late")); err != nil || !dup {
			t.Fatalf("late repeat dup=%v err=%v", dup, err)
		}
		if _, _, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, second, tok, jsonPayload(t, "other")); !errors.Is(err, engine.ErrAwaitAlreadyCompleted) {
			t.Fatalf("late different err = %v", err)
		}
	})
}

func TestAwaitLateCompletionWhileLeasedIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &tokens{}
		h := newHarness(t, engine.Config{Retry: fastRetry, AwaitSecret: testSecret}, awaitPipeline(k, time.Minute, false))
		e := h.submit("p.await", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		id, tok := k.last()
		// Simulate the sweeper's timeout and a worker holding the retry's lease.
		row := h.get(e.ExecutionID)
		next := row
		a := *row.Await
		a.Status = store.AwaitTimedOut
		next.Await, next.Status, next.LeaseOwner, next.LeaseExpiresAt = &a, store.Running, "w9", row.UpdatedAt.Add(time.Hour)
		if _, err := h.store.Update(context.Background(), store.Guard{Key: row.Key(), Version: row.Version}, next); err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.rt.CompleteAwait(context.Background(), e.ExecutionID, id, tok, jsonPayload(t, 1)); !errors.Is(err, engine.ErrAwaitBusy) {
			t.Fatalf("err = %v", err)
		}
	})
}
