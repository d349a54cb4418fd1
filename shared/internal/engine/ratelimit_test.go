package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// rlOrder is the input of the rate-limited pipeline: a partner (the key)
// and a label.
type rlOrder struct {
	Partner string `json:"partner"`
	Label   string `json:"label"`
}

// rlStarts records when the limited step started, per label, and the
// attempts it ran at.
type rlStarts struct {
	mu       sync.Mutex
	at       map[string][]time.Time
	attempts []int
	fetched  int
}

// rlPipeline is fetch (not limited), call (limited: n per per, burst),
// done (not limited).
func rlPipeline(n int, per time.Duration, burst int, rec *rlStarts) pipeline.Pipeline {
	fetch := pipeline.NewStep("fetch", func(_ context.Context, _ pipeline.StepInfo, in rlOrder) (rlOrder, error) {
		rec.mu.Lock()
		rec.fetched++
		rec.mu.Unlock()
		return in, nil
	})
	call := pipeline.NewStep("call", func(_ context.Context, info pipeline.StepInfo, in rlOrder) (rlOrder, error) {
		rec.mu.Lock()
		rec.at[in.Partner] = append(rec.at[in.Partner], time.Now())
		rec.attempts = append(rec.attempts, info.Attempt)
		rec.mu.Unlock()
		return in, nil
	})
	done := pipeline.NewStep("done", func(_ context.Context, _ pipeline.StepInfo, in rlOrder) (rlOrder, error) { return in, nil })
	return pipeline.Pipeline{ID: "p.rl", Steps: []pipeline.Step{fetch, call, done},
		RateLimit: pipeline.RateLimitKey("partner-api", n, per, burst, func(o rlOrder) string { return o.Partner }, "call")}
}

// countingRates counts the reservations made through it.
type countingRates struct {
	store.Store
	n atomic.Int32
}

func (c *countingRates) Reserve(ctx context.Context, s store.RateScope, interval time.Duration, burst int, horizon time.Duration, now time.Time) (time.Time, bool, error) {
	c.n.Add(1)
	return c.Store.(store.RateStore).Reserve(ctx, s, interval, burst, horizon, now)
}

// runQueue delivers the queue's items a second of virtual time apart
// until every execution ended (an item not due yet is kept).
func runQueue(t *testing.T, c *cluster, rt *engine.Runtime, ids []string) {
	t.Helper()
	var held []dispatch.Message
	for range 3600 {
		held = append(held, c.queue.take()...)
		var keep []dispatch.Message
		for _, m := range held {
			var ra *dispatch.RetryAfterError
			if err := rt.Process(context.Background(), m.Item); errors.As(err, &ra) {
				keep = append(keep, m)
			}
		}
		held = keep
		ended := 0
		for _, id := range ids {
			if c.get(id).Status.Terminal() {
				ended++
			}
		}
		if ended == len(ids) {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatal("the executions never ended")
}

// checkSpacing checks that starts (sorted) never exceed burst at once
// and one per interval after: in every window [s_i, s_j], j-i+1 <= burst +
// (s_j - s_i)/interval.
func checkSpacing(t *testing.T, starts []time.Time, interval time.Duration, burst int) {
	t.Helper()
	for i := range starts {
		for j := i; j < len(starts); j++ {
			if n, allowed := j-i+1, burst+int(starts[j].Sub(starts[i])/interval); n > allowed {
				t.Fatalf("%d starts within %s (allowed %d): %v", n, starts[j].Sub(starts[i]), allowed, starts)
			}
		}
	}
}

// The limited step of six executions of one partner starts at most burst
// at once and then one per interval, however the workers' deliveries
// fall; each reserves once (a step released to wait runs on its
// reservation: no second token), no attempt is counted for the wait, the
// unlimited steps are not held up, the waiting row shows when it runs
// (RateLimitedUntil) and logs rate_limited, and another partner's bucket
// is its own.
func TestRateLimitSpacesStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		counting := &countingRates{Store: c.store}
		rec := &rlStarts{at: map[string][]time.Time{}}
		rt := c.workerOn("w", engine.Config{}, nil, counting, rlPipeline(1, 10*time.Second, 2, rec))
		var ids []string
		for _, label := range []string{"e1", "e2", "e3", "e4", "e5", "e6"} {
			ids = append(ids, submitTo(t, rt, "p.rl", label, rlOrder{Partner: "acme", Label: label}).ExecutionID)
		}
		ids = append(ids, submitTo(t, rt, "p.rl", "x1", rlOrder{Partner: "other", Label: "x1"}).ExecutionID)
		t0 := time.Now()
		deliver(rt, c.queue)
		if rec.fetched != 7 {
			t.Fatalf("%d fetches ran in the first round; the unlimited step must not wait", rec.fetched)
		}
		if n := len(rec.at["acme"]); n != 2 || len(rec.at["other"]) != 1 {
			t.Fatalf("acme's call started %d times at once (burst 2), other's %d", n, len(rec.at["other"]))
		}
		waiting := 0
		for _, id := range ids {
			row := c.get(id)
			if until := engine.RateLimitedUntil(&row); !until.IsZero() {
				waiting++
				if row.StepName != "call" || row.Attempt != 1 || row.Releases != 0 || row.RateKey != "acme" || row.RateLimit != "partner-api" {
					t.Fatalf("waiting row %+v", row)
				}
				if !row.NextDueAt.Equal(until) {
					t.Fatalf("waiting row due %s, rate limited until %s", row.NextDueAt, until)
				}
			}
		}
		if waiting != 4 {
			t.Fatalf("%d rows wait for their turn, want 4", waiting)
		}
		if !strings.Contains(c.logs.String(), `"event":"rate_limited"`) || strings.Contains(c.logs.String(), "acme") {
			t.Fatalf("want rate_limited events that never quote the input; logs:\n%s", c.logs.String())
		}
		runQueue(t, c, rt, ids)
		checkSpacing(t, rec.at["acme"], 10*time.Second, 2)
		if n := len(rec.at["acme"]); n != 6 {
			t.Fatalf("acme's call ran %d times, want 6", n)
		}
		if last := rec.at["acme"][5].Sub(t0); last > 45*time.Second {
			t.Fatalf("the 6th start came %s after the first; the reservations should place it at 40s", last)
		}
		if n := counting.n.Load(); n != 7 {
			t.Fatalf("%d reservations for 7 limited steps: a waiting step reserved again", n)
		}
		for _, a := range rec.attempts {
			if a != 1 {
				t.Fatalf("attempts %v: a wait for the rate limit counted an attempt", rec.attempts)
			}
		}
		for _, id := range ids {
			if row := c.get(id); row.Status != store.Succeeded || !row.RateReservedAt.IsZero() {
				t.Fatalf("%s ended %s, reservation %s", id, row.Status, row.RateReservedAt)
			}
		}
	})
}

// A step whose turn is beyond the horizon reserves nothing: it is handed
// back to try again when its turn is near (no attempt counted), and the
// limit still holds.
func TestRateLimitBeyondHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rec := &rlStarts{at: map[string][]time.Time{}}
		rt := c.worker("w", engine.Config{RateLimitHorizon: time.Minute}, nil, rlPipeline(1, time.Minute, 1, rec))
		var ids []string
		for _, label := range []string{"e1", "e2", "e3", "e4"} {
			ids = append(ids, submitTo(t, rt, "p.rl", label, rlOrder{Partner: "acme", Label: label}).ExecutionID)
		}
		deliver(rt, c.queue)
		beyond := 0
		for _, id := range ids {
			if row := c.get(id); row.RateReservedVersion == 0 && !engine.RateLimitedUntil(&row).IsZero() {
				beyond++
			}
		}
		if beyond != 2 {
			t.Fatalf("%d rows wait beyond the horizon holding no reservation, want 2 (e3, e4)", beyond)
		}
		runQueue(t, c, rt, ids)
		checkSpacing(t, rec.at["acme"], time.Minute, 1)
		if len(rec.attempts) != 4 || rec.attempts[3] != 1 {
			t.Fatalf("attempts %v", rec.attempts)
		}
	})
}

// noRates is a state store without rate limits (a user's backend).
type noRates struct{ store.Store }

// A rate-limited pipeline on a state store that keeps no rate limits is
// refused at start, naming the pipeline and the limit.
func TestRateLimitNeedsARateStore(t *testing.T) {
	rec := &rlStarts{at: map[string][]time.Time{}}
	reg, err := pipeline.NewRegistry(rlPipeline(1, time.Second, 1, rec))
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	_, err = engine.New(engine.Config{}, engine.Deps{Registry: reg, Store: noRates{c.store}, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq})
	if err == nil || !strings.Contains(err.Error(), "p.rl") || !strings.Contains(err.Error(), "partner-api") {
		t.Fatalf("New = %v; want the rate-limited pipeline refused", err)
	}
}

// A worker that takes over a step whose worker died does not trust the
// reservation on the row (the dead worker may have called the downstream
// on it): it reserves again, a later start, so the limit holds at the
// price of an unused start.
func TestRateLimitTakeoverReservesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		counting := &countingRates{Store: c.store}
		rec := &rlStarts{at: map[string][]time.Time{}}
		rt := c.workerOn("w", engine.Config{}, nil, counting, rlPipeline(1, 10*time.Minute, 1, rec))
		first := submitTo(t, rt, "p.rl", "e1", rlOrder{Partner: "acme", Label: "e1"})
		second := submitTo(t, rt, "p.rl", "e2", rlOrder{Partner: "acme", Label: "e2"})
		deliver(rt, c.queue)
		t0 := rec.at["acme"][0]
		row := c.get(second.ExecutionID)
		if !row.RateReservedAt.Equal(t0.Add(10*time.Minute)) || row.RateReservedVersion != row.Version {
			t.Fatalf("the second execution reserved %s (version %d of %d), want %s", row.RateReservedAt, row.RateReservedVersion, row.Version, t0.Add(10*time.Minute))
		}
		time.Sleep(10 * time.Minute)
		// A worker claimed it on its reservation and died (its lease is
		// already lapsed: the takeover comes within the reservation's wait).
		dead := row
		dead.Status, dead.LeaseOwner, dead.LeaseExpiresAt = store.Running, "dead-worker", time.Now().Add(-3*time.Second)
		if _, err := c.store.Update(context.Background(), store.Guard{Key: row.Key(), Version: row.Version}, dead); err != nil {
			t.Fatal(err)
		}
		if err := rt.Process(context.Background(), workItem(c.get(second.ExecutionID))); err != nil {
			t.Fatal(err)
		}
		if n := counting.n.Load(); n != 3 {
			t.Fatalf("%d reservations; the takeover must reserve again (3)", n)
		}
		got := c.get(second.ExecutionID)
		if got.Status != store.Queued || got.Attempt != 2 || !got.RateReservedAt.Equal(t0.Add(20*time.Minute)) {
			t.Fatalf("after the takeover: %s reserved %s", got.Status, got.RateReservedAt)
		}
		if len(rec.at["acme"]) != 1 || c.get(first.ExecutionID).Status != store.Succeeded {
			t.Fatalf("starts %v", rec.at["acme"])
		}
	})
}

// Executions submitted before their definition declared a rate limit
// (a deploy added it; the steps, hence the version, are the same) are
// limited too: they share the limit's "" bucket, and the limit holds.
func TestRateLimitAddedByADeploy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rec := &rlStarts{at: map[string][]time.Time{}}
		limited := rlPipeline(1, 10*time.Second, 1, rec)
		before := limited
		before.RateLimit = nil
		old := c.worker("old", engine.Config{}, nil, before)
		var ids []string
		for _, label := range []string{"e1", "e2", "e3"} {
			e := submitTo(t, old, "p.rl", label, rlOrder{Partner: "acme", Label: label})
			if e.RateLimit != "" {
				t.Fatalf("submitted without a limit, the row names %q", e.RateLimit)
			}
			ids = append(ids, e.ExecutionID)
		}
		rt := c.worker("new", engine.Config{}, nil, limited)
		runQueue(t, c, rt, ids)
		checkSpacing(t, rec.at["acme"], 10*time.Second, 1)
		if len(rec.at["acme"]) != 3 {
			t.Fatalf("starts %v", rec.at["acme"])
		}
	})
}
