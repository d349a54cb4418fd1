package wiring_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// costPipeline has steps steps, each returning an output of about
// outBytes bytes.
func costPipeline(steps, outBytes int) pipeline.Pipeline {
	out := strings.Repeat("o", outBytes)
	p := pipeline.Pipeline{ID: "p.cost"}
	for i := range steps {
		p.Steps = append(p.Steps, pipeline.NewStep(fmt.Sprintf("step-%d", i), func(_ context.Context, _ pipeline.StepInfo, _ map[string]any) (map[string]string, error) {
			return map[string]string{"out": out}, nil
		}))
	}
	return p
}

// runCost is what one execution consumed, measured from DynamoDB's
// ReturnConsumedCapacity answers (DynamoDB Local computes them from the
// real item sizes).
type runCost struct {
	submitTable, submitIndex float64 // write units of the submit
	runTable, runIndex       float64 // write units from the first claim to SUCCEEDED
	runRequests              map[string]int
}

// measureRun submits one execution of p with an input of inBytes bytes to
// a fresh deployment and measures its write units.
func measureRun(t *testing.T, p pipeline.Pipeline, inBytes int) runCost {
	t.Helper()
	return measureRunOf(t, nil, p.ID, map[string]any{"blob": strings.Repeat("i", inBytes)}, time.Minute, p)
}

// measureRunOf submits one execution of pipeline id with input in to a
// fresh deployment serving ps (its configuration changed by adjust, when
// set) and measures its write units and requests until it succeeds
// (within).
func measureRunOf(t *testing.T, adjust func(*config.Config), id string, in any, within time.Duration, ps ...pipeline.Pipeline) runCost {
	t.Helper()
	meter := awsclient.NewCapacityMeter()
	d := openDurableWith(t, adjust, []func(*middleware.Stack) error{meter.APIOption}, nil, ps...)
	d.warmUp(id)
	meter.Reset()
	e := d.submit(id, "measured", in)
	var c runCost
	c.submitTable, c.submitIndex = meter.Snapshot().Writes()
	meter.Reset()
	d.counter.Reset()
	d.start()
	d.await(e, store.Succeeded, within)
	d.stop()
	c.runTable, c.runIndex = meter.Snapshot().Writes()
	c.runRequests = d.counter.Snapshot()
	return c
}

// warmUp makes the process's first create, which also records the
// table's index shard count (once per process), with a row of its own
// (pipeline id, never dispatched), so that what a test measures next is
// what every later create costs.
func (d *durable) warmUp(id string) {
	d.t.Helper()
	now := time.Now()
	if _, _, err := d.set.Runtime.Store().CreateOrGet(context.Background(), store.CreateRequest{Execution: store.Execution{
		TenantID: "t-warm-up", ExecutionID: "warm-up", PipelineID: id, Status: store.Queued, Version: 1, Attempt: 1,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
	}}); err != nil {
		d.t.Fatal(err)
	}
}

// TestDurableWriteUnitsPerStep is the cost budget in write units: a step
// of the happy path costs one write unit of the execution row, whatever
// the size of the input, because the input is written once (to the
// payload table when it exceeds the inline budget) and later writes carry
// only its reference; the indexes take nothing between the submit and
// the terminal commit (which takes the row out of the sweep index).
func TestDurableWriteUnitsPerStep(t *testing.T) {
	t.Parallel()
	for _, steps := range []int{4, 10} {
		p := costPipeline(steps, 100)
		small := measureRun(t, p, 100)
		large := measureRun(t, p, 10<<10)
		for name, c := range map[string]runCost{"100 B input": small, "10 KiB input": large} {
			t.Logf("%d steps, %s: submit %.0f table + %.0f index write units; run %.0f table + %.0f index write units; requests %v",
				steps, name, c.submitTable, c.submitIndex, c.runTable, c.runIndex, c.runRequests)
			// One claim of the first step, then one commit per step (each but
			// the last claiming the next step).
			if c.runTable != float64(1+steps) {
				t.Errorf("%d steps, %s: the run cost %.0f table write units, want %d (one per step and the first claim, each row write under 1 KB)", steps, name, c.runTable, 1+steps)
			}
			if c.runIndex != 1 {
				t.Errorf("%d steps, %s: the run cost %.0f index write units, want 1 (the terminal commit leaves the sweep index)", steps, name, c.runIndex)
			}
			if sends := c.runRequests["SQS.SendMessage"]; sends != 0 {
				t.Errorf("%d steps, %s: %d SQS sends between steps, want 0 (chained)", steps, name, sends)
			}
		}
		if small.runTable != large.runTable {
			t.Errorf("%d steps: write units of the run: %.0f with a 100 B input, %.0f with a 10 KiB input; want equal", steps, small.runTable, large.runTable)
		}
		// The submit: the row and its two index entries (sweep, list); a
		// large input adds its one write to the payload table (11 units for
		// 10 KiB and the part's key).
		if small.submitTable != 1 || small.submitIndex != 2 {
			t.Errorf("100 B submit: %.0f table + %.0f index write units, want 1 + 2", small.submitTable, small.submitIndex)
		}
		if large.submitTable != 1+11 || large.submitIndex != 2 {
			t.Errorf("10 KiB submit: %.0f table + %.0f index write units, want 12 + 2", large.submitTable, large.submitIndex)
		}
	}
}

// TestDurableSweeperLookCost measures what the sweeper's look at a
// healthy long-running row costs (docs/cost.md's formula): moving its
// sweep time is one write unit of the row and two of the sweep index (the
// index entry is deleted and put again under its new sort key).
func TestDurableSweeperLookCost(t *testing.T) {
	t.Parallel()
	meter := awsclient.NewCapacityMeter()
	p := costPipeline(1, 10)
	d := openDurableWith(t, nil, []func(*middleware.Stack) error{meter.APIOption}, nil, p)
	e := d.submit(p.ID, "looked-at", map[string]any{})
	meter.Reset()
	if err := d.set.Runtime.Store().Reschedule(context.Background(), e.Key(), e.SweepAt, e.SweepAt.Add(time.Minute), 1); err != nil {
		t.Fatal(err)
	}
	table, index := meter.Snapshot().Writes()
	t.Logf("one look that moves the sweep time: %.0f table + %.0f index write units", table, index)
	if table != 1 || index != 2 {
		t.Errorf("a look costs %.0f table + %.0f index write units, want 1 + 2", table, index)
	}
}

// TestDurableClaimAfterRedispatchCost: a claim writes no index key, but
// after the sweeper re-dispatched the row it moves the sweep time in its
// own write (ClaimRequest.SweepAt): one write unit of the row and two of
// the sweep index, in the one request the claim makes anyway.
func TestDurableClaimAfterRedispatchCost(t *testing.T) {
	t.Parallel()
	meter := awsclient.NewCapacityMeter()
	p := costPipeline(1, 10)
	d := openDurableWith(t, nil, []func(*middleware.Stack) error{meter.APIOption}, nil, p)
	st := d.set.Runtime.Store()
	ctx := context.Background()
	claim := func(e store.Execution, look time.Time) (float64, float64) {
		t.Helper()
		now := time.Now()
		meter.Reset()
		if _, err := st.Claim(ctx, store.ClaimRequest{Key: e.Key(), ExpectVersion: e.Version, Owner: "w1", Now: now,
			DueBy: now.Add(time.Minute), TakeoverBy: now, LeaseUntil: now.Add(30 * time.Second), Attempt: 1, SweepAt: look}); err != nil {
			t.Fatal(err)
		}
		return meter.Snapshot().Writes()
	}
	plain := d.submit(p.ID, "claimed", map[string]any{})
	if table, index := claim(plain, time.Time{}); table != 1 || index != 0 {
		t.Errorf("a claim costs %.0f table + %.0f index write units, want 1 + 0", table, index)
	}
	e := d.submit(p.ID, "redispatched", map[string]any{})
	if err := st.Reschedule(ctx, e.Key(), e.SweepAt, e.SweepAt.Add(10*time.Minute), 4); err != nil {
		t.Fatal(err)
	}
	table, index := claim(e, time.Now().Add(42*time.Second))
	t.Logf("a claim after re-dispatches, moving the sweep time: %.0f table + %.0f index write units", table, index)
	if table != 1 || index != 2 {
		t.Errorf("a claim after re-dispatches costs %.0f table + %.0f index write units, want 1 + 2", table, index)
	}
}

// TestDurableSleepCost measures what a durable sleep adds to a run
// (docs/cost.md): the sleep step's commit is the step's one row write,
// moving the sweep look to the wake-up (two index units); the wake-up is
// the next step's normal claim (one row write: the chain is broken) and
// one SQS send with its delay.
func TestDurableSleepCost(t *testing.T) {
	t.Parallel()
	p := costPipeline(3, 100)
	p.ID = "p.nap"
	p.Steps[1] = pipeline.Sleep("nap", time.Second)
	c := measureRun(t, p, 100)
	plain := measureRun(t, costPipeline(3, 100), 100)
	t.Logf("a, sleep 1s, b: run %.0f table + %.0f index write units, requests %v; three plain steps: %.0f + %.0f, requests %v",
		c.runTable, c.runIndex, c.runRequests, plain.runTable, plain.runIndex, plain.runRequests)
	if c.runTable != plain.runTable+1 || c.runIndex != plain.runIndex+2 {
		t.Errorf("the sleep added %.0f table + %.0f index write units to the run, want 1 + 2", c.runTable-plain.runTable, c.runIndex-plain.runIndex)
	}
	if sends := c.runRequests["SQS.SendMessage"] - plain.runRequests["SQS.SendMessage"]; sends != 1 {
		t.Errorf("the sleep added %d SQS sends, want 1 (the delayed hand-over)", sends)
	}
}

// TestDurableLargeStepOutputIsWrittenOnce: a step output above the inline
// budget is written once beside the row (the payload table) and the row
// keeps one write unit per step.
func TestDurableLargeStepOutputIsWrittenOnce(t *testing.T) {
	t.Parallel()
	const steps = 3
	c := measureRun(t, costPipeline(steps, 4<<10), 100)
	t.Logf("4 KiB outputs: run %.0f table + %.0f index write units for %d steps; requests %v", c.runTable, c.runIndex, steps, c.runRequests)
	// The row: one claim and one commit per step; beside it, each output
	// once: 4 KiB plus the part's key is 5 units.
	if want := float64(1 + steps + steps*5); c.runTable != want {
		t.Errorf("run cost %.0f table write units, want %.0f (1 unit a row write, 5 a 4 KiB output, once each)", c.runTable, want)
	}
	if puts := c.runRequests["DynamoDB.PutItem"]; puts != steps {
		t.Errorf("%d PutItem calls, want %d (each output once)", puts, steps)
	}
}

// TestDurableListCost measures what listing costs (docs/cost.md's
// section): a page of 50 of a tenant's executions is one Query per list
// index bucket and one BatchGetItem of the rows, no write; the steps pay
// nothing for it (the list index is written once, at submit:
// TestDurableWriteUnitsPerStep and TestDurableRequestBudget count it).
func TestDurableListCost(t *testing.T) {
	t.Parallel()
	meter := awsclient.NewCapacityMeter()
	p := costPipeline(1, 10)
	d := openDurableWith(t, nil, []func(*middleware.Stack) error{meter.APIOption}, nil, p)
	for i := range 60 {
		d.submit(p.ID, fmt.Sprintf("listed-%d", i), map[string]any{})
	}
	ctx := context.Background()
	if _, err := d.set.Runtime.List(ctx, store.ListQuery{TenantID: "t1", Limit: 1}); err != nil { // the shard count, read once a minute
		t.Fatal(err)
	}
	meter.Reset()
	d.counter.Reset()
	page, err := d.set.Runtime.List(ctx, store.ListQuery{TenantID: "t1", Limit: 50})
	if err != nil || len(page.Executions) != 50 || page.Cursor == "" {
		t.Fatalf("List = %d executions (cursor %q), %v", len(page.Executions), page.Cursor, err)
	}
	used := meter.Snapshot()
	table, index := used.Writes()
	var tableRead, indexRead float64
	for _, v := range used.TableRead {
		tableRead += v
	}
	for _, v := range used.IndexRead {
		indexRead += v
	}
	requests := d.counter.Snapshot()
	t.Logf("a page of 50: requests %v; read units: index %.1f, table %.1f; write units %.0f", requests, indexRead, tableRead, table+index)
	if table+index != 0 || requests["DynamoDB.Query"] != d.cfg.DueShards() || requests["DynamoDB.BatchGetItem"] != 1 || requests["DynamoDB.Scan"] != 0 {
		t.Errorf("a page of 50 cost %v and %.0f write units; want one Query per bucket (%d), one BatchGetItem, no write", requests, table+index, d.cfg.DueShards())
	}
}
