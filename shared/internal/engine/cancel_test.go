package engine_test

// Cancel scenarios: every status a cancel meets, a running step that
// honours or ignores its context, a cancel racing a commit both ways, a
// chained step, and a worker killed after the cancel was requested. Each
// runs in a synctest bubble: leases, renewals and sweeps on fake time.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// kinds records the kinds of the runtime events it hears.
type kinds struct {
	mu  sync.Mutex
	evs []engine.Event
}

func (k *kinds) Observe(_ context.Context, ev engine.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.evs = append(k.evs, ev)
}

func (k *kinds) of(kind engine.EventKind) []engine.Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []engine.Event
	for _, ev := range k.evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// checkCancelled fails unless the row is CANCELLED for reason as a
// terminal row: out of the sweep index, no lease, nothing due, retention
// from the cancel, and in no page of the sweep index.
func checkCancelled(t *testing.T, c *cluster, rt *engine.Runtime, id, reason string) store.Execution {
	t.Helper()
	got := c.get(id)
	if got.Status != store.Cancelled || got.CancelReason != reason || got.CancelRequestedAt.IsZero() {
		t.Fatalf("row %s reason %q requested %v, want CANCELLED for %q", got.Status, got.CancelReason, got.CancelRequestedAt, reason)
	}
	if !got.SweepAt.IsZero() || got.LeaseOwner != "" || !got.NextDueAt.IsZero() {
		t.Fatalf("cancelled row keeps sweep %v, lease %q, due %v", got.SweepAt, got.LeaseOwner, got.NextDueAt)
	}
	if want := got.UpdatedAt.Add(rt.Config().ExecutionTTL); !got.ExpiresAt.Equal(want) {
		t.Fatalf("expires %v, want the retention from the cancel (%v)", got.ExpiresAt, want)
	}
	page, err := c.store.Due(context.Background(), store.DueQuery{By: time.Now().Add(24 * time.Hour), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range page.Refs {
		if ref.Key.ExecutionID == id {
			t.Fatalf("the cancelled row is still in the sweep index")
		}
	}
	return got
}

// TestCancelEndsWaitingExecutionsAtOnce: QUEUED, WAIT_RETRY,
// WAITING_EXTERNAL and REMOTE_OUTCOME_UNKNOWN executions become CANCELLED
// with one write; then nothing claims, sweeps, retries or re-drives them,
// a second cancel changes nothing, and observers hear one terminal event.
func TestCancelEndsWaitingExecutionsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		ev := &kinds{}
		c.observers = []engine.Observer{ev}
		k := &tokens{}
		flaky := pipeline.Pipeline{ID: "p.flaky", Steps: []pipeline.Step{step("work", func(context.Context, pipeline.StepInfo, map[string]any) (map[string]any, error) {
			return nil, errors.New("not yet")
		})}}
		var runs atomic.Int32
		counted := pipeline.Pipeline{ID: "p.counted", Steps: []pipeline.Step{step("a", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			runs.Add(1)
			return in, nil
		})}}
		rt := c.worker("w", engine.Config{Retry: fastRetry, AwaitSecret: testSecret, SweepGrace: time.Second}, nil,
			flaky, counted, awaitPipeline(k, 0, false))
		ctx := context.Background()

		queued := submitTo(t, rt, "p.counted", "queued", map[string]any{})
		retrying := submitTo(t, rt, "p.flaky", "retrying", map[string]any{})
		parked := submitTo(t, rt, "p.await", "parked", map[string]any{"path": []string{}})
		unknown := submitTo(t, rt, "p.counted", "unknown", map[string]any{})
		for _, m := range c.queue.take() {
			if m.Item.ExecutionID != queued.ExecutionID && m.Item.ExecutionID != unknown.ExecutionID {
				rt.Process(ctx, m.Item)
			}
		}
		deliver(rt, c.queue) // the await's next step: parked
		if got := c.get(retrying.ExecutionID); got.Status != store.WaitRetry {
			t.Fatalf("retrying row is %s", got.Status)
		}
		if got := c.get(parked.ExecutionID); got.Status != store.WaitingExternal {
			t.Fatalf("parked row is %s", got.Status)
		}
		// An unknown remote outcome, as a remote step's deadline leaves it.
		u := c.get(unknown.ExecutionID)
		u.Status, u.SweepAt, u.NextDueAt = store.RemoteOutcomeUnknown, time.Time{}, time.Time{}
		if _, err := c.store.Update(ctx, store.Guard{Key: u.Key(), Version: u.Version}, u); err != nil {
			t.Fatal(err)
		}

		for _, e := range []store.Execution{queued, retrying, parked, unknown} {
			before := c.get(e.ExecutionID)
			got, changed, err := rt.Cancel(ctx, e.Key(), "customer asked, OPS-1")
			if err != nil || !changed || got.Status != store.Cancelled || got.Version != before.Version+1 {
				t.Fatalf("Cancel of a %s execution = %s v%d changed=%v, %v; want CANCELLED at version %d", before.Status, got.Status, got.Version, changed, err, before.Version+1)
			}
			checkCancelled(t, c, rt, e.ExecutionID, "customer asked, OPS-1")
			again, changed, err := rt.Cancel(ctx, e.Key(), "a second time")
			if err != nil || changed || again.Version != got.Version || again.CancelReason != "customer asked, OPS-1" {
				t.Fatalf("second Cancel = v%d changed=%v reason %q, %v; want the row unchanged", again.Version, changed, again.CancelReason, err)
			}
		}
		// Terminal everywhere: the queued work item claims nothing, the
		// retry time passes without a retry, the sweep has nothing to do,
		// a re-drive is refused, an await completion finds no await.
		time.Sleep(time.Minute)
		for _, e := range []store.Execution{queued, retrying, unknown} {
			if err := rt.Process(ctx, workItem(e)); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := rt.SweepOnce(ctx); err != nil || res.Due != 0 {
			t.Fatalf("sweep after the cancels: %+v, %v; want nothing due", res, err)
		}
		if _, err := rt.Redrive(ctx, retrying.Key(), "re-drive a cancelled one", nil); !errors.Is(err, engine.ErrNotRedrivable) {
			t.Fatalf("Redrive of a cancelled execution: %v, want ErrNotRedrivable", err)
		}
		id, tok := k.last()
		if _, _, err := rt.CompleteAwait(ctx, parked.ExecutionID, id, tok, jsonPayload(t, map[string]any{"ok": true})); !errors.Is(err, engine.ErrAwaitNotCurrent) {
			t.Fatalf("completion of a cancelled await: %v, want ErrAwaitNotCurrent", err)
		}
		if runs.Load() != 0 || c.queue.count() != 5 {
			t.Fatalf("%d runs and %d items sent after the cancels, want none beyond the submits' and the await's", runs.Load(), c.queue.count())
		}
		if got := ev.of(engine.EventCancelled); len(got) != 4 || !got[0].Terminal() || got[0].Execution.Status != store.Cancelled {
			t.Fatalf("%d cancelled events (%+v), want 4 terminal ones", len(got), got)
		}
		if n := strings.Count(c.logs.String(), `"event":"execution_cancelled"`); n != 4 {
			t.Fatalf("%d execution_cancelled log events, want 4", n)
		}
	})
}

// TestCancelRefusesEndedExecutions: SUCCEEDED and DLQ are refused with
// ErrNotCancellable and left as they are.
func TestCancelRefusesEndedExecutions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		bad := pipeline.Pipeline{ID: "p.bad", Steps: []pipeline.Step{step("work", func(context.Context, pipeline.StepInfo, map[string]any) (map[string]any, error) {
			return nil, pipeline.NonRetryable("broken", errors.New("broken"))
		})}}
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, threeSteps(), bad)
		ok := submitTo(t, rt, "p.three", "ok", map[string]any{})
		dead := submitTo(t, rt, "p.bad", "dead", map[string]any{})
		deliver(rt, c.queue)
		for _, e := range []store.Execution{ok, dead} {
			before := c.get(e.ExecutionID)
			got, changed, err := rt.Cancel(context.Background(), e.Key(), "too late")
			if !errors.Is(err, engine.ErrNotCancellable) || changed || got.Status != before.Status {
				t.Fatalf("Cancel of a %s execution: %s changed=%v, %v; want ErrNotCancellable", before.Status, got.Status, changed, err)
			}
			if after := c.get(e.ExecutionID); after.Version != before.Version || after.CancelReason != "" {
				t.Fatalf("the refused cancel changed the row: %+v", after)
			}
		}
		if _, _, err := rt.Cancel(context.Background(), store.Key{TenantID: "t2", ExecutionID: ok.ExecutionID}, "x"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Cancel of another tenant's execution: %v, want ErrNotFound", err)
		}
	})
}

// blockingStep is a step that waits for release (ignoring its context
// when stubborn, returning when its context ends otherwise) and records
// its context's cause.
type blockingStep struct {
	started, release chan struct{}
	stubborn         bool
	mu               sync.Mutex
	cause            error
	runs             atomic.Int32
}

func newBlockingStep(stubborn bool) *blockingStep {
	return &blockingStep{started: make(chan struct{}, 10), release: make(chan struct{}), stubborn: stubborn}
}

func (b *blockingStep) step(name string) pipeline.Step {
	return step(name, func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		b.runs.Add(1)
		b.started <- struct{}{}
		if b.stubborn {
			<-b.release
		} else {
			select {
			case <-b.release:
			case <-ctx.Done():
			}
		}
		b.mu.Lock()
		b.cause = context.Cause(ctx)
		b.mu.Unlock()
		if ctx.Err() != nil && !b.stubborn {
			return nil, ctx.Err()
		}
		path, _ := in["path"].([]any)
		in["path"] = append(path, name)
		return in, nil
	})
}

func (b *blockingStep) seenCause() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cause
}

// TestCancelRunningStep: a RUNNING execution's cancel is recorded on the
// row (still RUNNING); at the next lease renewal at the latest the
// worker ends it CANCELLED and cancels the step's context with cause
// ErrCancelled; a step that honours it returns, one that ignores it is
// not waited for, and in both cases its commit is refused: no retry, no
// next step, no other run.
func TestCancelRunningStep(t *testing.T) {
	for _, stubborn := range []bool{false, true} {
		name := "honours its context"
		if stubborn {
			name = "ignores its context"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t)
				ev := &kinds{}
				c.observers = []engine.Observer{ev}
				b := newBlockingStep(stubborn)
				p := pipeline.Pipeline{ID: "p.block", Steps: []pipeline.Step{appendStep("a"), b.step("b"), appendStep("c")}}
				cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second}
				rt := c.worker("w", cfg, nil, p)
				e := submitTo(t, rt, "p.block", "k1", map[string]any{})
				c.queue.take()
				processed := make(chan error, 1)
				go func() { processed <- rt.Process(context.Background(), workItem(e)) }()
				<-b.started
				requested := time.Now()
				got, changed, err := rt.Cancel(context.Background(), e.Key(), "wrong order")
				if err != nil || !changed || got.Status != store.Running || got.CancelRequestedAt.IsZero() || got.LeaseOwner != "w" {
					t.Fatalf("Cancel of a running execution = %s requested %v owner %q changed=%v, %v; want RUNNING with the request recorded",
						got.Status, got.CancelRequestedAt, got.LeaseOwner, changed, err)
				}
				if again, changed, _ := rt.Cancel(context.Background(), e.Key(), "again"); changed || again.Version != got.Version {
					t.Fatalf("a second cancel while running changed the row (v%d -> v%d)", got.Version, again.Version)
				}
				// The renewal every lease/3 sees it.
				time.Sleep(cfg.Lease / 3)
				synctest.Wait()
				done := checkCancelled(t, c, rt, e.ExecutionID, "wrong order")
				if waited := done.UpdatedAt.Sub(requested); waited > cfg.Lease/3 {
					t.Fatalf("cancelled %s after the request, want within a renewal (%s)", waited, cfg.Lease/3)
				}
				if stubborn {
					select {
					case err := <-processed:
						t.Fatalf("Process returned (%v) while the step still runs", err)
					default:
					}
					close(b.release) // the step finally returns: its commit must be refused
				}
				if err := <-processed; err != nil {
					t.Fatalf("Process: %v", err)
				}
				if cause := b.seenCause(); !errors.Is(cause, engine.ErrCancelled) {
					t.Fatalf("the step's context cause is %v, want ErrCancelled", cause)
				}
				after := c.get(e.ExecutionID)
				if after.Status != store.Cancelled || after.Version != done.Version || after.StepIndex != 1 {
					t.Fatalf("after the step returned: %s at step %d v%d, want CANCELLED at step 1 v%d", after.Status, after.StepIndex, after.Version, done.Version)
				}
				time.Sleep(time.Minute)
				deliver(rt, c.queue)
				if _, err := rt.SweepOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
				if b.runs.Load() != 1 || c.queue.count() != 1 || c.get(e.ExecutionID).Version != done.Version {
					t.Fatalf("%d runs of the step, %d items sent; want one run and only the submit's item", b.runs.Load(), c.queue.count())
				}
				if n := len(ev.of(engine.EventCancelled)); n != 1 {
					t.Fatalf("%d cancelled events, want 1", n)
				}
				if !strings.Contains(c.logs.String(), `"event":"execution_cancel_requested"`) ||
					!strings.Contains(c.logs.String(), `"by":"worker"`) {
					t.Fatalf("logs lack the request or the worker's cancel:\n%s", c.logs.String())
				}
			})
		})
	}
}

// raceStore runs a hook once, before the first leased Update (a step's
// commit) once armed; and can answer one Get with a stale row.
type raceStore struct {
	store.Store
	mu          sync.Mutex
	beforeWrite func()
	stale       *store.Execution
}

func (s *raceStore) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	s.mu.Lock()
	hook := s.beforeWrite
	if g.LeaseOwner != "" && next.LeaseOwner == "" && hook != nil {
		s.beforeWrite = nil
	} else {
		hook = nil
	}
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return s.Store.Update(ctx, g, next)
}

func (s *raceStore) Get(ctx context.Context, k store.Key) (store.Execution, error) {
	s.mu.Lock()
	stale := s.stale
	s.stale = nil
	s.mu.Unlock()
	if stale != nil {
		return *stale, nil
	}
	return s.Store.Get(ctx, k)
}

// TestCancelRacingCommit: a cancel that lands between a step's end and
// its commit wins (the commit is refused, the execution ends CANCELLED
// and its next step never runs); a cancel that read the row before a
// commit landed loses its write and decides again on the committed row:
// an execution that succeeded meanwhile is not cancellable.
func TestCancelRacingCommit(t *testing.T) {
	t.Run("cancel lands first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t)
			rs := &raceStore{Store: c.store}
			c.store = rs
			var rt *engine.Runtime
			var cancelErr error
			var e store.Execution
			rs.beforeWrite = func() {
				_, _, cancelErr = rt.Cancel(context.Background(), e.Key(), "race")
			}
			rt = c.worker("w", engine.Config{Retry: fastRetry, ChainMaxSteps: 1}, nil, threeSteps())
			e = submitTo(t, rt, "p.three", "k1", map[string]any{})
			if errs := deliver(rt, c.queue); len(errs) != 1 || errs[0] != nil || cancelErr != nil {
				t.Fatalf("delivery %v, cancel %v", errs, cancelErr)
			}
			got := checkCancelled(t, c, rt, e.ExecutionID, "race")
			if got.StepIndex != 0 || c.queue.count() != 1 || !strings.Contains(c.logs.String(), "commit_refused_cancelled") {
				t.Fatalf("step %d, %d items sent: want step a's commit refused and nothing handed over", got.StepIndex, c.queue.count())
			}
		})
	})
	t.Run("commit lands first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t)
			rs := &raceStore{Store: c.store}
			c.store = rs
			var rt *engine.Runtime
			last := pipeline.Pipeline{ID: "p.one", Steps: []pipeline.Step{appendStep("a")}}
			rt = c.worker("w", engine.Config{Retry: fastRetry}, nil, last)
			e := submitTo(t, rt, "p.one", "k1", map[string]any{})
			rs.beforeWrite = func() {
				running := c.get(e.ExecutionID) // what the cancel read, just before the commit landed
				rs.mu.Lock()
				rs.stale = &running
				rs.mu.Unlock()
			}
			deliver(rt, c.queue)
			_, changed, err := rt.Cancel(context.Background(), e.Key(), "too late")
			if !errors.Is(err, engine.ErrNotCancellable) || changed {
				t.Fatalf("Cancel after the commit landed: changed=%v, %v; want ErrNotCancellable", changed, err)
			}
			if got := c.get(e.ExecutionID); got.Status != store.Succeeded || got.CancelReason != "" {
				t.Fatalf("row %s reason %q, want SUCCEEDED untouched", got.Status, got.CancelReason)
			}
		})
	})
}

// TestCancelChainedStep: a cancel while a chained step runs (claimed by
// the previous step's commit, no work item in between) ends the
// execution there; the next step never runs.
func TestCancelChainedStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		b := newBlockingStep(false)
		var cRuns atomic.Int32
		p := pipeline.Pipeline{ID: "p.chain", Steps: []pipeline.Step{appendStep("a"), b.step("b"), step("c", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			cRuns.Add(1)
			return in, nil
		})}}
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second}
		rt := c.worker("w", cfg, nil, p)
		e := submitTo(t, rt, "p.chain", "k1", map[string]any{})
		c.queue.take()
		processed := make(chan error, 1)
		go func() { processed <- rt.Process(context.Background(), workItem(e)) }()
		<-b.started
		if got := c.get(e.ExecutionID); got.StepIndex != 1 || got.Status != store.Running || got.Version != 3 {
			t.Fatalf("chained step b: step %d %s v%d", got.StepIndex, got.Status, got.Version)
		}
		if _, _, err := rt.Cancel(context.Background(), e.Key(), "stop the chain"); err != nil {
			t.Fatal(err)
		}
		if err := <-processed; err != nil {
			t.Fatal(err)
		}
		got := checkCancelled(t, c, rt, e.ExecutionID, "stop the chain")
		if got.StepIndex != 1 || cRuns.Load() != 0 || c.queue.count() != 1 {
			t.Fatalf("cancelled at step %d, step c ran %d times, %d items sent", got.StepIndex, cRuns.Load(), c.queue.count())
		}
	})
}

// TestCancelAfterWorkerKilled: the worker dies after the cancel was
// recorded and before it saw it. Once its lease has lapsed, whoever meets
// the row ends it CANCELLED without running the step again: the sweeper,
// or the dead worker's work item delivered to another worker.
func TestCancelAfterWorkerKilled(t *testing.T) {
	for _, finder := range []string{"sweeper", "takeover"} {
		t.Run(finder, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t)
				b := newBlockingStep(false)
				p := pipeline.Pipeline{ID: "p.block", Steps: []pipeline.Step{b.step("b")}}
				cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, SweepGrace: time.Second, ClockSkewTolerance: time.Second}
				shared := c.store
				crashed := &gone{Store: shared}
				c.store = crashed
				dead := c.worker("dead", cfg, nil, p)
				c.store = shared
				alive := c.worker("alive", cfg, nil, p)
				e := submitTo(t, alive, "p.block", "k1", map[string]any{})
				item := c.queue.take()[0].Item
				ctx, kill := context.WithCancel(context.Background())
				go dead.Process(ctx, item)
				<-b.started
				if _, _, err := alive.Cancel(context.Background(), e.Key(), "stuck"); err != nil {
					t.Fatal(err)
				}
				crashed.dead.Store(true) // killed before its next renewal
				kill()
				synctest.Wait()
				if got := c.get(e.ExecutionID); got.Status != store.Running || got.CancelRequestedAt.IsZero() {
					t.Fatalf("after the kill: %s, requested %v", got.Status, got.CancelRequestedAt)
				}
				// Within the lease nobody takes it (a live worker may hold it).
				if err := alive.Process(context.Background(), item); err != nil || c.get(e.ExecutionID).Status != store.Running {
					t.Fatalf("Process within the lease: %v, row %s; want it left RUNNING", err, c.get(e.ExecutionID).Status)
				}
				time.Sleep(cfg.Lease + cfg.ClockSkewTolerance)
				switch finder {
				case "sweeper":
					res, err := alive.SweepOnce(context.Background())
					if err != nil || res.Cancelled != 1 || res.Redispatched != 0 {
						t.Fatalf("sweep: %+v, %v; want one cancelled, none re-dispatched", res, err)
					}
				case "takeover":
					if err := alive.Process(context.Background(), item); err != nil {
						t.Fatal(err)
					}
				}
				checkCancelled(t, c, alive, e.ExecutionID, "stuck")
				if b.runs.Load() != 1 || !strings.Contains(c.logs.String(), `"by":"`+finder+`"`) {
					t.Fatalf("%d runs of the step (want 1), cancel by %s logged: %v", b.runs.Load(), finder, strings.Contains(c.logs.String(), `"by":"`+finder+`"`))
				}
			})
		})
	}
}
