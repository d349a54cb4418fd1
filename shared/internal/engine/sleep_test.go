package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// stamped is the document of the sleep tests: each plain step appends
// its name and the (virtual) time it ran.
type stamped struct {
	Amount int         `json:"amount"`
	Ran    []stampedAt `json:"ran"`
	// WakeAt is when a SleepUntil step wakes (unix seconds).
	WakeAt int64 `json:"wakeAt,omitempty"`
}

type stampedAt struct {
	Step string    `json:"step"`
	At   time.Time `json:"at"`
}

// napPipeline is a, a sleep step, b; runs counts each plain step's runs.
func napPipeline(sleep pipeline.Step, runs *sync.Map) pipeline.Pipeline {
	stamp := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in stamped) (stamped, error) {
			n, _ := runs.LoadOrStore(name, new(int))
			*n.(*int)++
			in.Ran = append(in.Ran, stampedAt{Step: name, At: time.Now()})
			return in, nil
		})
	}
	return pipeline.Pipeline{ID: "p.nap", Steps: []pipeline.Step{stamp("a"), sleep, stamp("b")}}
}

func runsOf(runs *sync.Map, name string) int {
	n, ok := runs.Load(name)
	if !ok {
		return 0
	}
	return *n.(*int)
}

// wokeOnce: the napping execution e ended SUCCEEDED, the step after its
// sleep run once.
func wokeOnce(t *testing.T, c *cluster, e store.Execution, runs *sync.Map) {
	t.Helper()
	if got := c.get(e.ExecutionID); got.Status != store.Succeeded || runsOf(runs, "b") != 1 {
		t.Fatalf("%s, b ran %d times; want SUCCEEDED, b once", got.Status, runsOf(runs, "b"))
	}
}

// A sleep of days: the step after it runs once, at the wake-up time, not
// before; the wait is one write (the sleep step's commit, which schedules
// the next step) and the queue carries the delay; the history shows it.
func TestSleepWakesOnceAtItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{ExecutionTTL: 7 * day}, nil, napPipeline(pipeline.Sleep("nap", 3*day), &runs))
		e := submitTo(t, rt, "p.nap", "k", stamped{Amount: 5})
		start := time.Now()
		deliver(rt, c.queue) // a runs, then the sleep (chained) commits

		row := c.get(e.ExecutionID)
		wake := start.Add(3 * day)
		if row.Status != store.Queued || row.StepName != "b" || !row.NextDueAt.Equal(wake) {
			t.Fatalf("after the sleep step: %s at %s due %s; want QUEUED at b due %s", row.Status, row.StepName, row.NextDueAt, wake)
		}
		if row.ExpiresAt.Before(wake.Add(7 * day)) {
			t.Fatalf("the sleeping row expires at %s, before a retention past its wake-up %s", row.ExpiresAt, wake)
		}
		msgs := c.queue.take()
		if len(msgs) != 1 || msgs[0].Delay != 3*day {
			t.Fatalf("dispatched %+v; want one item delayed 72h", msgs)
		}
		// A queue that caps its delays delivers it early: not due, handed back.
		var ra *dispatch.RetryAfterError
		if err := rt.Process(context.Background(), msgs[0].Item); !errors.As(err, &ra) || ra.Delay != 3*day {
			t.Fatalf("early delivery: %v; want a retry after 72h", err)
		}
		time.Sleep(3*day - time.Minute)
		if err := rt.Process(context.Background(), msgs[0].Item); !errors.As(err, &ra) || ra.Delay != time.Minute {
			t.Fatalf("delivery a minute early: %v; want a retry after 1m", err)
		}
		if runsOf(&runs, "b") != 0 {
			t.Fatal("b ran before the wake-up")
		}
		time.Sleep(time.Minute)
		for range 2 { // the due delivery, and a duplicate of it
			if err := rt.Process(context.Background(), msgs[0].Item); err != nil {
				t.Fatalf("due delivery: %v", err)
			}
		}
		var out stamped
		result(t, rt, e, &out)
		if runsOf(&runs, "a") != 1 || runsOf(&runs, "b") != 1 {
			t.Fatalf("runs a=%d b=%d; want each once", runsOf(&runs, "a"), runsOf(&runs, "b"))
		}
		if len(out.Ran) != 2 || out.Ran[1].At.Before(wake) || out.Amount != 5 {
			t.Fatalf("result %+v; want b after %s with the input passed through", out, wake)
		}
		// The history (where the store keeps it in its writes: memory and
		// embedded; DynamoDB's comes from its stream, and the conformance
		// case History/Sleep covers it there).
		hr, ok := c.store.(history.Reader)
		if !ok {
			return
		}
		evs, err := hr.History(context.Background(), e.Key())
		if err != nil {
			t.Fatal(err)
		}
		var sleeping []history.Event
		for _, ev := range evs {
			if ev.Type == history.Sleeping {
				sleeping = append(sleeping, ev)
			}
		}
		if len(sleeping) != 1 || sleeping[0].StepName != "nap" || !sleeping[0].WakeAt.Equal(wake) {
			t.Fatalf("SLEEPING events %+v; want one for nap waking at %s", sleeping, wake)
		}
	})
}

// A sleep of seconds rides on the queue's delay alone.
func TestSleepOfSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{}, nil, napPipeline(pipeline.Sleep("nap", 5*time.Second), &runs))
		e := submitTo(t, rt, "p.nap", "k", stamped{})
		deliver(rt, c.queue)
		msgs := c.queue.take()
		if len(msgs) != 1 || msgs[0].Delay != 5*time.Second {
			t.Fatalf("dispatched %+v; want one item delayed 5s", msgs)
		}
		time.Sleep(5 * time.Second)
		if err := rt.Process(context.Background(), msgs[0].Item); err != nil {
			t.Fatal(err)
		}
		wokeOnce(t, c, e, &runs)
	})
}

// The work item of a sleeping execution is lost: the sweeper finds the
// execution a grace after its wake-up (not before) and it runs once.
func TestSleepWithLostItemIsSweptAtWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{ExecutionTTL: 7 * day}, nil, napPipeline(pipeline.Sleep("nap", 2*day), &runs))
		e := submitTo(t, rt, "p.nap", "k", stamped{})
		deliver(rt, c.queue)
		c.queue.take() // lost
		time.Sleep(day)
		if res, err := rt.SweepOnce(context.Background()); err != nil || c.queue.count() != 2 {
			t.Fatalf("sweep while asleep: %+v, %v; %d sent, want nothing re-dispatched", res, err, c.queue.count())
		}
		time.Sleep(day + time.Minute)
		if _, err := rt.SweepOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		runAll(t, rt, c.queue)
		wokeOnce(t, c, e, &runs)
	})
}

// SleepUntil wakes at a time the document carries; one past the retention
// dead-letters with its own code; one in the past wakes at once.
func TestSleepUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		until := pipeline.SleepUntil("until", func(in stamped) time.Time { return time.Unix(in.WakeAt, 0) })
		rt := c.worker("w", engine.Config{ExecutionTTL: 7 * day, Retry: fastRetry}, nil, napPipeline(until, &runs))

		soon := submitTo(t, rt, "p.nap", "soon", stamped{WakeAt: time.Now().Add(36 * time.Hour).Unix()})
		past := submitTo(t, rt, "p.nap", "past", stamped{WakeAt: time.Now().Add(-time.Hour).Unix()})
		far := submitTo(t, rt, "p.nap", "far", stamped{WakeAt: time.Now().Add(10 * day).Unix()})
		deliver(rt, c.queue)
		var asleep []dispatch.Message // soon's, delayed 36h
		for _, m := range c.queue.take() {
			if m.Delay > 0 {
				asleep = append(asleep, m)
			} else {
				_ = rt.Process(context.Background(), m.Item)
			}
		}
		runAll(t, rt, c.queue)

		if got := c.get(past.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("a wake-up in the past: %s; want SUCCEEDED at once", got.Status)
		}
		got := c.get(far.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != pipeline.CodeSleepBeyondRetention ||
			!strings.Contains(got.Error.Message, "execution-ttl-days") {
			t.Fatalf("a wake-up past the retention: %s %+v; want DLQ %s naming the key", got.Status, got.Error, pipeline.CodeSleepBeyondRetention)
		}
		if got := c.get(soon.ExecutionID); got.Status != store.Queued {
			t.Fatalf("a wake-up in 36h: %s; want QUEUED", got.Status)
		}
		time.Sleep(36 * time.Hour)
		for _, m := range asleep {
			_ = rt.Process(context.Background(), m.Item)
		}
		if got := c.get(soon.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("after 36h: %s; want SUCCEEDED", got.Status)
		}
	})
}

// A sleeping execution holds no lease: a cancel ends it at once, and the
// wake-up then runs nothing.
func TestCancelASleepingExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{ExecutionTTL: 7 * day}, nil, napPipeline(pipeline.Sleep("nap", day), &runs))
		e := submitTo(t, rt, "p.nap", "k", stamped{})
		deliver(rt, c.queue)
		if _, _, err := rt.Cancel(context.Background(), e.Key(), "not needed"); err != nil {
			t.Fatal(err)
		}
		if got := c.get(e.ExecutionID); got.Status != store.Cancelled {
			t.Fatalf("%s; want CANCELLED at once", got.Status)
		}
		time.Sleep(day)
		runAll(t, rt, c.queue)
		if runsOf(&runs, "b") != 0 {
			t.Fatal("b ran after the cancel")
		}
	})
}

// A fixed sleep longer than the retention is refused when the runtime
// starts, naming the step and the key.
func TestSleepBeyondRetentionRefusedAtStart(t *testing.T) {
	c := newCluster(t)
	reg := pipeline.MustRegistry(napPipeline(pipeline.Sleep("nap", 10*day), &sync.Map{}))
	_, err := engine.New(engine.Config{ExecutionTTL: 7 * day}, engine.Deps{
		Registry: reg, Store: c.store, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq})
	if err == nil || !strings.Contains(err.Error(), "step nap") || !strings.Contains(err.Error(), "execution-ttl-days") {
		t.Fatalf("New: %v; want a refusal naming the step and the key", err)
	}
}
