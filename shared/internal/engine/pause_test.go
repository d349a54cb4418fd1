package engine_test

// Pause and resume scenarios: every status a pause meets (queued,
// retrying, sleeping, running, awaiting, waiting for children, a dead
// worker), the resume of each, the retention of a paused row, and the
// refusals. Each runs in a synctest bubble on fake time.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// checkPaused fails unless the row is PAUSED resuming to from: no lease,
// out of the sweep index (in no page of it), kept past a retention.
func checkPaused(t *testing.T, c *cluster, rt *engine.Runtime, id string, from store.Status) store.Execution {
	t.Helper()
	got := c.get(id)
	if got.Status != store.Paused || got.PausedFrom != from || got.PauseRequestedAt.IsZero() {
		t.Fatalf("row %s from %q requested %v, want PAUSED from %s", got.Status, got.PausedFrom, got.PauseRequestedAt, from)
	}
	if !got.SweepAt.IsZero() || got.LeaseOwner != "" || !got.LeaseExpiresAt.IsZero() {
		t.Fatalf("paused row keeps sweep %v, lease %q", got.SweepAt, got.LeaseOwner)
	}
	// The store keeps ExpiresAt to the second.
	if got.ExpiresAt.Before(got.UpdatedAt.Add(engine.PausedRetention).Truncate(time.Second)) {
		t.Fatalf("paused row expires %v, before the paused retention", got.ExpiresAt)
	}
	page, err := c.store.Due(context.Background(), store.DueQuery{By: time.Now().Add(365 * day), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range page.Refs {
		if ref.Key.ExecutionID == id {
			t.Fatalf("the paused row is in the sweep index")
		}
	}
	return got
}

func pauseOpts(reason string) engine.PauseOptions { return engine.PauseOptions{Reason: reason} }

// TestPauseQueuedRunsNothingUntilResumed: a QUEUED execution is PAUSED in
// one write; its work item, delivered late, claims nothing; the sweeper
// does nothing with it; a second pause changes nothing; the resume puts
// it back QUEUED and dispatches it, and it ends as an unpaused one would.
func TestPauseQueuedRunsNothingUntilResumed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry, SweepGrace: time.Second}, nil, threeSteps())
		ctx := context.Background()
		e := submitTo(t, rt, "p.three", "k", map[string]any{})
		items := c.queue.take()
		got, changed, err := rt.Pause(ctx, e.Key(), pauseOpts("hold, OPS-7"))
		if err != nil || !changed || got.Version != e.Version+1 {
			t.Fatalf("Pause = v%d changed=%v, %v; want one write", got.Version, changed, err)
		}
		checkPaused(t, c, rt, e.ExecutionID, store.Queued)
		if again, changed, err := rt.Pause(ctx, e.Key(), pauseOpts("again")); err != nil || changed || again.Version != got.Version || again.PauseReason != "hold, OPS-7" {
			t.Fatalf("second Pause = v%d changed=%v reason %q, %v; want no change", again.Version, changed, again.PauseReason, err)
		}
		time.Sleep(time.Hour)
		for _, m := range items {
			if err := rt.Process(ctx, m.Item); err != nil {
				t.Fatalf("late work item: %v", err)
			}
		}
		if res, err := rt.SweepOnce(ctx); err != nil || res.Due != 0 {
			t.Fatalf("sweep = %+v, %v; want nothing due", res, err)
		}
		if c.get(e.ExecutionID).Version != got.Version || c.queue.count() != 1 {
			t.Fatalf("the paused row moved or was dispatched")
		}
		back, err := rt.Resume(ctx, e.Key(), pauseOpts("go on"))
		if err != nil || back.Status != store.Queued || back.PausedFrom != "" || back.SweepAt.IsZero() || back.Version != got.Version+1 {
			t.Fatalf("Resume = %+v, %v", back, err)
		}
		if back.ExpiresAt.After(time.Now().Add(rt.Config().ExecutionTTL)) {
			t.Fatalf("resumed row expires %v, want a retention from the resume", back.ExpiresAt)
		}
		deliver(rt, c.queue)
		if done := c.get(e.ExecutionID); done.Status != store.Succeeded {
			t.Fatalf("after resume: %s, want SUCCEEDED", done.Status)
		}
		if _, err := rt.Resume(ctx, e.Key(), pauseOpts("")); !errors.Is(err, engine.ErrNotPaused) {
			t.Fatalf("Resume of a SUCCEEDED execution = %v, want ErrNotPaused", err)
		}
		if _, _, err := rt.Pause(ctx, e.Key(), pauseOpts("")); !errors.Is(err, engine.ErrNotPausable) {
			t.Fatalf("Pause of a SUCCEEDED execution = %v, want ErrNotPausable", err)
		}
		logs := c.logs.String()
		for _, ev := range []string{`"event":"execution_paused"`, `"event":"execution_resumed"`, `"paused_from":"QUEUED"`} {
			if !strings.Contains(logs, ev) {
				t.Fatalf("logs lack %s", ev)
			}
		}
		if hr, ok := c.store.(history.Reader); ok {
			evs, err := hr.History(ctx, e.Key())
			var types []string
			for _, ev := range evs {
				types = append(types, string(ev.Type))
			}
			if err != nil || !strings.Contains(strings.Join(types, " "), "SUBMITTED PAUSED RESUMED STEP_STARTED") {
				t.Fatalf("history %v, %v", types, err)
			}
		}
	})
}

// TestPauseKeepsRetryAndSleepTimes: a WAIT_RETRY and a sleeping execution
// keep their due times: resumed before them, they wait for them (the
// work item carries the rest of the delay); resumed after, they run now.
func TestPauseKeepsRetryAndSleepTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		failOnce := true
		flaky := pipeline.Pipeline{ID: "p.flaky", Steps: []pipeline.Step{step("work", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if failOnce {
				failOnce = false
				return nil, errors.New("not yet")
			}
			return in, nil
		})}}
		slow := pipeline.RetryPolicy{MaxRetries: 2, Delay: time.Hour, Multiplier: 1, MaxDelay: time.Hour}
		rt := c.worker("w", engine.Config{Retry: slow, ExecutionTTL: 7 * day, SweepGrace: time.Second}, nil,
			flaky, napPipeline(pipeline.Sleep("nap", 3*day), &runs))
		ctx := context.Background()

		r := submitTo(t, rt, "p.flaky", "r", map[string]any{})
		deliver(rt, c.queue)
		retry := c.get(r.ExecutionID)
		if retry.Status != store.WaitRetry {
			t.Fatalf("retrying row %s", retry.Status)
		}
		c.queue.take()
		if _, _, err := rt.Pause(ctx, r.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		checkPaused(t, c, rt, r.ExecutionID, store.WaitRetry)
		time.Sleep(20 * time.Minute)
		back, err := rt.Resume(ctx, r.Key(), pauseOpts(""))
		if err != nil || back.Status != store.WaitRetry || !back.NextDueAt.Equal(retry.NextDueAt) {
			t.Fatalf("resumed retry %s due %v, %v; want WAIT_RETRY due %v", back.Status, back.NextDueAt, err, retry.NextDueAt)
		}
		if msgs := c.queue.take(); len(msgs) != 1 || msgs[0].Delay != 40*time.Minute {
			t.Fatalf("resume dispatched %+v; want one item delayed 40m", msgs)
		}
		time.Sleep(40 * time.Minute)
		if err := rt.Process(ctx, workItem(r)); err != nil || c.get(r.ExecutionID).Status != store.Succeeded {
			t.Fatalf("retry after resume: %v, %s", err, c.get(r.ExecutionID).Status)
		}

		s := submitTo(t, rt, "p.nap", "s", stamped{Amount: 1})
		start := time.Now()
		deliver(rt, c.queue) // a, then the sleep's commit
		c.queue.take()
		if _, _, err := rt.Pause(ctx, s.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		checkPaused(t, c, rt, s.ExecutionID, store.Queued)
		time.Sleep(day)
		back, err = rt.Resume(ctx, s.Key(), pauseOpts(""))
		if err != nil || back.Status != store.Queued || !back.NextDueAt.Equal(start.Add(3*day)) {
			t.Fatalf("resumed sleep %s due %v, %v", back.Status, back.NextDueAt, err)
		}
		if msgs := c.queue.take(); len(msgs) != 1 || msgs[0].Delay != 2*day {
			t.Fatalf("resume dispatched %+v; want one item delayed 48h", msgs)
		}
		// Paused again past its wake-up: the resume runs it at once.
		if _, _, err := rt.Pause(ctx, s.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * day)
		if _, err := rt.Resume(ctx, s.Key(), pauseOpts("")); err != nil {
			t.Fatal(err)
		}
		if msgs := c.queue.take(); len(msgs) != 1 || msgs[0].Delay != 0 {
			t.Fatalf("late resume dispatched %+v; want one item now", msgs)
		}
		if err := rt.Process(ctx, workItem(s)); err != nil {
			t.Fatal(err)
		}
		wokeOnce(t, c, s, &runs)
	})
}

// TestPauseRunningStepParksAtHandOver: a RUNNING execution's pause is a
// request (still RUNNING, lease kept); the worker's renewal adopts it and
// the step runs to its end; its commit parks the execution PAUSED at the
// next step (no chained claim, no work item); the resume runs the rest.
// The request also lands when it races the commit (no renewal between).
func TestPauseRunningStepParksAtHandOver(t *testing.T) {
	for _, race := range []bool{false, true} {
		t.Run(fmt.Sprintf("race=%v", race), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t)
				b := newBlockingStep(true)
				p := pipeline.Pipeline{ID: "p.block", Steps: []pipeline.Step{appendStep("a"), b.step("b"), appendStep("c")}}
				cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, SweepGrace: time.Second}
				if race {
					cfg.ChainMaxSteps = 1 // the hook runs before an unchained commit
				}
				rs := &raceStore{Store: c.store}
				rt := c.workerOn("w", cfg, nil, rs, p)
				e := submitTo(t, rt, "p.block", "k1", map[string]any{})
				c.queue.take()
				if race {
					_ = rt.Process(context.Background(), workItem(e)) // a, unchained
					c.queue.take()
				}
				processed := make(chan error, 1)
				go func() { processed <- rt.Process(context.Background(), workItem(e)) }()
				<-b.started
				var got store.Execution
				pause := func() {
					var changed bool
					var err error
					got, changed, err = rt.Pause(context.Background(), e.Key(), pauseOpts("look first"))
					if err != nil || !changed || got.Status != store.Running || got.PauseRequestedAt.IsZero() || got.LeaseOwner != "w" {
						t.Errorf("Pause of a running execution = %s requested %v changed=%v, %v", got.Status, got.PauseRequestedAt, changed, err)
					}
				}
				if race {
					rs.mu.Lock()
					rs.beforeWrite = pause
					rs.mu.Unlock()
				} else {
					pause()
					time.Sleep(cfg.Lease / 3) // the renewal adopts the request
					synctest.Wait()
					if row := c.get(e.ExecutionID); row.Status != store.Running || row.LeaseOwner != "w" {
						t.Fatalf("after the renewal: %s owner %q, want still RUNNING under w", row.Status, row.LeaseOwner)
					}
				}
				close(b.release)
				if err := <-processed; err != nil {
					t.Fatalf("Process: %v", err)
				}
				if cause := b.seenCause(); cause != nil {
					t.Fatalf("the step's context was cancelled (%v); a pause lets it finish", cause)
				}
				paused := checkPaused(t, c, rt, e.ExecutionID, store.Queued)
				if sent := map[bool]int{false: 1, true: 2}[race]; paused.StepName != "c" || c.queue.count() != sent {
					t.Fatalf("paused at %s with %d items sent; want at c, no item", paused.StepName, c.queue.count())
				}
				time.Sleep(time.Hour)
				if res, _ := rt.SweepOnce(context.Background()); res.Redispatched != 0 {
					t.Fatalf("the sweeper re-dispatched a paused execution")
				}
				if _, err := rt.Resume(context.Background(), e.Key(), pauseOpts("")); err != nil {
					t.Fatal(err)
				}
				deliver(rt, c.queue)
				var out map[string]any
				result(t, rt, e, &out)
				if fmt.Sprint(out["path"]) != "[a b c]" || b.runs.Load() != 1 {
					t.Fatalf("result %v, b ran %d times", out, b.runs.Load())
				}
				if hr, ok := c.store.(history.Reader); ok {
					evs, _ := hr.History(context.Background(), e.Key())
					var types []string
					for _, ev := range evs {
						types = append(types, string(ev.Type))
					}
					if !strings.Contains(strings.Join(types, " "), "PAUSE_REQUESTED STEP_SUCCEEDED PAUSED RESUMED STEP_STARTED") {
						t.Fatalf("history %v", types)
					}
				}
			})
		})
	}
}

// TestPauseRequestOfADeadWorkersStep: a pause asked of a RUNNING row
// whose worker died parks it at once (the lease had lapsed) or, asked
// before the lapse, at the redelivered work item: PAUSED at the same step
// and attempt, the lost run counted as a release.
func TestPauseRequestOfADeadWorkersStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, ClockSkewTolerance: time.Second}
		rt := c.worker("w", cfg, nil, threeSteps())
		ctx := context.Background()
		for _, before := range []bool{true, false} {
			e := submitTo(t, rt, "p.three", fmt.Sprint(before), map[string]any{})
			c.queue.take()
			row := c.get(e.ExecutionID)
			now := time.Now()
			if _, err := c.store.Claim(ctx, store.ClaimRequest{Key: e.Key(), ExpectVersion: row.Version, Owner: "dead", Now: now,
				DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(cfg.Lease), Attempt: 1}); err != nil {
				t.Fatal(err)
			}
			if before {
				if got, _, err := rt.Pause(ctx, e.Key(), pauseOpts("p")); err != nil || got.Status != store.Running {
					t.Fatalf("Pause = %s, %v; want a request", got.Status, err)
				}
				time.Sleep(cfg.Lease + 2*time.Second)
				if err := rt.Process(ctx, workItem(e)); err != nil {
					t.Fatal(err)
				}
			} else {
				time.Sleep(cfg.Lease + 2*time.Second)
				if got, _, err := rt.Pause(ctx, e.Key(), pauseOpts("p")); err != nil || got.Status != store.Paused {
					t.Fatalf("Pause = %s, %v; want PAUSED at once", got.Status, err)
				}
			}
			p := checkPaused(t, c, rt, e.ExecutionID, store.Queued)
			if p.Attempt != 1 || p.StepIndex != 0 || p.Releases != 1 {
				t.Fatalf("paused at step %d attempt %d releases %d", p.StepIndex, p.Attempt, p.Releases)
			}
			if _, err := rt.Resume(ctx, e.Key(), pauseOpts("")); err != nil {
				t.Fatal(err)
			}
			deliver(rt, c.queue)
			if got := c.get(e.ExecutionID); got.Status != store.Succeeded {
				t.Fatalf("after resume %s", got.Status)
			}
		}
	})
}

// TestPauseAwaitingExecution: a WAITING_EXTERNAL execution is PAUSED at
// once. A completion arriving while paused is accepted and recorded (the
// row stays PAUSED, now to resume QUEUED; nothing runs); the resume runs
// the next step with it. An await timeout that passes while paused is
// enforced after the resume, by the sweeper's next look.
func TestPauseAwaitingExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		k := &tokens{}
		rt := c.worker("w", engine.Config{Retry: fastRetry, AwaitSecret: testSecret, SweepGrace: time.Second}, nil,
			awaitPipeline(k, time.Hour, false))
		ctx := context.Background()
		e := submitTo(t, rt, "p.await", "k1", map[string]any{"path": []string{}})
		deliver(rt, c.queue)
		deliver(rt, c.queue)
		if row := c.get(e.ExecutionID); row.Status != store.WaitingExternal {
			t.Fatalf("row %s", row.Status)
		}
		if _, _, err := rt.Pause(ctx, e.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		checkPaused(t, c, rt, e.ExecutionID, store.WaitingExternal)
		id, tok := k.last()
		got, dup, err := rt.CompleteAwait(ctx, e.ExecutionID, id, tok, jsonPayload(t, map[string]any{"path": []string{"a", "approved"}}))
		if err != nil || dup || got.Status != store.Paused || got.PausedFrom != store.Queued || got.Await.Status != store.AwaitCompleted {
			t.Fatalf("completion while paused = %s from %s await %+v, %v", got.Status, got.PausedFrom, got.Await, err)
		}
		if _, dup, err := rt.CompleteAwait(ctx, e.ExecutionID, id, tok, jsonPayload(t, map[string]any{"path": []string{"a", "approved"}})); err != nil || !dup {
			t.Fatalf("repeat completion dup=%v, %v", dup, err)
		}
		if n := len(c.queue.take()); n != 0 {
			t.Fatalf("the completion dispatched %d items while paused", n)
		}
		checkPaused(t, c, rt, e.ExecutionID, store.Queued)
		if _, err := rt.Resume(ctx, e.Key(), pauseOpts("")); err != nil {
			t.Fatal(err)
		}
		deliver(rt, c.queue)
		var out map[string]any
		result(t, rt, e, &out)
		if fmt.Sprint(out["path"]) != "[a approved c]" {
			t.Fatalf("result %v", out)
		}

		// The timeout passes while paused.
		e2 := submitTo(t, rt, "p.await", "k2", map[string]any{"path": []string{}})
		deliver(rt, c.queue)
		deliver(rt, c.queue)
		if _, _, err := rt.Pause(ctx, e2.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Hour)
		if res, _ := rt.SweepOnce(ctx); res.AwaitsTimedOut != 0 {
			t.Fatalf("the sweeper timed out a paused await")
		}
		back, err := rt.Resume(ctx, e2.Key(), pauseOpts(""))
		if err != nil || back.Status != store.WaitingExternal || !back.SweepAt.Equal(back.Await.TimeoutAt) {
			t.Fatalf("resumed await %s sweep %v, %v", back.Status, back.SweepAt, err)
		}
		if res, _ := rt.SweepOnce(ctx); res.AwaitsTimedOut != 1 {
			t.Fatalf("sweep after resume = %+v, want the timeout enforced", res)
		}
		if row := c.get(e2.ExecutionID); row.Status != store.WaitRetry || row.Error == nil || row.Error.Code != pipeline.CodeAwaitTimeout {
			t.Fatalf("after the timeout %s %+v", row.Status, row.Error)
		}
	})
}

// TestPauseWaitingChildren: a parent waiting for its children takes the
// pause as a request; the children go on; when the last one ends the
// parent collects their outcomes and the step after the map (the join,
// which reads the children's outputs) runs, and only that step's commit
// parks it. A paused parent keeps none of its children alive: paused for
// three retentions, longer than they live, it still finishes (its join
// ran before the pause).
func TestPauseWaitingChildren(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		ps := fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)
		fan3 := pipeline.Pipeline{ID: "p.fan3", Steps: append(slices.Clone(ps[1].Steps), pipeline.NewStep("tail",
			func(_ context.Context, _ pipeline.StepInfo, in joined) (joined, error) { return in, nil }))}
		rt := c.worker("w", engine.Config{ExecutionTTL: day}, nil, append(ps, fan3)...)
		ctx := context.Background()
		e := submitTo(t, rt, "p.fan3", "k", nums(1, 2, 3))
		deliver(rt, c.queue) // the fan-out
		got, changed, err := rt.Pause(ctx, e.Key(), pauseOpts("p"))
		if err != nil || !changed || got.Status != store.WaitingChildren || got.PauseRequestedAt.IsZero() {
			t.Fatalf("Pause of a waiting parent = %s changed=%v, %v", got.Status, changed, err)
		}
		drainChecked(t, c, rt, got, 3, 2)
		for n := 1; n <= 3; n++ {
			ranOnce(t, &runs, n)
		}
		parent := checkPaused(t, c, rt, e.ExecutionID, store.Queued)
		if parent.StepIndex != 2 {
			t.Fatalf("the parent paused at step %d, want 2 (tail): after the join read its children", parent.StepIndex)
		}
		time.Sleep(3 * day) // the children's rows and outputs expire meanwhile
		if _, err := rt.Resume(ctx, e.Key(), pauseOpts("")); err != nil {
			t.Fatal(err)
		}
		deliver(rt, c.queue)
		if done := c.get(e.ExecutionID); done.Status != store.Succeeded {
			t.Fatalf("parent %s after resume: %+v", done.Status, done.Error)
		}
	})
}

// TestPausedExecutionOutlivesTheRetention: a paused execution is not
// deleted while paused, however long (here three retentions); its
// resume gives it a retention from then, and it finishes.
func TestPausedExecutionOutlivesTheRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{ExecutionTTL: day}, nil, threeSteps())
		ctx := context.Background()
		e := submitTo(t, rt, "p.three", "k", map[string]any{})
		c.queue.take()
		if _, _, err := rt.Pause(ctx, e.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * day)
		if _, err := c.store.Get(ctx, e.Key()); err != nil {
			t.Fatalf("the paused row after three retentions: %v", err)
		}
		back, err := rt.Resume(ctx, e.Key(), pauseOpts(""))
		if err != nil || !back.ExpiresAt.Equal(time.Now().Add(day).Truncate(time.Second)) && !back.ExpiresAt.Equal(time.Now().Add(day)) {
			t.Fatalf("resumed expiry %v, %v; want a retention from the resume", back.ExpiresAt, err)
		}
		deliver(rt, c.queue)
		if got := c.get(e.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("%s", got.Status)
		}
	})
}

// TestPauseRefusalsAndWithdrawal: a pause of an ended, PENDING or
// REMOTE_OUTCOME_UNKNOWN execution is refused, so is a resume of one not
// paused; an expected version must match; a resume of a RUNNING row with
// a pause requested withdraws the request (the step then hands over as
// usual).
func TestPauseRefusalsAndWithdrawal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		b := newBlockingStep(true)
		p := pipeline.Pipeline{ID: "p.block", Steps: []pipeline.Step{b.step("b"), appendStep("c")}}
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second}
		rt := c.worker("w", cfg, nil, p)
		ctx := context.Background()
		e := submitTo(t, rt, "p.block", "k", map[string]any{})
		stale := e.Version - 1
		if _, _, err := rt.Pause(ctx, e.Key(), engine.PauseOptions{ExpectedVersion: &stale}); !errors.Is(err, engine.ErrVersionMismatch) {
			t.Fatalf("Pause at a stale version = %v", err)
		}
		if _, err := rt.Resume(ctx, e.Key(), pauseOpts("")); !errors.Is(err, engine.ErrNotPaused) {
			t.Fatalf("Resume of a QUEUED execution = %v", err)
		}
		c.queue.take()
		processed := make(chan error, 1)
		go func() { processed <- rt.Process(ctx, workItem(e)) }()
		<-b.started
		if _, _, err := rt.Pause(ctx, e.Key(), pauseOpts("p")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(cfg.Lease / 3)
		synctest.Wait()
		w, err := rt.Resume(ctx, e.Key(), pauseOpts("never mind"))
		if err != nil || w.Status != store.Running || !w.PauseRequestedAt.IsZero() {
			t.Fatalf("withdrawal = %s requested %v, %v", w.Status, w.PauseRequestedAt, err)
		}
		time.Sleep(cfg.Lease / 3)
		synctest.Wait()
		close(b.release)
		if err := <-processed; err != nil {
			t.Fatal(err)
		}
		if row := c.get(e.ExecutionID); row.Status == store.Paused {
			t.Fatalf("the withdrawn pause parked the execution")
		}
		deliver(rt, c.queue)
		if row := c.get(e.ExecutionID); row.Status != store.Succeeded {
			t.Fatalf("%s", row.Status)
		}
		u := submitTo(t, rt, "p.block", "u", map[string]any{})
		row := c.get(u.ExecutionID)
		row.Status, row.SweepAt, row.NextDueAt = store.RemoteOutcomeUnknown, time.Time{}, time.Time{}
		if _, err := c.store.Update(ctx, store.Guard{Key: row.Key(), Version: row.Version}, row); err != nil {
			t.Fatal(err)
		}
		if _, _, err := rt.Pause(ctx, u.Key(), pauseOpts("")); !errors.Is(err, engine.ErrNotPausable) {
			t.Fatalf("Pause of REMOTE_OUTCOME_UNKNOWN = %v", err)
		}
		// Cancel takes a paused execution.
		q := submitTo(t, rt, "p.block", "q", map[string]any{})
		if _, _, err := rt.Pause(ctx, q.Key(), pauseOpts("")); err != nil {
			t.Fatal(err)
		}
		if got, _, err := rt.Cancel(ctx, q.Key(), "done with it"); err != nil || got.Status != store.Cancelled || got.PausedFrom != "" {
			t.Fatalf("Cancel of a paused execution = %s from %q, %v", got.Status, got.PausedFrom, err)
		}
	})
}

// TestBulkPauseAndResumeByFilter: a bulk pause over one pipeline's queued
// executions pauses each once at the job's rate (a dry run only counts),
// leaves the other pipeline alone and the ended ones out; a bulk resume
// lets every one of them go on, and they all finish.
func TestBulkPauseAndResumeByFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		other := threeSteps()
		other.ID = "p.other"
		rt := c.worker("w", engine.Config{Retry: fastRetry, SweepGrace: time.Second}, nil, threeSteps(), other)
		ctx := context.Background()
		var mine []store.Execution
		for i := range 6 {
			mine = append(mine, submitTo(t, rt, "p.three", fmt.Sprint("m", i), map[string]any{}))
		}
		theirs := submitTo(t, rt, "p.other", "o", map[string]any{})
		c.queue.take()
		if _, err := rt.StartRedrivesWith(ctx, "t1", engine.RedrivesOptions{Action: engine.BulkPause,
			Filter: engine.RedriveFilter{Statuses: []store.Status{store.DLQ}}, Reason: "r"}); !errors.Is(err, engine.ErrInvalidRedrive) {
			t.Fatalf("a bulk pause of DLQ executions = %v, want ErrInvalidRedrive", err)
		}
		dry, err := rt.StartRedrivesWith(ctx, "t1", engine.RedrivesOptions{Action: engine.BulkPause,
			Filter: engine.RedriveFilter{PipelineID: "p.three"}, Reason: "freeze", DryRun: true})
		if err != nil || dry.Matched != 6 || !dry.Done || dry.Action != engine.BulkPause {
			t.Fatalf("dry run = %+v, %v", dry, err)
		}
		job, err := rt.StartRedrivesWith(ctx, "t1", engine.RedrivesOptions{Action: engine.BulkPause,
			Filter: engine.RedriveFilter{PipelineID: "p.three"}, Reason: "freeze, OPS-3", RatePerSecond: 2, IdempotencyKey: "freeze-1"})
		if err != nil || job.Matched != 6 {
			t.Fatalf("StartRedrivesWith(pause) = %+v, %v", job, err)
		}
		if again, err := rt.StartRedrivesWith(ctx, "t1", engine.RedrivesOptions{Action: engine.BulkPause,
			Filter: engine.RedriveFilter{PipelineID: "p.three"}, Reason: "freeze, OPS-3", RatePerSecond: 2, IdempotencyKey: "freeze-1"}); err != nil || !again.Duplicate || again.ID != job.ID {
			t.Fatalf("the keyed start again = %+v, %v; want the same job", again, err)
		}
		start := time.Now()
		if _, err := rt.DriveRedrives(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 2500*time.Millisecond {
			t.Fatalf("6 pauses at 2/s took %s", took)
		}
		got, err := rt.RedriveJob(ctx, "t1", job.ID)
		if err != nil || got.Redriven != 6 || !got.Done || got.Action != engine.BulkPause {
			t.Fatalf("progress %+v, %v", got, err)
		}
		for _, e := range mine {
			if p := checkPaused(t, c, rt, e.ExecutionID, store.Queued); !strings.Contains(p.PauseReason, job.ID) {
				t.Fatalf("reason %q names no job", p.PauseReason)
			}
		}
		if row := c.get(theirs.ExecutionID); row.Status != store.Queued {
			t.Fatalf("the other pipeline's execution is %s", row.Status)
		}
		res, err := rt.StartRedrivesWith(ctx, "t1", engine.RedrivesOptions{Action: engine.BulkResume, Reason: "thaw", RatePerSecond: 100})
		if err != nil || res.Matched != 6 {
			t.Fatalf("StartRedrivesWith(resume) = %+v, %v", res, err)
		}
		if _, err := rt.DriveRedrives(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, _ := rt.RedriveJob(ctx, "t1", res.ID); got.Redriven != 6 || !got.Done {
			t.Fatalf("resume progress %+v", got)
		}
		deliver(rt, c.queue)
		for _, e := range mine {
			if row := c.get(e.ExecutionID); row.Status != store.Succeeded {
				t.Fatalf("%s after the bulk resume", row.Status)
			}
		}
		if !strings.Contains(c.logs.String(), `"action":"pause"`) || !strings.Contains(c.logs.String(), `"job_id":"`+job.ID+`"`) {
			t.Fatalf("the audit logs lack the action or the job")
		}
	})
}
