package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// small is a workload that takes a few seconds per system.
var small = Options{Workers: 8, Executions: 30, Submitters: 4, Rate: 20, Duration: time.Second,
	StartTimeout: 30 * time.Second, BurstTimeout: time.Minute, DrainTimeout: 30 * time.Second}

// TestEverySystemRunsThePipelineInBothPhases runs each registered system on
// a small workload: every execution must finish its three steps, in order,
// with the document handed from step to step (the tracker refuses any
// other). River on Postgres runs when a Postgres can be had.
func TestEverySystemRunsThePipelineInBothPhases(t *testing.T) {
	for _, spec := range sortedSpecs() {
		t.Run(spec.Key, func(t *testing.T) {
			if spec.Prepare != nil {
				env, cleanup, skip, err := spec.Prepare(context.Background(), t.Logf)
				if cleanup != nil {
					defer cleanup()
				}
				if err != nil {
					t.Fatalf("prepare: %v", err)
				}
				if skip != "" {
					t.Skip(skip)
				}
				for _, kv := range env {
					k, v, _ := strings.Cut(kv, "=")
					t.Setenv(k, v)
				}
			}
			b, err := runBurst(context.Background(), spec, small)
			if err != nil {
				t.Fatalf("burst: %v", err)
			}
			if b.Steps != 3*small.Executions || b.StepsPerS <= 0 || b.CPUMsPerStep <= 0 {
				t.Errorf("burst: %+v", b)
			}
			s, err := runSteady(context.Background(), spec, small)
			if err != nil {
				t.Fatalf("steady: %v", err)
			}
			if s.Submitted != 20 || s.Completed != 20 || s.P50Ms <= 0 || s.P99Ms < s.P50Ms {
				t.Errorf("steady: %+v", s)
			}
			t.Logf("burst %.0f steps/s, %.3f CPU ms/step; steady p50 %.2f ms p99 %.2f ms", b.StepsPerS, b.CPUMsPerStep, s.P50Ms, s.P99Ms)
		})
	}
}

// TestTrackerCountsEachExecutionOnceAndRefusesWrongDocuments: a duplicate
// completion is ignored, a document that skipped a step fails the wait.
func TestTrackerCountsEachExecutionOnceAndRefusesWrongDocuments(t *testing.T) {
	tr := newTracker(2)
	tr.complete(Completion{ID: 0, Doc: Doc{ID: 0, Path: StepNames}})
	tr.complete(Completion{ID: 0, Doc: Doc{ID: 0, Path: StepNames}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := tr.wait(ctx); err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("wait after a duplicate: %v, want 1 of 2 done", err)
	}
	tr.complete(Completion{ID: 1, Doc: Doc{ID: 1, Path: []string{"step1", "step3"}}})
	tr.complete(Completion{ID: 1, Doc: Doc{ID: 1, Path: StepNames}})
	if err := tr.wait(context.Background()); err == nil || !strings.Contains(err.Error(), "wrong document") {
		t.Fatalf("wait: %v, want the wrong document reported", err)
	}
}

// TestPercentileIsNearestRank: p50 and p99 of 1..100 ms.
func TestPercentileIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%g = %s, want %s", p, got, want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %s", got)
	}
}

// TestTableGivesRatiosToQasyncAndReasons: ratios are against the baseline
// row, a failed system keeps the figures it has and says why, a skipped
// one says why.
func TestTableGivesRatiosToQasyncAndReasons(t *testing.T) {
	rep := Report{Settings: small.settings(), Results: []Result{
		{System: "qasync", Baseline: true, Status: "ok", Burst: &BurstResult{StepsPerS: 10000, CPUMsPerStep: 0.02},
			Steady: &SteadyResult{Submitted: 10, Completed: 10, P50Ms: 0.5, P99Ms: 1}},
		{System: "peer", Status: "failed", Reason: "steady: 3 of 10 executions done", Burst: &BurstResult{StepsPerS: 500, CPUMsPerStep: 1.5},
			Steady: &SteadyResult{Submitted: 10, Completed: 3}},
		{System: "other", Status: "ok", Burst: &BurstResult{StepsPerS: 2500}, Steady: &SteadyResult{Submitted: 10, Completed: 10, P50Ms: 25, P99Ms: 40}},
		{System: "pg", Status: "skipped", Reason: skipNoPostgres},
	}}
	var buf bytes.Buffer
	renderTable(&buf, rep)
	out := buf.String()
	for _, want := range []string{
		"| qasync | 10000 | 0.50 | 1.00 | 0.020 | 1.00x | 1.00x |",
		"| peer — failed: steady: 3 of 10 executions done | 500 | failed | failed | 1.500 | 0.05x | - |",
		"| other | 2500 | 25.0 | 40.0 | 0.000 | 0.25x | 50.0x |",
		"| pg | " + skipNoPostgres + " |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestParentReadsTheChildsResultLine: log lines around it are ignored.
func TestParentReadsTheChildsResultLine(t *testing.T) {
	out := "noise\n" + resultPrefix + `{"key":"x","status":"ok","burst":{"steps_per_s":12}}` + "\nmore noise\n"
	r, ok := parseResult([]byte(out))
	if !ok || r.Key != "x" || r.Burst == nil || r.Burst.StepsPerS != 12 {
		t.Fatalf("parseResult = %+v, %v", r, ok)
	}
	if _, ok := parseResult([]byte("no result here\n")); ok {
		t.Fatal("parseResult found a result in its absence")
	}
}

// TestProcStatReadsThisProcess: the fields processTreeCPU sums.
func TestProcStatReadsThisProcess(t *testing.T) {
	st, err := procStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if st.ppid != os.Getppid() {
		t.Errorf("ppid %d, want %d", st.ppid, os.Getppid())
	}
	if _, err := processTreeCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
}

// TestTemporalIsSkippedWithoutTheCLI: no BENCH_TEMPORAL_BIN, no temporal
// next to the binary, in .cache/bin above the working directory or on
// PATH: the row is skipped; a BENCH_TEMPORAL_BIN naming no file fails it.
func TestTemporalIsSkippedWithoutTheCLI(t *testing.T) {
	t.Setenv(envTemporalBin, "")
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir())
	if self, err := os.Executable(); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(self), "temporal")); err == nil {
			t.Skip("a temporal binary sits next to the test binary")
		}
	}
	_, cleanup, skip, err := prepareTemporal(context.Background(), t.Logf)
	if cleanup != nil {
		cleanup()
	}
	if err != nil || skip != skipNoTemporal {
		t.Fatalf("prepare = %q, %v; want %q", skip, err, skipNoTemporal)
	}
	t.Setenv(envTemporalBin, filepath.Join(t.TempDir(), "missing"))
	if _, _, skip, err := prepareTemporal(context.Background(), t.Logf); err == nil || skip != "" {
		t.Fatalf("prepare with a missing %s = %q, %v; want an error", envTemporalBin, skip, err)
	}
}
