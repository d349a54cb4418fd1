package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// countingStore counts successful leased commits per transition key, and
// claims lost to a concurrent claim.
type countingStore struct {
	store.Store
	mu             sync.Mutex
	commits        map[string]int
	claimConflicts int
}

func (c *countingStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	got, err := c.Store.Claim(ctx, req)
	if errors.Is(err, store.ErrConflict) {
		c.mu.Lock()
		c.claimConflicts++
		c.mu.Unlock()
	}
	return got, err
}

func (c *countingStore) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	got, err := c.Store.Update(ctx, g, next)
	if err == nil && g.LeaseOwner != "" && next.LastTransitionKey != "" {
		c.mu.Lock()
		c.commits[next.LastTransitionKey]++
		c.mu.Unlock()
	}
	return got, err
}

// tripler delivers every message three times.
type tripler struct{ d dispatch.Dispatcher }

func (t tripler) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	var all []dispatch.Message
	for range 3 {
		all = append(all, msgs...)
	}
	return t.d.Dispatch(ctx, all...)
}

type concurrencyRun struct {
	executions, transitions, stepRuns, claimConflicts int
	elapsed                                           time.Duration
	commits                                           map[string]int
	rows                                              []store.Execution
}

// runConcurrent submits n executions of a 3-step pipeline whose middle
// step fails its first attempt for every fifth execution, with `workers`
// workers and every work item delivered three times, and waits until all
// are terminal.
func runConcurrent(tb testing.TB, n, workers int) concurrencyRun {
	var mu sync.Mutex
	runs := 0
	count := func() { mu.Lock(); runs++; mu.Unlock() }
	mid := pipeline.NewStep("mid", func(_ context.Context, info pipeline.StepInfo, in map[string]int) (map[string]int, error) {
		count()
		if in["n"]%5 == 0 && info.Attempt == 1 {
			return nil, fmt.Errorf("scripted transient failure")
		}
		in["mid"] = info.Attempt
		return in, nil
	})
	edge := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]int) (map[string]int, error) {
			count()
			in[name] = 1
			return in, nil
		})
	}
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "p.conc", Steps: []pipeline.Step{edge("first"), mid, edge("last")}})
	if err != nil {
		tb.Fatal(err)
	}
	pv := newProviders(tb)
	cs := &countingStore{Store: pv.store, commits: map[string]int{}}
	var rt *engine.Runtime
	ld := pv.dispatcher(func(ctx context.Context, item dispatch.WorkItem) error { return rt.Process(ctx, item) }, workers, time.Millisecond)
	defer ld.Close(context.Background())
	rt, err = engine.New(engine.Config{Retry: pipeline.RetryPolicy{MaxRetries: 2, Delay: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond}},
		engine.Deps{Registry: reg, Store: cs, Payloads: pv.payloads, Dispatcher: tripler{ld},
			DeadLetter: &recordingDLQ{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	keys := make([]store.Key, n)
	for i := range n {
		in, _ := payload.JSON(map[string]int{"n": i})
		res, err := rt.Submit(ctx, engine.SubmitRequest{TenantID: "t1", PipelineID: "p.conc", IdempotencyKey: fmt.Sprint("k", i), Input: in})
		if err != nil {
			tb.Fatal(err)
		}
		keys[i] = res.Execution.Key()
	}
	deadline := time.Now().Add(time.Minute)
	var rows []store.Execution
	for {
		rows = rows[:0]
		for _, k := range keys {
			e, err := rt.Status(ctx, k)
			if err != nil {
				tb.Fatal(err)
			}
			if !e.Status.Terminal() {
				break
			}
			rows = append(rows, e)
		}
		if len(rows) == n {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("only %d of %d executions terminal after a minute", len(rows), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	total := 0
	for _, c := range cs.commits {
		total += c
	}
	mu.Lock()
	defer mu.Unlock()
	return concurrencyRun{executions: n, transitions: total, stepRuns: runs, claimConflicts: cs.claimConflicts, elapsed: elapsed, commits: cs.commits, rows: rows}
}

// TestConcurrentWorkersCommitEachTransitionOnce: 16 workers, every work
// item delivered three times, 200 executions.
func TestConcurrentWorkersCommitEachTransitionOnce(t *testing.T) {
	const n = 200
	r := runConcurrent(t, n, 16)
	for key, c := range r.commits {
		if c != 1 {
			t.Errorf("transition %s committed %d times", key, c)
		}
	}
	// 3 steps each, plus one failed attempt for every fifth execution.
	if want := 3*n + n/5; len(r.commits) != want {
		t.Errorf("%d distinct transitions committed, want %d", len(r.commits), want)
	}
	for _, e := range r.rows {
		if e.Status != store.Succeeded {
			t.Errorf("%s ended %s", e.ExecutionID, e.Status)
		}
	}
	t.Logf("%d executions, %d work items delivered 3 times each, %d transitions committed once each, %d step runs, %d claims lost to a concurrent claim, %s, %.0f transitions/s (with -race if enabled)",
		r.executions, r.transitions, r.transitions, r.stepRuns, r.claimConflicts, r.elapsed.Round(time.Millisecond), float64(r.transitions)/r.elapsed.Seconds())
}

// BenchmarkTransitions reports committed transitions per second of the
// memory providers (16 workers, triple delivery).
func BenchmarkTransitions(b *testing.B) {
	var total int
	var elapsed time.Duration
	for b.Loop() {
		r := runConcurrent(b, 200, 16)
		total += r.transitions
		elapsed += r.elapsed
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "transitions/s")
}
