package lambdahandlers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/store"
)

// overdue makes a seeded row due an hour ago (well past the sweep grace).
func overdue(e *store.Execution) {
	e.NextDueAt = time.Now().Add(-time.Hour)
	e.SweepAt = e.NextDueAt
}

// TestSweeperFixture: the scheduled event through the real handler
// sweeps once (everything fits one sweep): lost work items are
// dispatched again and a pending dead letter is published.
func TestSweeperFixture(t *testing.T) {
	env, logs := openMem(t, nil)
	rt := env.p.Runtime
	for i := range 3 {
		seed(t, rt, fmt.Sprintf("sweep-%d", i), orderPipelineID, orderInput, overdue)
	}
	seed(t, rt, "sweep-dlq", drillPipelineID, `{}`, func(e *store.Execution) {
		overdue(e)
		e.Status, e.DLQPending, e.StepIndex, e.StepName = store.Failed, true, 1, stepWork
		e.LastTransitionKey = "sweep-dlq:1:1"
		e.Error = &store.Failure{Code: codeDrillFailure, Message: "scripted", TerminalReason: store.ReasonNonRetryable}
	})
	var rep lambdahandlers.SweepReport
	invoke(t, context.Background(), lambdahandlers.Sweeper(rt, lambdahandlers.DefaultSweepMargin, env.log), fixture(t, "sweeper-schedule.json"), &rep)
	want := lambdahandlers.SweepReport{Sweeps: 1, Due: 4, Redispatched: 3, DeadLettersPublished: 1}
	if rep != want {
		t.Fatalf("report %+v, want %+v", rep, want)
	}
	if row := get(t, rt, "sweep-dlq"); row.Status != store.DLQ {
		t.Errorf("pending dead letter not published: %s", row.Status)
	}
	if len(logEvents(t, logs, "sweeper_completed")) != 1 {
		t.Errorf("no sweeper_completed event:\n%s", logs.String())
	}
}

// TestSweeperPagesThroughDueRows: with more due rows than the sweep
// limit, the handler sweeps again, each sweep skipping the rows handled
// before (the dispatched items are never delivered here, so every row
// stays due): each row's work item is sent once per invocation.
func TestSweeperPagesThroughDueRows(t *testing.T) {
	rt, _, d, _ := unitRuntime(t, engine.Config{SweepLimit: 2})
	for i := range 5 {
		seed(t, rt, fmt.Sprintf("sweep-%d", i), orderPipelineID, orderInput, overdue)
	}
	rep, err := lambdahandlers.Sweeper(rt, time.Second, rt.Logger())(context.Background(), events.EventBridgeEvent{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sweeps != 3 || rep.More || rep.Due != 5 || rep.Redispatched != 5 || d.count() != 5 {
		t.Fatalf("report %+v, %d dispatched; want 3 sweeps handling the 5 rows once each", rep, d.count())
	}
}

// TestSweeperStopsAtMaxSweeps: while sweeps report More the handler sweeps
// again, at most MaxSweeps times.
func TestSweeperStopsAtMaxSweeps(t *testing.T) {
	rt, _, d, _ := unitRuntime(t, engine.Config{SweepLimit: 1})
	for i := range lambdahandlers.MaxSweeps + 3 {
		seed(t, rt, fmt.Sprintf("sweep-%d", i), orderPipelineID, orderInput, overdue)
	}
	rep, err := lambdahandlers.Sweeper(rt, time.Second, rt.Logger())(context.Background(), events.EventBridgeEvent{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sweeps != lambdahandlers.MaxSweeps || !rep.More || rep.Due != lambdahandlers.MaxSweeps || d.count() != lambdahandlers.MaxSweeps {
		t.Fatalf("report %+v, %d dispatched", rep, d.count())
	}
}

// TestSweeperStopsForTime: with no more than margin left after a sweep,
// no further sweep starts.
func TestSweeperStopsForTime(t *testing.T) {
	rt, _, _, logs := unitRuntime(t, engine.Config{SweepLimit: 2})
	for i := range 5 {
		seed(t, rt, fmt.Sprintf("sweep-%d", i), orderPipelineID, orderInput, overdue)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := lambdahandlers.Sweeper(rt, 5*time.Second, rt.Logger())(ctx, events.EventBridgeEvent{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sweeps != 1 || !rep.More || rep.Redispatched != 2 {
		t.Fatalf("report %+v", rep)
	}
	if ev := logEvents(t, logs, "sweeper_completed"); len(ev) != 1 || ev[0]["stopped"] != "time" {
		t.Errorf("sweeper_completed events %v", ev)
	}
}

// TestSweeperReturnsStoreErrors: a failing due query fails the invocation.
func TestSweeperReturnsStoreErrors(t *testing.T) {
	rt, hs, _, _ := unitRuntime(t, engine.Config{})
	hs.due = func() error { return errors.New("dynamodb: throttled") }
	if _, err := lambdahandlers.Sweeper(rt, time.Second, rt.Logger())(context.Background(), events.EventBridgeEvent{}); err == nil {
		t.Fatal("no error")
	}
}

// TestSweeperDrivesBulkRedrives: after its sweeps, an invocation advances
// the active bulk re-drive jobs with the time it has left (beyond the
// margin): the sweeper function is the jobs' driver.
func TestSweeperDrivesBulkRedrives(t *testing.T) {
	env, _ := openMem(t, nil)
	rt := env.p.Runtime
	for i := range 3 {
		seed(t, rt, fmt.Sprintf("dead-%d", i), drillPipelineID, `{}`, func(e *store.Execution) {
			e.Status, e.StepIndex, e.StepName, e.SweepAt = store.DLQ, 1, stepWork, time.Time{}
			e.Error = &store.Failure{Code: codeDrillFailure, Message: "scripted", TerminalReason: store.ReasonNonRetryable}
		})
	}
	job, err := rt.StartRedrives(context.Background(), fixtureTenant, engine.RedriveFilter{}, "fixed", 50, false)
	if err != nil || job.Matched != 3 {
		t.Fatalf("StartRedrives = %+v, %v", job, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lambdahandlers.DefaultSweepMargin+3*time.Second)
	defer cancel()
	var rep lambdahandlers.SweepReport
	invoke(t, ctx, lambdahandlers.Sweeper(rt, lambdahandlers.DefaultSweepMargin, env.log), fixture(t, "sweeper-schedule.json"), &rep)
	if rep.RedriveJobs != 1 {
		t.Fatalf("report %+v: want one bulk re-drive job advanced", rep)
	}
	if got, _ := rt.RedriveJob(context.Background(), fixtureTenant, job.ID); got.Redriven != 3 || !got.Done {
		t.Fatalf("job after the invocation %+v, want all 3 re-driven", got)
	}
	for i := range 3 {
		if row := get(t, rt, fmt.Sprintf("dead-%d", i)); row.RedriveCount != 1 || row.Status == store.DLQ {
			t.Fatalf("dead-%d: %s, re-driven %d times", i, row.Status, row.RedriveCount)
		}
	}
}

// TestSweeperDrivesSchedules: the sweeper function passes over the
// schedules after its sweeps; a due one starts its execution.
func TestSweeperDrivesSchedules(t *testing.T) {
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Hour).Add(30 * time.Second))
	logs, log := logtest.New()
	st := memory.NewStateStore(clk)
	rt, err := engine.New(engine.Config{}, engine.Deps{
		Registry: testRegistry(t), Store: st, Payloads: memory.NewPayloadStore(clk), Dispatcher: &recordingDispatcher{},
		DeadLetter: memory.NewLogDLQ(log), Effects: memory.NewEffects(clk), Logger: log, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateSchedule(context.Background(), fixtureTenant, engine.ScheduleSpec{PipelineID: orderPipelineID, Spec: "@hourly", Input: []byte(orderInput)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	var rep lambdahandlers.SweepReport
	invoke(t, context.Background(), lambdahandlers.Sweeper(rt, lambdahandlers.DefaultSweepMargin, log), fixture(t, "sweeper-schedule.json"), &rep)
	if rep.SchedulesStarted != 1 {
		t.Fatalf("report %+v: want one scheduled execution started\n%s", rep, logs.String())
	}
}
