package dynamo

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// unitsSnap is a copy of the units counted so far.
type unitsSnap struct {
	table   float64
	indexes map[string]float64
	writes  int
}

func (w *writeUnits) snap() unitsSnap {
	w.mu.Lock()
	defer w.mu.Unlock()
	return unitsSnap{table: w.table, indexes: maps.Clone(w.indexes), writes: w.writes}
}

// since is what was written between s and now.
func (w *writeUnits) since(s unitsSnap) unitsSnap {
	now := w.snap()
	d := unitsSnap{table: now.table - s.table, indexes: map[string]float64{}, writes: now.writes - s.writes}
	for k, v := range now.indexes {
		if v-s.indexes[k] != 0 {
			d.indexes[k] = v - s.indexes[k]
		}
	}
	return d
}

func (s unitsSnap) String() string {
	return fmt.Sprintf("%d writes, table %.0f units, sweep index %.0f, list index %.0f", s.writes, s.table, s.indexes[schema.DueIndexName], s.indexes[schema.ListIndexName])
}

// pauseRig is a runtime on the DynamoDB model with its write units
// counted: a 3-step pipeline (chaining off, every step its own work
// item) whose second step can pause its own execution while it runs.
type pauseRig struct {
	rt    *engine.Runtime
	q     *manualQueue
	units *writeUnits
	// pauseInStep: the second step asks to pause its execution (a RUNNING
	// row's pause request), and notes the units of the request.
	pauseInStep bool
	request     unitsSnap
}

func newPauseRig(t *testing.T) *pauseRig {
	t.Helper()
	model := ddbmodel.New(ddbmodel.Options{Clock: clock.System{}})
	rig := &pauseRig{q: &manualQueue{}, units: &writeUnits{indexes: map[string]float64{}}}
	db := dynamodb.NewFromConfig(model.Config(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, rig.units.middleware) })
	names := schema.Prefixed("cost")
	if _, err := provision.CreateTables(context.Background(), db, schema.Tables(names)); err != nil {
		t.Fatal(err)
	}
	st, err := NewStateStore(db, Options{ExecutionTable: names.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	id := func(_ context.Context, _ pipeline.StepInfo, in costInput) (costInput, error) { return in, nil }
	pauser := func(ctx context.Context, info pipeline.StepInfo, in costInput) (costInput, error) {
		if rig.pauseInStep {
			before := rig.units.snap()
			if _, _, err := rig.rt.Pause(ctx, store.Key{TenantID: info.TenantID, ExecutionID: info.ExecutionID}, engine.PauseOptions{Reason: "cost"}); err != nil {
				return in, err
			}
			rig.request = rig.units.since(before)
		}
		return in, nil
	}
	p := pipeline.Pipeline{ID: "cost", Steps: []pipeline.Step{pipeline.NewStep("a", id), pipeline.NewStep("b", pauser), pipeline.NewStep("c", id)}}
	rig.rt, err = engine.New(engine.Config{ChainMaxSteps: 1, WorkerID: "w-1"}, engine.Deps{
		Registry: pipeline.MustRegistry(p), Store: st, Payloads: NewPayloadStore(db, names.PayloadTable, nil),
		Dispatcher: rig.q, DeadLetter: noDLQ{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rig
}

func (r *pauseRig) submit(t *testing.T) store.Key {
	t.Helper()
	in, _ := payload.JSON(costInput{Customer: "customer-0001"})
	res, err := r.rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "tenant-1", PipelineID: "cost", IdempotencyKey: "order-0001", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	return res.Execution.Key()
}

// deliver processes the queued work items, one at a time, until none is
// left (at most n).
func (r *pauseRig) deliver(t *testing.T, n int) {
	t.Helper()
	for range n {
		msgs := r.q.take()
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			if err := r.rt.Process(context.Background(), m.Item); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (r *pauseRig) status(t *testing.T, key store.Key) store.Status {
	t.Helper()
	e, err := r.rt.Status(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Status
}

// TestPauseWriteUnits measures, with DynamoDB's own capacity accounting
// (the model's ReturnConsumedCapacity), what a pause and a resume write,
// and that an execution never paused pays exactly what it paid before
// the pause feature (its commits now carry REMOVE clauses for the pause
// attributes: removing an attribute an item does not have changes its
// size by nothing, and a write is billed by the item's size).
// docs/cost.md quotes the log.
func TestPauseWriteUnits(t *testing.T) {
	// Never paused: submit and 3 steps.
	plain := newPauseRig(t)
	before := plain.units.snap()
	key := plain.submit(t)
	plain.deliver(t, 10)
	if s := plain.status(t, key); s != store.Succeeded {
		t.Fatalf("status %s, want SUCCEEDED", s)
	}
	never := plain.units.since(before)
	t.Logf("never paused (submit + 3 steps): %s", never)
	// The figures measured before the pause feature (its commit's
	// TestConcurrencyKeyWriteUnits, "no key": 12 writes, 12 table units,
	// 2 sweep-index, 1 list-index; docs/cost.md).
	if never.writes != 12 || never.table != 12 || never.indexes[schema.DueIndexName] != 2 || never.indexes[schema.ListIndexName] != 1 {
		t.Errorf("an execution never paused wrote %s, want 12 writes of 1 unit, 2 sweep-index and 1 list-index units (as before the pause feature)", never)
	}

	// Paused while QUEUED, resumed, run to the end.
	rig := newPauseRig(t)
	start := rig.units.snap()
	key = rig.submit(t)
	s := rig.units.snap()
	if _, changed, err := rig.rt.Pause(context.Background(), key, engine.PauseOptions{Reason: "cost"}); err != nil || !changed {
		t.Fatalf("pause: changed %v, %v", changed, err)
	}
	pause := rig.units.since(s)
	rig.deliver(t, 10) // the submit's work item: dropped, not claimable
	if st := rig.status(t, key); st != store.Paused {
		t.Fatalf("status %s, want PAUSED", st)
	}
	s = rig.units.snap()
	if _, err := rig.rt.Resume(context.Background(), key, engine.PauseOptions{Reason: "cost"}); err != nil {
		t.Fatal(err)
	}
	resume := rig.units.since(s)
	rig.deliver(t, 10)
	if st := rig.status(t, key); st != store.Succeeded {
		t.Fatalf("status %s, want SUCCEEDED", st)
	}
	paused := rig.units.since(start)

	// Asked to pause while its second step runs: the request, the commit
	// that parks it (instead of handing over), the resume.
	run := newPauseRig(t)
	run.pauseInStep = true
	key = run.submit(t)
	run.deliver(t, 10)
	if st := run.status(t, key); st != store.Paused {
		t.Fatalf("status %s, want PAUSED at the step's commit", st)
	}
	run.pauseInStep = false
	s = run.units.snap()
	if _, err := run.rt.Resume(context.Background(), key, engine.PauseOptions{Reason: "cost"}); err != nil {
		t.Fatal(err)
	}
	resumeRunning := run.units.since(s)
	run.deliver(t, 10)
	if st := run.status(t, key); st != store.Succeeded {
		t.Fatalf("status %s, want SUCCEEDED", st)
	}
	t.Logf("\npause of a QUEUED row: %s\nits resume: %s\npaused and resumed (submit + 3 steps): %s\npause request of a RUNNING row: %s\nresume after the commit parked it: %s",
		pause, resume, paused, run.request, resumeRunning)

	// The pause: the row (out of the sweep index: 1 index unit) and the
	// input's part in the payload table, whose lifetime follows the
	// row's, pushed PausedRetention past the pause.
	if pause.writes != 2 || pause.table != 2 || pause.indexes[schema.DueIndexName] != 1 || pause.indexes[schema.ListIndexName] != 0 {
		t.Errorf("a pause of a QUEUED row wrote %s, want 2 writes of 1 unit (the row, the input's part) and 1 sweep-index unit", pause)
	}
	// The resume: the row (back in the sweep index); the part keeps the
	// longer lifetime, nothing to write.
	for name, got := range map[string]unitsSnap{"a resume": resume, "a resume after a commit parked the row": resumeRunning} {
		if got.writes != 1 || got.table != 1 || got.indexes[schema.DueIndexName] != 1 || got.indexes[schema.ListIndexName] != 0 {
			t.Errorf("%s wrote %s, want 1 write of 1 unit and 1 sweep-index unit", name, got)
		}
	}
	// The request of a RUNNING row: the row only (its lease and sweep
	// look kept); the commit that then parks it is the step's own.
	if run.request.writes != 1 || run.request.table != 1 || len(run.request.indexes) != 0 {
		t.Errorf("a pause request wrote %s, want 1 write of 1 unit, no index", run.request)
	}
	// The paused execution pays its pause and its resume on top, nothing
	// else: the dropped work item wrote nothing.
	if got, want := paused.table, never.table+pause.table+resume.table; got != want {
		t.Errorf("paused and resumed: %.0f table units, want %.0f (never paused %.0f + pause + resume)", got, want, never.table)
	}
	if got, want := paused.indexes[schema.DueIndexName], never.indexes[schema.DueIndexName]+2; got != want {
		t.Errorf("paused and resumed: %.0f sweep-index units, want %.0f (never paused + out and in again)", got, want)
	}
}
