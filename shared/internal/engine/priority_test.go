package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// submitPriority submits in to the keyed pipeline with priority prio.
func submitPriority(t *testing.T, rt *engine.Runtime, label string, prio int) store.Execution {
	t.Helper()
	in, err := payload.JSON(keyedOrder{Customer: "c1", Label: label})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.keyed", IdempotencyKey: label, Input: in, Priority: prio})
	if err != nil {
		t.Fatalf("Submit %s: %v", label, err)
	}
	return res.Execution
}

// A key's waiters start by rank: a more urgent one submitted later goes
// before less urgent ones submitted earlier, but only while it was
// submitted less than (the difference of priorities) times the aging
// after them: a priority-5 waiter is passed over by a priority-1
// submitted 5 minutes later no more (aging 1 minute: bounded starvation).
func TestPriorityOrdersAKeysWaitLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var started []string
		rt := c.worker("w", engine.Config{PriorityAging: time.Minute}, nil, keyedPipeline(1, &started, &mu))
		var ids []string
		for _, s := range []struct {
			label string
			prio  int
			after time.Duration
		}{{"holder", 0, 0}, {"low", 5, 0}, {"mid", 0, time.Millisecond}, {"urgent", 1, time.Millisecond}, {"late", 1, 5 * time.Minute}} {
			time.Sleep(s.after)
			e := submitPriority(t, rt, s.label, s.prio)
			if want := pipeline.PriorityOf(nil, s.prio); e.Priority != want || !e.Rank.Equal(e.CreatedAt.Add(time.Duration(want-1)*time.Minute)) {
				t.Fatalf("%s: priority %d rank %v (created %v), want %d ranked %d minutes later", s.label, e.Priority, e.Rank, e.CreatedAt, want, want-1)
			}
			ids = append(ids, e.ExecutionID)
			deliver(rt, c.queue)
		}
		for _, id := range ids[1:] {
			if row := c.get(id); row.Status != store.WaitingKey {
				t.Fatalf("%s is %s, want WAITING_KEY", id, row.Status)
			}
		}
		for range 6 {
			time.Sleep(time.Hour + time.Minute)
			c.queue.msgs = nil
			c.sweep(rt)
			drainKeyed(t, c, rt, ids, 1)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"holder", "urgent", "mid", "low", "late"}; !slices.Equal(started, want) {
			t.Fatalf("started %v, want %v (rank order: urgent first, low before the priority-1 submitted 5 agings after it)", started, want)
		}
		for _, id := range ids {
			if row := c.get(id); row.Status != store.Succeeded {
				t.Fatalf("%s ended %s", id, row.Status)
			}
		}
	})
}

// A pipeline's default priority applies to a submit without one; a
// priority outside 1..5 is refused before anything is stored; a map's
// children inherit their parent's priority.
func TestPriorityDefaultsRefusalAndChildren(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		ps := fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)
		for i := range ps {
			if ps[i].ID == "p.kid" {
				ps[i].Priority = 5 // the children's own default: the parent's wins
			}
		}
		var mu sync.Mutex
		var started []string
		keyed := keyedPipeline(1, &started, &mu)
		keyed.Priority = 2
		rt := c.worker("w", engine.Config{}, nil, append(ps, keyed)...)
		if e := submitPriority(t, rt, "dflt", 0); e.Priority != 2 || !e.Rank.Equal(e.CreatedAt.Add(time.Minute)) {
			t.Fatalf("pipeline default: priority %d rank %v (created %v), want 2 one minute later (default aging)", e.Priority, e.Rank, e.CreatedAt)
		}
		in, _ := payload.JSON(keyedOrder{Customer: "c1"})
		for _, bad := range []int{-1, 6} {
			_, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.keyed", IdempotencyKey: "bad", Input: in, Priority: bad})
			if !errors.Is(err, engine.ErrInvalidInput) {
				t.Fatalf("priority %d: %v, want ErrInvalidInput", bad, err)
			}
		}
		fin, _ := payload.JSON(nums(1, 2, 3))
		res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.fan", IdempotencyKey: "fan", Input: fin, Priority: 1})
		if err != nil {
			t.Fatal(err)
		}
		deliver(rt, c.queue) // the fan-out
		parent := c.get(res.Execution.ExecutionID)
		for i, k := range c.children(parent, 0, 3) {
			if k.Priority != 1 || !k.Rank.Equal(k.CreatedAt) {
				t.Fatalf("child %d: priority %d rank %v (created %v), want the parent's 1, ranked at its creation", i, k.Priority, k.Rank, k.CreatedAt)
			}
		}
	})
}
