package engine_test

// Bulk re-drive scenarios: each matched execution re-driven once at the
// job's rate with the single re-drive's audit record, a dry run, what
// changed meanwhile skipped, and the job surviving a crash and a
// deadline mid-job (another driver resumes it).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// failsOnce fails its first attempt non-retryably (the execution
// dead-letters) and succeeds on the re-drive's attempt.
func failsOnce(id string) pipeline.Pipeline {
	return pipeline.Pipeline{ID: id, Steps: []pipeline.Step{step("work", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		if info.Attempt == 1 {
			return nil, pipeline.NonRetryable("upstream_down", errors.New("the upstream was down"))
		}
		return in, nil
	})}}
}

// deadLettered submits n executions of pipeline p (keys prefix-i) and runs
// them to DLQ.
func deadLettered(t *testing.T, c *cluster, rt *engine.Runtime, p, prefix string, n int) []store.Execution {
	t.Helper()
	var out []store.Execution
	for i := range n {
		out = append(out, submitTo(t, rt, p, fmt.Sprintf("%s-%d", prefix, i), map[string]any{"i": i}))
	}
	deliver(rt, c.queue)
	for _, e := range out {
		if got := c.get(e.ExecutionID); got.Status != store.DLQ {
			t.Fatalf("%s is %s, want DLQ", e.ExecutionID, got.Status)
		}
	}
	return out
}

// TestBulkRedriveRedrivesEachMatchOnceAtItsRate: a job over the DLQ
// executions of one pipeline re-drives each exactly once, no faster than
// its rate, each with the single re-drive's audit note naming the job and
// reason, and leaves the rest alone.
func TestBulkRedriveRedrivesEachMatchOnceAtItsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, failsOnce("p.bad"), failsOnce("p.other"), threeSteps())
		matched := deadLettered(t, c, rt, "p.bad", "bad", 12)
		others := deadLettered(t, c, rt, "p.other", "other", 3)
		ok := submitTo(t, rt, "p.three", "ok", map[string]any{})
		deliver(rt, c.queue)
		ctx := context.Background()

		job, err := rt.StartRedrives(ctx, "t1", engine.RedriveFilter{PipelineID: "p.bad", Statuses: []store.Status{store.DLQ}, ErrorCode: "upstream_down"},
			"upstream fixed, OPS-9", 4, false)
		if err != nil || job.Matched != 12 || job.Done || job.ID == "" {
			t.Fatalf("StartRedrives = %+v, %v; want 12 matched, not done", job, err)
		}
		start := time.Now()
		if held, err := rt.DriveRedrives(ctx, time.Minute); err != nil || held != 1 {
			t.Fatalf("DriveRedrives = %d jobs, %v", held, err)
		}
		took := time.Since(start)
		got, err := rt.RedriveJob(ctx, "t1", job.ID)
		if err != nil || got.Matched != 12 || got.Redriven != 12 || got.Skipped != 0 || got.Failed != 0 || !got.Done {
			t.Fatalf("progress %+v, %v; want 12 of 12 re-driven, done", got, err)
		}
		if took < 11*250*time.Millisecond {
			t.Fatalf("12 re-drives at 4/s took %s, want at least 2.75s", took)
		}
		var times []time.Time
		for _, e := range matched {
			row := c.get(e.ExecutionID)
			if row.Status != store.Queued || row.RedriveCount != 1 || row.Note != "redrive "+job.ID+": upstream fixed, OPS-9" {
				t.Fatalf("%s: %s, re-driven %d times, note %q", e.ExecutionID, row.Status, row.RedriveCount, row.Note)
			}
			times = append(times, row.UpdatedAt)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap < 250*time.Millisecond {
				t.Fatalf("re-drives %d and %d %s apart, faster than 4/s", i-1, i, gap)
			}
		}
		for _, e := range append(others, ok) {
			if row := c.get(e.ExecutionID); row.RedriveCount != 0 {
				t.Fatalf("%s (not matched) was re-driven", e.ExecutionID)
			}
		}
		if n := strings.Count(c.logs.String(), `"redrive_id":"`+job.ID+`"`); n < 12 {
			t.Fatalf("%d log lines name the job, want the 12 re-drives' audit events at least", n)
		}
		// The re-driven executions run again and succeed; the finished job
		// is no longer driven.
		deliver(rt, c.queue)
		for _, e := range matched {
			if row := c.get(e.ExecutionID); row.Status != store.Succeeded {
				t.Fatalf("%s is %s after its re-drive ran", e.ExecutionID, row.Status)
			}
		}
		if held, _ := rt.DriveRedrives(ctx, time.Minute); held != 0 {
			t.Fatalf("a finished job is still driven")
		}
		if _, err := rt.RedriveJob(ctx, "t2", job.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant reads the job: %v, want ErrNotFound", err)
		}
	})
}

// TestBulkRedriveDryRunCountsOnly: a dry run matches, changes nothing and
// is done at once.
func TestBulkRedriveDryRunCountsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, failsOnce("p.bad"))
		execs := deadLettered(t, c, rt, "p.bad", "bad", 5)
		job, err := rt.StartRedrives(context.Background(), "t1", engine.RedriveFilter{}, "how many?", 0, true)
		if err != nil || job.Matched != 5 || !job.Done || job.Redriven != 0 || !job.DryRun || job.RatePerSecond != engine.DefaultRedriveRate {
			t.Fatalf("dry run = %+v, %v; want 5 matched, done, nothing re-driven", job, err)
		}
		if held, _ := rt.DriveRedrives(context.Background(), time.Minute); held != 0 {
			t.Fatalf("a dry run is driven")
		}
		for _, e := range execs {
			if row := c.get(e.ExecutionID); row.Status != store.DLQ || row.RedriveCount != 0 {
				t.Fatalf("a dry run changed %s: %s", e.ExecutionID, row.Status)
			}
		}
	})
}

// TestBulkRedriveSkipsWhatChanged: an execution that no longer matches
// when its turn comes (an operator re-drove it by hand meanwhile) is
// skipped, not re-driven again; matched = redriven + skipped + failed.
func TestBulkRedriveSkipsWhatChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, failsOnce("p.bad"))
		execs := deadLettered(t, c, rt, "p.bad", "bad", 6)
		ctx := context.Background()
		job, err := rt.StartRedrives(ctx, "t1", engine.RedriveFilter{Statuses: []store.Status{store.DLQ}}, "retry all", 100, false)
		if err != nil || job.Matched != 6 {
			t.Fatalf("StartRedrives = %+v, %v", job, err)
		}
		if _, err := rt.Redrive(ctx, execs[1].Key(), "by hand", nil); err != nil {
			t.Fatal(err)
		}
		deliver(rt, c.queue) // execs[1] succeeds
		if _, err := rt.DriveRedrives(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, _ := rt.RedriveJob(ctx, "t1", job.ID)
		if got.Redriven != 5 || got.Skipped != 1 || got.Failed != 0 || !got.Done {
			t.Fatalf("progress %+v; want 5 re-driven, 1 skipped", got)
		}
		if row := c.get(execs[1].ExecutionID); row.RedriveCount != 1 || row.Note != "by hand" {
			t.Fatalf("the hand re-driven execution was re-driven again: %d, %q", row.RedriveCount, row.Note)
		}
	})
}

// TestStartRedrivesRefusesBadRequests: a blank reason, a rate out of
// range and a status a bulk re-drive cannot take are refused; without a
// job store bulk re-drive is unavailable.
func TestStartRedrivesRefusesBadRequests(t *testing.T) {
	c := newCluster(t)
	rt := c.worker("w", engine.Config{}, nil, threeSteps())
	ctx := context.Background()
	for _, tc := range []struct {
		reason string
		rate   int
		f      engine.RedriveFilter
	}{
		{" ", 1, engine.RedriveFilter{}},
		{"r", engine.MaxRedriveRate + 1, engine.RedriveFilter{}},
		{"r", -1, engine.RedriveFilter{}},
		{"r", 1, engine.RedriveFilter{Statuses: []store.Status{store.Queued}}},
	} {
		if _, err := rt.StartRedrives(ctx, "t1", tc.f, tc.reason, tc.rate, false); !errors.Is(err, engine.ErrInvalidRedrive) {
			t.Errorf("StartRedrives(%q, %d, %+v): %v, want ErrInvalidRedrive", tc.reason, tc.rate, tc.f, err)
		}
	}
	c.store = &gone{Store: c.jobs} // keeps no jobs
	plain := c.worker("w2", engine.Config{}, nil, threeSteps())
	if _, err := plain.StartRedrives(ctx, "t1", engine.RedriveFilter{}, "r", 1, false); !errors.Is(err, engine.ErrRedrivesUnavailable) {
		t.Errorf("StartRedrives without a job store: %v, want ErrRedrivesUnavailable", err)
	}
}

// TestStartRedrivesWithKeyMakesOneJob: starts with one idempotency key,
// concurrent or retried, make one job (one of them new, the others
// Duplicate, all with its id), which re-drives each match once; the key
// with another request is ErrKeyMismatch; the same key of another tenant,
// or no key, starts a job of its own.
func TestStartRedrivesWithKeyMakesOneJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, failsOnce("p.bad"))
		execs := deadLettered(t, c, rt, "p.bad", "bad", 4)
		ctx := context.Background()
		opts := engine.RedrivesOptions{Filter: engine.RedriveFilter{PipelineID: "p.bad"}, Reason: "fixed, OPS-7", IdempotencyKey: "ops-7"}
		const starts = 6
		jobs := make([]engine.RedriveJob, starts)
		errs := make([]error, starts)
		var wg sync.WaitGroup
		for i := range starts {
			wg.Go(func() { jobs[i], errs[i] = rt.StartRedrivesWith(ctx, "t1", opts) })
		}
		wg.Wait()
		created := 0
		for i := range starts {
			if errs[i] != nil || jobs[i].ID != jobs[0].ID {
				t.Fatalf("start %d = %+v, %v; want job %s", i, jobs[i], errs[i], jobs[0].ID)
			}
			if !jobs[i].Duplicate {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("%d of %d concurrent starts with one key created a job, want 1", created, starts)
		}
		// A retry with the defaults spelled out is the same request.
		spelled := opts
		spelled.RatePerSecond, spelled.Filter.Statuses = engine.DefaultRedriveRate, []store.Status{store.Failed, store.DLQ}
		if again, err := rt.StartRedrivesWith(ctx, "t1", spelled); err != nil || again.ID != jobs[0].ID || !again.Duplicate {
			t.Fatalf("retry with the defaults spelled out = %+v, %v; want job %s, duplicate", again, err, jobs[0].ID)
		}
		for _, changed := range []func(*engine.RedrivesOptions){
			func(o *engine.RedrivesOptions) { o.Reason = "another reason" },
			func(o *engine.RedrivesOptions) { o.DryRun = true },
			func(o *engine.RedrivesOptions) { o.Filter.ErrorCode = "upstream_down" },
			func(o *engine.RedrivesOptions) { o.RatePerSecond = 99 },
		} {
			other := opts
			changed(&other)
			if _, err := rt.StartRedrivesWith(ctx, "t1", other); !errors.Is(err, store.ErrKeyMismatch) {
				t.Fatalf("the key with another request (%+v): %v, want ErrKeyMismatch", other, err)
			}
		}
		if _, err := rt.DriveRedrives(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		for _, e := range execs {
			if row := c.get(e.ExecutionID); row.RedriveCount != 1 {
				t.Fatalf("%s re-driven %d times, want once", e.ExecutionID, row.RedriveCount)
			}
		}
		if n := strings.Count(c.logs.String(), `"event":"bulk_redrive_started"`); n != 1 {
			t.Fatalf("%d bulk_redrive_started events, want 1", n)
		}
		theirs, err := rt.StartRedrivesWith(ctx, "t2", opts)
		if err != nil || theirs.ID == jobs[0].ID || theirs.Duplicate {
			t.Fatalf("tenant t2's start with the key = %+v, %v; want a job of its own", theirs, err)
		}
		unkeyed := opts
		unkeyed.IdempotencyKey = ""
		a, errA := rt.StartRedrivesWith(ctx, "t1", unkeyed)
		b, errB := rt.StartRedrivesWith(ctx, "t1", unkeyed)
		if errA != nil || errB != nil || a.ID == b.ID || a.Duplicate || b.Duplicate {
			t.Fatalf("two starts without a key = %+v, %v and %+v, %v; want two jobs", a, errA, b, errB)
		}
	})
}

// crashable is the view of the stores of a process that can die: once
// dead, every write fails (nothing of it lands any more).
type crashable struct {
	store.Store
	jobs store.JobStore
	dead atomic.Bool
}

var errDead = errors.New("the process is gone")

func (s *crashable) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	if s.dead.Load() {
		return store.Execution{}, errDead
	}
	return s.Store.Update(ctx, g, next)
}

func (s *crashable) CreateJob(ctx context.Context, j store.Job) error {
	return s.jobs.CreateJob(ctx, j)
}
func (s *crashable) GetJob(ctx context.Context, k store.JobKey) (store.Job, error) {
	return s.jobs.GetJob(ctx, k)
}
func (s *crashable) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	return s.jobs.ActiveJobs(ctx)
}
func (s *crashable) JobPage(ctx context.Context, k store.JobKey, n int) ([]string, error) {
	return s.jobs.JobPage(ctx, k, n)
}
func (s *crashable) PutJobPage(ctx context.Context, k store.JobKey, n int, ids []string, exp time.Time) error {
	if s.dead.Load() {
		return errDead
	}
	return s.jobs.PutJobPage(ctx, k, n, ids, exp)
}
func (s *crashable) UpdateJob(ctx context.Context, j store.Job, v int64) (store.Job, error) {
	if s.dead.Load() {
		return store.Job{}, errDead
	}
	return s.jobs.UpdateJob(ctx, j, v)
}

// TestBulkRedriveSurvivesRestart: the driver stops mid-job, by dying
// (its last checkpoint stands, its lease lapses) or at its deadline (a
// Lambda invocation's end: it hands the job back); another driver
// resumes the job, and in the end each matched execution was re-driven
// exactly once, also those re-driven after the last checkpoint.
func TestBulkRedriveSurvivesRestart(t *testing.T) {
	for _, how := range []string{"killed", "deadline"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t)
				p := failsOnce("p.bad")
				setup := c.worker("setup", engine.Config{Retry: fastRetry}, nil, p)
				execs := deadLettered(t, c, setup, "p.bad", "bad", 40)
				reg, err := pipeline.NewRegistry(p)
				if err != nil {
					t.Fatal(err)
				}
				view := &crashable{Store: c.jobs, jobs: c.jobs}
				first, err := engine.New(engine.Config{Retry: fastRetry, WorkerID: "first"}, engine.Deps{
					Registry: reg, Store: view, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq,
					Logger: slog.New(slog.NewJSONHandler(c.logs, nil)),
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				job, err := first.StartRedrives(ctx, "t1", engine.RedriveFilter{}, "after the outage", 10, false)
				if err != nil || job.Matched != 40 {
					t.Fatalf("StartRedrives = %+v, %v", job, err)
				}
				redriven := func() int {
					n := 0
					for _, e := range execs {
						if c.get(e.ExecutionID).RedriveCount > 0 {
							n++
						}
					}
					return n
				}
				// 40 at 10/s take 4s; checkpoints come every 5s, so stopping
				// after 2.5s leaves re-drives done after the last one.
				runCtx, stop := context.WithCancel(ctx)
				driven := make(chan struct{})
				go func() { defer close(driven); first.DriveRedrives(runCtx, time.Minute) }()
				time.Sleep(2500 * time.Millisecond)
				if how == "killed" {
					view.dead.Store(true)
				}
				stop()
				<-driven
				before := redriven()
				if before == 0 || before == 40 {
					t.Fatalf("%d of 40 re-driven when the first driver stopped, want some", before)
				}
				second := c.worker("second", engine.Config{Retry: fastRetry}, nil, p)
				if how == "killed" {
					if held, _ := second.DriveRedrives(ctx, time.Minute); held != 0 {
						t.Fatalf("the dead driver's job was taken within its lease")
					}
					time.Sleep(time.Minute) // its lease lapses
				}
				if held, err := second.DriveRedrives(ctx, time.Minute); err != nil || held != 1 {
					t.Fatalf("the second driver held %d jobs, %v", held, err)
				}
				got, _ := second.RedriveJob(ctx, "t1", job.ID)
				if got.Redriven != 40 || got.Skipped != 0 || got.Failed != 0 || !got.Done {
					t.Fatalf("progress after the resume %+v; want all 40 re-driven", got)
				}
				for _, e := range execs {
					if row := c.get(e.ExecutionID); row.RedriveCount != 1 {
						t.Fatalf("%s re-driven %d times, want once", e.ExecutionID, row.RedriveCount)
					}
				}
				if how == "killed" && !strings.Contains(c.logs.String(), `"event":"bulk_redrive_taken_over"`) {
					t.Fatalf("no takeover logged")
				}
			})
		})
	}
}

// listHook runs hook once, at the first List once armed.
type listHook struct {
	jobStore
	hook func()
}

func (l *listHook) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	if h := l.hook; h != nil {
		l.hook = nil
		h()
	}
	return l.jobStore.List(ctx, q)
}

// TestBulkRedriveStartIsNotRacedByItsOwnDriver: while StartRedrives
// scans, the driver of the same process leaves the job alone (the start
// holds it under a lease of its own); once the start hands it over, the
// driver takes it.
func TestBulkRedriveStartIsNotRacedByItsOwnDriver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		hooked := &listHook{jobStore: c.jobs}
		c.store = hooked
		rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, failsOnce("p.bad"))
		deadLettered(t, c, rt, "p.bad", "bad", 3)
		ctx := context.Background()
		heldDuringScan := -1
		hooked.hook = func() { heldDuringScan, _ = rt.DriveRedrives(ctx, time.Second) }
		job, err := rt.StartRedrives(ctx, "t1", engine.RedriveFilter{}, "fixed", 10, false)
		if err != nil || job.Matched != 3 {
			t.Fatalf("StartRedrives = %+v, %v", job, err)
		}
		if heldDuringScan != 0 {
			t.Fatalf("the process's driver held %d jobs during the start's scan, want none", heldDuringScan)
		}
		if held, _ := rt.DriveRedrives(ctx, time.Minute); held != 1 {
			t.Fatalf("the driver did not take the started job")
		}
		if got, _ := rt.RedriveJob(ctx, "t1", job.ID); got.Redriven != 3 || !got.Done {
			t.Fatalf("progress %+v", got)
		}
	})
}

// lostRedriveAnswer is the store of a driver whose re-drive write lands
// but whose answer is lost once (a timeout after the write).
type lostRedriveAnswer struct {
	crashable
	lost atomic.Bool
}

func (s *lostRedriveAnswer) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	got, err := s.crashable.Update(ctx, g, next)
	if err == nil && strings.HasPrefix(next.Note, "redrive ") && s.lost.CompareAndSwap(false, true) {
		return store.Execution{}, fmt.Errorf("%w: the answer was lost after the write", store.ErrUnavailable)
	}
	return got, err
}

// TestBulkRedriveResendsALostWorkItem: a re-drive whose write landed but
// whose answer was lost sent no work item; the job, finding the
// execution's note already naming it and the row still QUEUED, sends the
// item itself, so the execution runs without waiting for the sweeper.
func TestBulkRedriveResendsALostWorkItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		p := failsOnce("p.bad")
		setup := c.worker("setup", engine.Config{Retry: fastRetry}, nil, p)
		execs := deadLettered(t, c, setup, "p.bad", "bad", 3)
		reg, err := pipeline.NewRegistry(p)
		if err != nil {
			t.Fatal(err)
		}
		view := &lostRedriveAnswer{crashable: crashable{Store: c.jobs, jobs: c.jobs}}
		rt, err := engine.New(engine.Config{Retry: fastRetry, WorkerID: "driver"}, engine.Deps{
			Registry: reg, Store: view, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq,
			Logger: slog.New(slog.NewJSONHandler(c.logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sentBefore := c.queue.count()
		job, err := rt.StartRedrives(ctx, "t1", engine.RedriveFilter{}, "after the outage", 100, false)
		if err != nil || job.Matched != 3 {
			t.Fatalf("StartRedrives = %+v, %v", job, err)
		}
		if held, err := rt.DriveRedrives(ctx, time.Minute); err != nil || held != 1 {
			t.Fatalf("drove %d jobs, %v", held, err)
		}
		if !view.lost.Load() {
			t.Fatal("no re-drive answer was lost: the case proves nothing")
		}
		if n := c.queue.count() - sentBefore; n != 3 {
			t.Fatalf("%d work items sent for 3 re-driven executions, want 3 (one lost answer must not lose its item)", n)
		}
		deliver(rt, c.queue)
		for _, e := range execs {
			if got := c.get(e.ExecutionID); got.Status != store.Succeeded || got.RedriveCount != 1 {
				t.Fatalf("%s: %s after %d re-drives, want SUCCEEDED after 1", e.ExecutionID, got.Status, got.RedriveCount)
			}
		}
	})
}
