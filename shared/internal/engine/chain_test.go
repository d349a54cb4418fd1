package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

func fiveSteps() pipeline.Pipeline {
	var steps []pipeline.Step
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		steps = append(steps, appendStep(n))
	}
	return pipeline.Pipeline{ID: "p.five", Steps: steps}
}

// TestChainedStepsAreEachTheirOwnTransition: one work item runs every
// step: each commit claims the next step in the same write, no work item
// is sent between steps, and each step is still its own committed
// transition (its own transition key, attempt 1, one commit).
func TestChainedStepsAreEachTheirOwnTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, fiveSteps())
		e := submitTo(t, rt, "p.five", "k1", map[string]any{})
		if errs := deliver(rt, c.queue); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("delivery: %v", errs)
		}
		got := c.get(e.ExecutionID)
		if got.Status != store.Succeeded || got.Version != 1+1+5 {
			t.Fatalf("row %s version %d, want SUCCEEDED at version 7 (created, one claim, five commits)", got.Status, got.Version)
		}
		if n := c.queue.count(); n != 1 {
			t.Fatalf("%d work items sent, want only the submit's", n)
		}
		logs := c.logs.String()
		for i := range 5 {
			key := fmt.Sprintf(`"transition_key":"%s:%d:1"`, e.ExecutionID, i)
			if n := strings.Count(logs, `"msg":"transition_committed"`) - 0; n != 5 || !strings.Contains(logs, key) {
				t.Fatalf("step %d: %d commits logged, key %s present %v", i, n, key, strings.Contains(logs, key))
			}
		}
		_, res, _ := rt.Result(context.Background(), e.Key())
		if string(res.Data) != `{"path":["a","b","c","d","e"]}` {
			t.Fatalf("result %s", res.Data)
		}
	})
}

// TestChainIsBounded: at most ChainMaxSteps steps per work item (the next
// step is handed over through the dispatcher), and no chaining when a
// deadline leaves less than a lease of time (a Lambda invocation's rule
// for every step).
func TestChainIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry, ChainMaxSteps: 2}, nil, fiveSteps())
		e := submitTo(t, rt, "p.five", "k1", map[string]any{})
		deliver(rt, c.queue)
		if got := c.get(e.ExecutionID); got.StepIndex != 2 || got.Status != store.Queued || c.queue.count() != 2 {
			t.Fatalf("after one item with ChainMaxSteps 2: step %d %s, %d items sent", got.StepIndex, got.Status, c.queue.count())
		}

		short := c.worker("w2", engine.Config{Retry: fastRetry, Lease: 10 * time.Second}, nil, fiveSteps())
		e2 := submitTo(t, short, "p.five", "k2", map[string]any{})
		c.queue.take()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // less than a lease left
		defer cancel()
		if err := short.Process(ctx, workItem(e2)); err != nil {
			t.Fatal(err)
		}
		if got := c.get(e2.ExecutionID); got.StepIndex != 1 || got.Status != store.Queued {
			t.Fatalf("under a short deadline: step %d %s, want one step then a hand-over", got.StepIndex, got.Status)
		}
	})
}

// TestCrashMidChainRecovers: the worker dies while it runs a chained step
// (its lease is left behind, no work item exists for that step): the
// lease lapses, the sweeper re-dispatches, another worker takes over, and
// every step is committed exactly once.
func TestCrashMidChainRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var hang atomic.Bool
		hang.Store(true)
		steps := fiveSteps().Steps
		steps[2] = step("c", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if hang.Load() {
				<-ctx.Done() // the worker "dies" here: nothing of it commits
				return nil, ctx.Err()
			}
			path, _ := in["path"].([]any)
			in["path"] = append(path, "c")
			return in, nil
		})
		p := pipeline.Pipeline{ID: "p.five", Steps: steps}
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, SweepGrace: time.Second}
		shared := c.store
		crashed := &gone{Store: shared}
		c.store = crashed // the dead worker's view of the store: nothing once it crashed
		dead := c.worker("dead", cfg, nil, p)
		c.store = shared
		e := submitTo(t, dead, "p.five", "k1", map[string]any{})
		c.queue.take()
		ctx, kill := context.WithCancel(context.Background())
		go dead.Process(ctx, workItem(e))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := c.get(e.ExecutionID); got.StepIndex != 2 || got.Status != store.Running {
			t.Fatalf("mid-chain: step %d %s", got.StepIndex, got.Status)
		}
		hang.Store(false)
		crashed.dead.Store(true) // the process is gone: no renewal, no release, no commit
		kill()
		synctest.Wait()
		alive := c.worker("alive", cfg, nil, p)
		for range 20 {
			time.Sleep(time.Second)
			if _, err := alive.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			deliver(alive, c.queue)
			if c.get(e.ExecutionID).Status == store.Succeeded {
				break
			}
		}
		_, res, err := alive.Result(context.Background(), e.Key())
		if err != nil || string(res.Data) != `{"path":["a","b","c","d","e"]}` {
			t.Fatalf("result %s, %v", res.Data, err)
		}
		if got := c.get(e.ExecutionID); got.Attempt != 1 || !strings.Contains(c.logs.String(), `"takeover":true`) {
			t.Fatalf("attempt %d (the last step's), takeover logged %v", got.Attempt, strings.Contains(c.logs.String(), `"takeover":true`))
		}
	})
}

// gone is a store a crashed process no longer reaches.
type gone struct {
	store.Store
	dead atomic.Bool
}

func (g *gone) Renew(ctx context.Context, k store.Key, owner string, v int64, until time.Time) error {
	if g.dead.Load() {
		return context.Canceled
	}
	return g.Store.Renew(ctx, k, owner, v, until)
}

func (g *gone) Update(ctx context.Context, gd store.Guard, next store.Execution) (store.Execution, error) {
	if g.dead.Load() {
		return store.Execution{}, context.Canceled
	}
	return g.Store.Update(ctx, gd, next)
}

// TestDrainingWorkerDoesNotChain: a process shutting down (Drain) lets the
// step it runs finish and commit, then hands the next step over to the
// queue instead of running it (a graceful stop starts no new step).
func TestDrainingWorkerDoesNotChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var rt *engine.Runtime
		steps := fiveSteps().Steps
		steps[1] = step("b", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			rt.Drain() // the shutdown begins while step b runs
			return in, nil
		})
		rt = c.worker("w", engine.Config{Retry: fastRetry}, nil, pipeline.Pipeline{ID: "p.five", Steps: steps})
		e := submitTo(t, rt, "p.five", "k1", map[string]any{})
		deliver(rt, c.queue)
		got := c.get(e.ExecutionID)
		if got.StepIndex != 2 || got.Status != store.Queued || c.queue.count() != 2 {
			t.Fatalf("after a drain during step b: step %d %s, %d items sent; want step c QUEUED and handed over", got.StepIndex, got.Status, c.queue.count())
		}
	})
}
