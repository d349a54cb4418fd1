package engine_test

// Schedules: a fire time is one execution whoever fires it (two
// concurrent drivers, a driver that died after its claim), the overlap
// policies, the catch-up bound after an outage, pause and resume, and
// the field a refused schedule names.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/schedule"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// schedStart is 30 seconds past a whole hour of today (UTC): the memory
// store reads row expiry on the real clock.
var schedStart = time.Now().UTC().Truncate(time.Hour).Add(30 * time.Second)

func scheduled() pipeline.Pipeline {
	return pipeline.Pipeline{ID: "p.sched", Steps: []pipeline.Step{appendStep("a")}}
}

// tenantExecutions lists every execution of tenant t1.
func tenantExecutions(t *testing.T, st store.Store) []store.Execution {
	t.Helper()
	var out []store.Execution
	q := store.ListQuery{TenantID: "t1", Limit: store.MaxListLimit}
	for {
		page, err := st.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Executions...)
		if page.Cursor == "" {
			return out
		}
		q.Cursor = page.Cursor
	}
}

// fireExecution reads the execution of a schedule's fire time (by its
// idempotency key's slot).
func fireExecution(t *testing.T, st store.Store, scheduleID string, fire time.Time) (store.Execution, bool) {
	t.Helper()
	e, err := st.Get(context.Background(), store.Key{TenantID: "t1", ExecutionID: engine.ExecutionSlot("t1", schedule.IdempotencyKey(scheduleID, fire))})
	if errors.Is(err, store.ErrNotFound) {
		return e, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return e, true
}

func createSchedule(t *testing.T, rt *engine.Runtime, spec engine.ScheduleSpec) engine.Schedule {
	t.Helper()
	if spec.PipelineID == "" {
		spec.PipelineID = "p.sched"
	}
	s, err := rt.CreateSchedule(context.Background(), "t1", spec)
	if err != nil {
		t.Fatalf("CreateSchedule: %v", err)
	}
	return s
}

func intp(n int) *int { return &n }

// Two drivers (two serve processes, or a sweeper invocation and its
// retry) pass over the schedule at the same moments, concurrently: every
// fire time is one execution, and the record counts each once.
func TestScheduleFiresOncePerTimeWithTwoConcurrentDrivers(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	a := c.worker("a", engine.Config{}, clk, scheduled())
	b := c.worker("b", engine.Config{}, clk, scheduled())
	s := createSchedule(t, a, engine.ScheduleSpec{Spec: "* * * * *", Overlap: schedule.AllowAll})
	const minutes = 20
	for range minutes {
		clk.Advance(time.Minute)
		var wg sync.WaitGroup
		for _, rt := range []*engine.Runtime{a, b, a} {
			wg.Go(func() {
				if _, err := rt.DriveSchedules(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	execs := tenantExecutions(t, c.store)
	if len(execs) != minutes {
		t.Fatalf("%d executions for %d fire times", len(execs), minutes)
	}
	first := schedStart.Truncate(time.Minute).Add(time.Minute)
	for i := range minutes {
		if _, ok := fireExecution(t, c.store, s.ID, first.Add(time.Duration(i)*time.Minute)); !ok {
			t.Errorf("fire time %d has no execution", i)
		}
	}
	got, err := b.GetSchedule(context.Background(), "t1", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fired != minutes || got.Skipped != 0 || !got.NextFireAt.Equal(first.Add(minutes*time.Minute)) {
		t.Fatalf("schedule = fired %d skipped %d next %v", got.Fired, got.Skipped, got.NextFireAt)
	}
}

// failingCreates makes the state store's creates fail while on.
type failingCreates struct {
	jobStore
	mu sync.Mutex
	on bool
}

func (f *failingCreates) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	f.mu.Lock()
	on := f.on
	f.mu.Unlock()
	if on {
		return store.Execution{}, false, store.ErrUnavailable
	}
	return f.jobStore.CreateOrGet(ctx, req)
}

// A driver that claimed a fire time but could not submit it (it died, or
// the submit failed): the next pass after the grace submits it, once.
func TestScheduleFireClaimedButNotSubmittedIsSubmittedByTheNextPass(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	fail := &failingCreates{jobStore: c.jobs, on: true}
	broken := c.workerOn("broken", engine.Config{}, clk, fail, scheduled())
	good := c.worker("good", engine.Config{}, clk, scheduled())
	s := createSchedule(t, good, engine.ScheduleSpec{Spec: "@hourly"})
	fire := clk.Advance(time.Hour).Truncate(time.Hour)
	rep, _ := broken.DriveSchedules(context.Background())
	if rep.Failed != 1 {
		t.Fatalf("broken pass = %+v, want a failure", rep)
	}
	if _, ok := fireExecution(t, c.store, s.ID, fire); ok {
		t.Fatal("the failed submit made an execution")
	}
	// Within the grace the claim is left to its driver.
	if rep, _ := good.DriveSchedules(context.Background()); rep.Due != 0 {
		t.Fatalf("pass within the grace = %+v", rep)
	}
	clk.Advance(time.Minute)
	if _, err := good.DriveSchedules(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := fireExecution(t, c.store, s.ID, fire); !ok {
		t.Fatal("the claimed fire time was never submitted")
	}
	if n := len(tenantExecutions(t, c.store)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	got, _ := good.GetSchedule(context.Background(), "t1", s.ID)
	if got.Fired != 1 {
		t.Fatalf("fired = %d", got.Fired)
	}
}

// SKIP starts nothing while the previous run is not terminal; the fire
// time is counted skipped. Once it ended, the next fire time starts.
func TestScheduleOverlapSkip(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	rt := c.worker("w", engine.Config{}, clk, scheduled())
	s := createSchedule(t, rt, engine.ScheduleSpec{Spec: "*/10 * * * *", Overlap: schedule.Skip})
	t1 := clk.Advance(10 * time.Minute).Truncate(10 * time.Minute)
	mustDrive(t, rt)
	clk.Advance(10 * time.Minute) // t2: the run of t1 is still queued
	mustDrive(t, rt)
	if _, ok := fireExecution(t, c.store, s.ID, t1.Add(10*time.Minute)); ok {
		t.Fatal("SKIP started a run while the previous one ran")
	}
	deliver(rt, c.queue) // t1's run ends
	clk.Advance(10 * time.Minute)
	mustDrive(t, rt)
	if _, ok := fireExecution(t, c.store, s.ID, t1.Add(20*time.Minute)); !ok {
		t.Fatal("SKIP did not start once the previous run ended")
	}
	got, _ := rt.GetSchedule(context.Background(), "t1", s.ID)
	if got.Fired != 2 || got.Skipped != 1 {
		t.Fatalf("fired %d skipped %d, want 2 and 1", got.Fired, got.Skipped)
	}
}

// BUFFER_ONE keeps the newest fire time while the previous run is not
// terminal (an older buffered one is counted skipped) and starts it once
// that run ended.
func TestScheduleOverlapBufferOne(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	rt := c.worker("w", engine.Config{}, clk, scheduled())
	s := createSchedule(t, rt, engine.ScheduleSpec{Spec: "*/10 * * * *", Overlap: schedule.BufferOne})
	t1 := clk.Advance(10 * time.Minute).Truncate(10 * time.Minute)
	mustDrive(t, rt)
	clk.Advance(10 * time.Minute)
	mustDrive(t, rt) // t2 buffered
	clk.Advance(10 * time.Minute)
	mustDrive(t, rt) // t3 buffered, t2 skipped
	got, _ := rt.GetSchedule(context.Background(), "t1", s.ID)
	if !got.PendingFireAt.Equal(t1.Add(20*time.Minute)) || got.Skipped != 1 {
		t.Fatalf("pending %v skipped %d, want t3 and 1", got.PendingFireAt, got.Skipped)
	}
	deliver(rt, c.queue)
	clk.Advance(time.Minute) // not a fire time: the buffered one starts
	mustDrive(t, rt)
	if _, ok := fireExecution(t, c.store, s.ID, t1.Add(20*time.Minute)); !ok {
		t.Fatal("the buffered fire time did not start once the previous run ended")
	}
	if _, ok := fireExecution(t, c.store, s.ID, t1.Add(10*time.Minute)); ok {
		t.Fatal("the replaced buffered fire time started")
	}
	got, _ = rt.GetSchedule(context.Background(), "t1", s.ID)
	if got.Fired != 2 || !got.PendingFireAt.IsZero() {
		t.Fatalf("fired %d pending %v", got.Fired, got.PendingFireAt)
	}
}

// A BUFFER_ONE schedule paused while it keeps a fire time never starts
// it (a resumed schedule does not catch up): the pause counts it skipped,
// so that every fire time that fell while it was active has an execution
// or is counted skipped. It was dropped at the resume without a count
// (the simulation, memory seed 9: 22 fire times without an execution,
// 21 counted skipped).
func TestSchedulePauseCountsTheBufferedFireSkipped(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	rt := c.worker("w", engine.Config{}, clk, scheduled())
	s := createSchedule(t, rt, engine.ScheduleSpec{Spec: "*/10 * * * *", Overlap: schedule.BufferOne})
	t1 := clk.Advance(10 * time.Minute).Truncate(10 * time.Minute)
	mustDrive(t, rt)
	clk.Advance(10 * time.Minute)
	mustDrive(t, rt) // t2 buffered: t1's run is still queued
	got, err := rt.PauseSchedule(context.Background(), "t1", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.PendingFireAt.IsZero() || got.Skipped != 1 {
		t.Fatalf("paused: pending %v skipped %d, want none and 1 (the buffered fire will not start)", got.PendingFireAt, got.Skipped)
	}
	deliver(rt, c.queue) // t1's run ends
	clk.Advance(time.Hour)
	if rep := mustDrive(t, rt); rep.Started != 0 {
		t.Fatalf("a paused schedule started %d", rep.Started)
	}
	if got, err = rt.ResumeSchedule(context.Background(), "t1", s.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	mustDrive(t, rt)
	if _, ok := fireExecution(t, c.store, s.ID, t1.Add(10*time.Minute)); ok {
		t.Fatal("the fire time buffered before the pause started after the resume")
	}
	got, _ = rt.GetSchedule(context.Background(), "t1", s.ID)
	if got.Fired != 2 || got.Skipped != 1 {
		t.Fatalf("fired %d skipped %d, want 2 (t1 and the first after the resume) and 1 (the buffered t2)", got.Fired, got.Skipped)
	}
}

// After an outage the newest 1+catchupLimit fire times start; the older
// ones are counted skipped and logged.
func TestScheduleCatchupAfterAnOutageIsBounded(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	rt := c.worker("w", engine.Config{}, clk, scheduled())
	s := createSchedule(t, rt, engine.ScheduleSpec{Spec: "*/10 * * * *", Overlap: schedule.AllowAll, CatchupLimit: intp(2)})
	clk.Advance(95 * time.Minute) // 10:10 .. 11:30 due: 9 fire times
	rep := mustDrive(t, rt)
	if rep.Started != 3 || rep.Skipped != 6 {
		t.Fatalf("pass = %+v, want 3 started and 6 skipped", rep)
	}
	base := schedStart.Truncate(time.Hour)
	for i, m := range []int{70, 80, 90} {
		if _, ok := fireExecution(t, c.store, s.ID, base.Add(time.Duration(m)*time.Minute)); !ok {
			t.Errorf("caught-up fire %d missing", i)
		}
	}
	if _, ok := fireExecution(t, c.store, s.ID, base.Add(60*time.Minute)); ok {
		t.Error("a fire time beyond the catch-up limit started")
	}
	if !strings.Contains(c.logs.String(), `"event":"schedule_fires_skipped"`) {
		t.Error("the skipped fire times were not logged")
	}
}

// A paused schedule fires nothing; resumed, it does not catch up the
// paused time.
func TestSchedulePauseAndResume(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	rt := c.worker("w", engine.Config{}, clk, scheduled())
	s := createSchedule(t, rt, engine.ScheduleSpec{Spec: "@every 1h", Overlap: schedule.AllowAll, CatchupLimit: intp(10)})
	if _, err := rt.PauseSchedule(context.Background(), "t1", s.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Hour)
	if rep := mustDrive(t, rt); rep.Started != 0 {
		t.Fatalf("a paused schedule started %d", rep.Started)
	}
	got, err := rt.ResumeSchedule(context.Background(), "t1", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Paused || !got.NextFireAt.After(clk.Now()) {
		t.Fatalf("resumed schedule = paused %v next %v", got.Paused, got.NextFireAt)
	}
	clk.Advance(time.Hour)
	if rep := mustDrive(t, rt); rep.Started != 1 || rep.Skipped != 0 {
		t.Fatalf("pass after resume = %+v", rep)
	}
	if err := rt.DeleteSchedule(context.Background(), "t1", s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.GetSchedule(context.Background(), "t1", s.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted schedule read: %v", err)
	}
	clk.Advance(time.Hour)
	if rep := mustDrive(t, rt); rep.Schedules != 0 || rep.Started != 0 {
		t.Fatalf("a deleted schedule was driven: %+v", rep)
	}
}

// Under SERVER_KEY_ONLY a submit's key derives from its payload; a
// schedule's fires (same input every time) must stay apart.
func TestScheduleFiresStayApartUnderServerKeyOnly(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(schedStart)
	rt := c.worker("w", engine.Config{IdempotencyPolicy: engine.ServerKeyOnly}, clk, scheduled())
	createSchedule(t, rt, engine.ScheduleSpec{Spec: "@every 1m", Overlap: schedule.AllowAll})
	for range 3 {
		clk.Advance(time.Minute)
		mustDrive(t, rt)
	}
	if n := len(tenantExecutions(t, c.store)); n != 3 {
		t.Fatalf("%d executions for 3 fire times", n)
	}
}

func TestCreateScheduleNamesTheRefusedField(t *testing.T) {
	c := newCluster(t)
	rt := c.worker("w", engine.Config{}, clock.NewFake(schedStart), scheduled())
	for field, spec := range map[string]engine.ScheduleSpec{
		"pipelineId":   {PipelineID: "p.none", Spec: "@hourly"},
		"spec":         {PipelineID: "p.sched", Spec: "every hour"},
		"timeZone":     {PipelineID: "p.sched", Spec: "@hourly", TimeZone: "Nowhere/Town"},
		"overlap":      {PipelineID: "p.sched", Spec: "@hourly", Overlap: "SOMETIMES"},
		"catchupLimit": {PipelineID: "p.sched", Spec: "@hourly", CatchupLimit: intp(-1)},
		"input":        {PipelineID: "p.sched", Spec: "@hourly", Input: []byte("{nope")},
	} {
		_, err := rt.CreateSchedule(context.Background(), "t1", spec)
		var fe *engine.ScheduleFieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, engine.ErrInvalidSchedule) {
			t.Errorf("%s: CreateSchedule = %v", field, err)
		}
	}
}

// The bulk re-drive driver leaves schedules alone (they share the job
// store's active set).
func TestRedriveDriverIgnoresSchedules(t *testing.T) {
	c := newCluster(t)
	rt := c.worker("w", engine.Config{}, clock.NewFake(schedStart), scheduled())
	createSchedule(t, rt, engine.ScheduleSpec{Spec: "@hourly"})
	held, err := rt.DriveRedrives(context.Background(), time.Second)
	if err != nil || held != 0 || strings.Contains(c.logs.String(), "bulk_redrive_unreadable") {
		t.Fatalf("DriveRedrives = %d, %v; logs %s", held, err, c.logs.String())
	}
}

func mustDrive(t *testing.T, rt *engine.Runtime) engine.ScheduleReport {
	t.Helper()
	rep, err := rt.DriveSchedules(context.Background())
	if err != nil || rep.Failed > 0 {
		t.Fatalf("DriveSchedules = %+v, %v", rep, err)
	}
	return rep
}
