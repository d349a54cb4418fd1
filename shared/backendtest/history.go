package backendtest

// The history suite (Provider.History): lifecycles run through the real
// engine on the provider's state store, and the history its reader
// returns compared with the events expected, in order. Each case uses its
// own tenant, so a factory may share one backend (one table) across cases.

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

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// HistoryWait bounds how long the history suite waits for a provider's
// history to show the events of the writes made (a history fed from a
// change stream arrives after the writes).
const HistoryWait = 45 * time.Second

var historySeq atomic.Int64

// historySecret keys the suite's await resume tokens.
const historySecret = "backendtest-history-secret"

// historyEnv is one case: a runtime on the provider's store, driven by
// hand (its work items land in a queue the case delivers), on a fake
// clock near the real time.
type historyEnv struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock.Fake
	store  store.Store
	reader history.Reader
	rt     *engine.Runtime
	queue  *historyQueue
	tenant string
}

// historyQueue keeps dispatched work items for the case to deliver.
type historyQueue struct {
	mu    sync.Mutex
	items []dispatch.WorkItem
}

func (q *historyQueue) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		q.items = append(q.items, m.Item)
	}
	return nil
}

func (q *historyQueue) take() []dispatch.WorkItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.items
	q.items = nil
	return out
}

// historyDLQ accepts every dead letter.
type historyDLQ struct{}

func (historyDLQ) Publish(ctx context.Context, _ deadletter.Envelope) error { return ctx.Err() }

// inlineOnly is the payload store of the suite's runtime: its payloads fit
// the row, so a call is a bug of the suite.
type inlineOnly struct{ t *testing.T }

func (s inlineOnly) PutPart(context.Context, payload.Part) error {
	s.t.Error("backendtest: the history suite's payloads are inline; PutPart was called")
	return errors.New("backendtest: no payload store")
}

func (s inlineOnly) GetPart(context.Context, string, string) (payload.Part, error) {
	s.t.Error("backendtest: the history suite's payloads are inline; GetPart was called")
	return payload.Part{}, payload.ErrNotFound
}

func (s inlineOnly) ExtendPart(context.Context, string, string, time.Time) error {
	s.t.Error("backendtest: the history suite's payloads are inline; ExtendPart was called")
	return payload.ErrNotFound
}

func (s inlineOnly) DeletePart(context.Context, string, string) error {
	s.t.Error("backendtest: the history suite's payloads are inline; DeletePart was called")
	return nil
}

func setupHistory(t *testing.T, f func(*testing.T, clock.Clock) (store.Store, history.Reader), steps ...pipeline.Step) *historyEnv {
	t.Helper()
	c := clock.NewFake(time.Now().UTC().Truncate(time.Millisecond))
	st, reader := f(t, c)
	e := &historyEnv{t: t, ctx: context.Background(), clock: c, store: st, reader: reader, queue: &historyQueue{},
		tenant: fmt.Sprintf("hist-%d-%d", time.Now().UnixNano(), historySeq.Add(1))}
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "hist.p", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	e.rt, err = engine.New(engine.Config{
		WorkerID: "hist-worker", Lease: 10 * time.Second, ClockSkewTolerance: 0, SweepGrace: time.Second,
		Retry:       pipeline.RetryPolicy{MaxRetries: 1, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second},
		AwaitSecret: historySecret, InlineBudget: payload.DefaultInlineBudget,
	}, engine.Deps{
		Registry: reg, Store: st, Payloads: inlineOnly{t}, Dispatcher: e.queue, DeadLetter: historyDLQ{}, Clock: c, History: reader,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *historyEnv) submit() store.Execution {
	e.t.Helper()
	in, err := payload.JSON(map[string]any{"n": 1})
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.rt.Submit(e.ctx, engine.SubmitRequest{TenantID: e.tenant, PipelineID: "hist.p", IdempotencyKey: "k", Input: in})
	if err != nil {
		e.t.Fatalf("Submit: %v", err)
	}
	return res.Execution
}

// deliver processes every queued work item (and the ones they queue)
// until the queue is empty; an item that is not due yet is kept.
func (e *historyEnv) deliver() {
	e.t.Helper()
	var kept []dispatch.WorkItem
	for range 20 {
		items := e.queue.take()
		if len(items) == 0 {
			break
		}
		for _, it := range items {
			err := e.rt.Process(e.ctx, it)
			var ra *dispatch.RetryAfterError
			switch {
			case errors.As(err, &ra):
				kept = append(kept, it)
			case err != nil:
				e.t.Fatalf("Process: %v", err)
			}
		}
	}
	e.queue.mu.Lock()
	e.queue.items = append(e.queue.items, kept...)
	e.queue.mu.Unlock()
}

func (e *historyEnv) status(x store.Execution) store.Execution {
	e.t.Helper()
	got, err := e.store.Get(e.ctx, x.Key())
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	return got
}

// want is an expected history event.
type want struct {
	Type      history.Type
	StepIndex int
	Attempt   int
	Status    store.Status
}

func (w want) String() string {
	return fmt.Sprintf("%s step %d attempt %d %s", w.Type, w.StepIndex, w.Attempt, w.Status)
}

// expect waits (up to HistoryWait) until the reader returns the history
// ws describes, then checks what every event must carry: seq from 1, the
// commit times in order, the worker of every started attempt, the retry
// time of every retried failure.
func (e *historyEnv) expect(x store.Execution, ws ...want) []history.Event {
	e.t.Helper()
	deadline := time.Now().Add(HistoryWait)
	var got []history.Event
	var err error
	for {
		got, err = e.reader.History(e.ctx, x.Key())
		if err == nil && sameHistory(got, ws) {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("history of %s after %s: err %v\n got:\n%s\nwant:\n%s", x.ExecutionID, HistoryWait, err, describe(got), describeWant(ws))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, g := range got {
		if g.Seq != i+1 {
			e.t.Errorf("event %d (%s) has seq %d, want %d", i, g.Type, g.Seq, i+1)
		}
		if i > 0 && g.At.Before(got[i-1].At) {
			e.t.Errorf("event %d (%s) at %v is before event %d at %v", i, g.Type, g.At, i-1, got[i-1].At)
		}
		if (g.Type == history.StepStarted || g.Type == history.LeaseTakenOver) && g.Worker == "" {
			e.t.Errorf("event %d (%s) names no worker", i, g.Type)
		}
		if g.Type == history.StepFailed && (g.Error == nil || g.Error.Code == "") {
			e.t.Errorf("event %d (%s) carries no error", i, g.Type)
		}
		if g.Type == history.StepFailed && g.Status == store.WaitRetry && g.RetryAt.IsZero() {
			e.t.Errorf("event %d (%s, retried) carries no retry time", i, g.Type)
		}
	}
	return got
}

func sameHistory(got []history.Event, ws []want) bool {
	if len(got) != len(ws) {
		return false
	}
	for i, w := range ws {
		g := got[i]
		if g.Type != w.Type || g.StepIndex != w.StepIndex || g.Attempt != w.Attempt || g.Status != w.Status {
			return false
		}
	}
	return true
}

func describe(evs []history.Event) string {
	var b strings.Builder
	for _, g := range evs {
		fmt.Fprintf(&b, "  %d %s (version %d)\n", g.Seq, want{g.Type, g.StepIndex, g.Attempt, g.Status}, g.Version)
	}
	return b.String()
}

func describeWant(ws []want) string {
	var b strings.Builder
	for i, w := range ws {
		fmt.Fprintf(&b, "  %d %s\n", i+1, w)
	}
	return b.String()
}

// ok is a step that returns its input.
func ok(name string) pipeline.Step {
	return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		return in, nil
	})
}

// failing is a step whose attempts listed in fail fail (retryably) and
// whose other attempts succeed.
func failing(name string, fail ...int) pipeline.Step {
	return pipeline.NewStep(name, func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		for _, a := range fail {
			if info.Attempt == a {
				return nil, pipeline.Retryable("flaky", fmt.Errorf("attempt %d failed", a))
			}
		}
		return in, nil
	})
}

func runHistory(t *testing.T, f func(*testing.T, clock.Clock) (store.Store, history.Reader)) {
	const (
		queued   = store.Queued
		running  = store.Running
		retrying = store.WaitRetry
	)
	t.Run("ChainedSteps", func(t *testing.T) {
		t.Parallel()
		e := setupHistory(t, f, ok("a"), ok("b"), ok("c"))
		x := e.submit()
		e.deliver()
		e.expect(x,
			want{history.Submitted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running},
			// Step a's commit claims step b in the same write, and so on.
			want{history.StepSucceeded, 0, 1, running}, want{history.StepStarted, 1, 1, running},
			want{history.StepSucceeded, 1, 1, running}, want{history.StepStarted, 2, 1, running},
			want{history.StepSucceeded, 2, 1, store.Succeeded}, want{history.Succeeded, 2, 1, store.Succeeded})
	})
	t.Run("RetryDeadLetterRedrive", func(t *testing.T) {
		t.Parallel()
		e := setupHistory(t, f, failing("flaky", 1, 2))
		x := e.submit()
		e.deliver()
		e.clock.Advance(2 * time.Second) // past the retry's due time
		e.deliver()
		if got := e.status(x); got.Status != store.DLQ {
			e.t.Fatalf("after two failed attempts the execution is %s, want DLQ", got.Status)
		}
		if _, err := e.rt.Redrive(e.ctx, x.Key(), "the flaky dependency is back", nil); err != nil {
			t.Fatalf("Redrive: %v", err)
		}
		e.deliver()
		got := e.expect(x,
			want{history.Submitted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running}, want{history.StepFailed, 0, 1, retrying},
			want{history.StepStarted, 0, 2, running}, want{history.StepFailed, 0, 2, store.Failed},
			want{history.DeadLettered, 0, 2, store.DLQ},
			want{history.Redriven, 0, 3, queued},
			want{history.StepStarted, 0, 3, running}, want{history.StepSucceeded, 0, 3, store.Succeeded},
			want{history.Succeeded, 0, 3, store.Succeeded})
		if r := got[2].RetryAt; !r.Equal(got[2].At.Add(time.Second)) {
			t.Errorf("the retried failure's retry time is %v, want its commit time %v plus the 1s backoff", r, got[2].At)
		}
		if got[6].Reason != "the flaky dependency is back" {
			t.Errorf("REDRIVEN reason %q, want the operator's", got[6].Reason)
		}
	})
	t.Run("Sleep", func(t *testing.T) {
		t.Parallel()
		e := setupHistory(t, f, ok("a"), pipeline.Sleep("nap", time.Hour), ok("b"))
		x := e.submit()
		e.deliver()
		e.clock.Advance(time.Hour) // the wake-up
		e.deliver()
		got := e.expect(x,
			want{history.Submitted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running},
			want{history.StepSucceeded, 0, 1, running}, want{history.StepStarted, 1, 1, running},
			want{history.StepSucceeded, 1, 1, queued}, want{history.Sleeping, 1, 1, queued},
			want{history.StepStarted, 2, 1, running}, want{history.StepSucceeded, 2, 1, store.Succeeded},
			want{history.Succeeded, 2, 1, store.Succeeded})
		if w := got[5].WakeAt; !w.Equal(got[5].At.Add(time.Hour)) {
			t.Errorf("the sleep's wake-up is %v, want its commit time %v plus the hour", w, got[5].At)
		}
	})
	t.Run("TakeoverRenewalsReschedules", func(t *testing.T) {
		t.Parallel()
		e := setupHistory(t, f, ok("a"))
		x := e.submit()
		// A worker claims the step and dies; while it lived it renewed
		// its lease, and the sweeper moved the row's next look: neither is
		// an event.
		now := e.clock.Now()
		crashed, err := e.store.Claim(e.ctx, store.ClaimRequest{Key: x.Key(), ExpectVersion: x.Version, Owner: "crashed-worker",
			Now: now, DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(time.Second), Attempt: 1})
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if err := e.store.Renew(e.ctx, x.Key(), "crashed-worker", crashed.Version, now.Add(2*time.Second)); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := e.store.Reschedule(e.ctx, x.Key(), crashed.SweepAt, crashed.SweepAt.Add(time.Minute), 1); err != nil {
			t.Fatalf("Reschedule: %v", err)
		}
		e.clock.Advance(3 * time.Second) // the lease lapsed
		e.deliver()
		got := e.expect(x,
			want{history.Submitted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running},
			want{history.LeaseTakenOver, 0, 2, running},
			want{history.StepSucceeded, 0, 2, store.Succeeded}, want{history.Succeeded, 0, 2, store.Succeeded})
		if got[1].Worker != "crashed-worker" || got[2].Worker != "hist-worker" || !strings.Contains(got[2].Reason, "crashed-worker") {
			t.Errorf("workers: started by %q, taken over by %q (reason %q); want crashed-worker, then hist-worker naming it",
				got[1].Worker, got[2].Worker, got[2].Reason)
		}
	})
	t.Run("Await", func(t *testing.T) {
		t.Parallel()
		var awaitID atomic.Value
		park := pipeline.NewStep("approve", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			awaitID.Store(await.ID(info))
			return nil, &pipeline.AwaitError{ID: await.ID(info), Timeout: time.Hour}
		})
		e := setupHistory(t, f, park, ok("after"))
		x := e.submit()
		e.deliver()
		id, _ := awaitID.Load().(string)
		done, err := payload.JSON(map[string]any{"approved": true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.rt.CompleteAwait(e.ctx, x.ExecutionID, id, await.Sign([]byte(historySecret), e.tenant, x.ExecutionID, id), done); err != nil {
			t.Fatalf("CompleteAwait: %v", err)
		}
		e.deliver()
		e.expect(x,
			want{history.Submitted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running}, want{history.Awaiting, 0, 1, store.WaitingExternal},
			want{history.AwaitCompleted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running},
			want{history.StepSucceeded, 0, 1, running}, want{history.StepStarted, 1, 1, running},
			want{history.StepSucceeded, 1, 1, store.Succeeded}, want{history.Succeeded, 1, 1, store.Succeeded})
	})
	t.Run("OutcomeUnknownRedriven", func(t *testing.T) {
		t.Parallel()
		remote := pipeline.NewStep("remote", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if info.Attempt == 1 {
				return nil, &pipeline.OutcomeUnknownError{Protocol: "rest", Target: "https://worker.example", Deadline: time.Second, Elapsed: time.Second}
			}
			return in, nil
		})
		e := setupHistory(t, f, remote)
		x := e.submit()
		e.deliver()
		if _, err := e.rt.RedriveWith(e.ctx, x.Key(), engine.RedriveOptions{Reason: "the remote call never ran", ConfirmedNoRemoteEffect: true}); err != nil {
			t.Fatalf("RedriveWith: %v", err)
		}
		e.deliver()
		got := e.expect(x,
			want{history.Submitted, 0, 1, queued},
			want{history.StepStarted, 0, 1, running}, want{history.OutcomeUnknown, 0, 1, store.RemoteOutcomeUnknown},
			want{history.Redriven, 0, 2, queued},
			want{history.StepStarted, 0, 2, running}, want{history.StepSucceeded, 0, 2, store.Succeeded},
			want{history.Succeeded, 0, 2, store.Succeeded})
		if got[2].Error == nil || got[2].Error.Code != pipeline.CodeRemoteOutcomeUnknown {
			t.Errorf("OUTCOME_UNKNOWN carries error %+v, want code %s", got[2].Error, pipeline.CodeRemoteOutcomeUnknown)
		}
	})
	t.Run("UnknownAndOtherTenantsExecutions", func(t *testing.T) {
		t.Parallel()
		e := setupHistory(t, f, ok("a"))
		x := e.submit()
		e.expect(x, want{history.Submitted, 0, 1, queued})
		for _, k := range []store.Key{{TenantID: e.tenant + "-other", ExecutionID: x.ExecutionID}, {TenantID: e.tenant, ExecutionID: x.ExecutionID + "0"}} {
			if _, err := e.reader.History(e.ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("History(%v): err = %v, want store.ErrNotFound", k, err)
			}
		}
	})
}
