package sim

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envInt reads an integer knob from the environment.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestSimulate runs the simulation the environment describes (make
// simulate: SIM_SEED, SIM_EXECUTIONS, SIM_VIRTUAL_DAYS, SIM_STORES) and
// prints its report; it fails on any violation.
func TestSimulate(t *testing.T) {
	if os.Getenv("SIM_SEED") == "" {
		t.Skip("make simulate runs it (SIM_SEED)")
	}
	seed, err := strconv.ParseUint(os.Getenv("SIM_SEED"), 10, 64)
	if err != nil {
		t.Fatalf("SIM_SEED: %v", err)
	}
	stores := Stores
	if s := os.Getenv("SIM_STORES"); s != "" {
		stores = strings.Split(s, ",")
	}
	for _, st := range stores {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			rep := Run(t, Options{Seed: seed, Store: st, Executions: envInt(t, "SIM_EXECUTIONS", 300), VirtualDays: envInt(t, "SIM_VIRTUAL_DAYS", 30),
				KeepTrace: os.Getenv("SIM_TRACE_FILE") != "", Progress: progressTo()})
			fmt.Println(rep.Table())
			if f := os.Getenv("SIM_TRACE_FILE"); f != "" {
				if err := os.WriteFile(f+"."+st, []byte(strings.Join(rep.Trace, "\n")+"\n"), 0o644); err != nil {
					t.Error(err)
				}
			}
			if !rep.OK() {
				t.Errorf("%d invariant violations", len(rep.Violations))
			}
		})
	}
}

// progressTo is where a run reports its progress: stderr under
// SIM_PROGRESS=1 (long runs), else nowhere.
func progressTo() io.Writer {
	if os.Getenv("SIM_PROGRESS") != "" {
		return os.Stderr
	}
	return nil
}

// TestFindSeeds runs seeds 1..SIM_FIND on each store (SIM_STORES) and
// prints, for every invariant, the first seed that broke it and how: the
// seeds docs/recovery.md names for the audit's items were found so.
func TestFindSeeds(t *testing.T) {
	n := envInt(t, "SIM_FIND", 0)
	if n == 0 {
		t.Skip("SIM_FIND=<seeds> runs it")
	}
	stores := Stores
	if s := os.Getenv("SIM_STORES"); s != "" {
		stores = strings.Split(s, ",")
	}
	for _, st := range stores {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			first := map[string]Violation{}
			seeds := map[string]uint64{}
			for seed := uint64(1); seed <= uint64(n); seed++ {
				rep := Run(t, Options{Seed: seed, Store: st, Executions: envInt(t, "SIM_EXECUTIONS", 300), VirtualDays: envInt(t, "SIM_VIRTUAL_DAYS", 30)})
				for _, v := range rep.Violations {
					if _, ok := first[v.Invariant]; !ok {
						first[v.Invariant], seeds[v.Invariant] = v, seed
					}
				}
			}
			for _, inv := range invariantNames {
				if v, ok := first[inv]; ok {
					t.Logf("%s: first broken by seed %d: %s", inv, seeds[inv], v.Detail)
				} else {
					t.Logf("%s: held for seeds 1..%d", inv, n)
				}
			}
		})
	}
}

// TestSimulatorIsDeterministic runs one seed twice on each store: the two
// traces must be equal, line for line (a seed that finds a break finds it
// again).
func TestSimulatorIsDeterministic(t *testing.T) {
	for _, st := range Stores {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			o := Options{Seed: 20261202, Store: st, Executions: deterministicExecutions, VirtualDays: 3, KeepTrace: true}
			a, b := Run(t, o), Run(t, o)
			if len(a.Trace) == 0 {
				t.Fatal("an empty trace")
			}
			for i := range min(len(a.Trace), len(b.Trace)) {
				if a.Trace[i] != b.Trace[i] {
					t.Fatalf("the runs of seed %d part at line %d:\n %s\n %s", o.Seed, i+1, a.Trace[i], b.Trace[i])
				}
			}
			if len(a.Trace) != len(b.Trace) {
				t.Fatalf("the runs of seed %d have %d and %d lines", o.Seed, len(a.Trace), len(b.Trace))
			}
		})
	}
}

// TestSimulateBudget is make test's share of the simulation: a few seeds
// on every store, fresh ones each day (the seeds are the day's), so that
// CI explores as it goes; a failure prints the seed to repeat it with
// make simulate. SIM_BUDGET sets the seeds per store (default 2). Under
// the race detector, which slows a simulation tenfold, it does not run:
// make test runs it without.
func TestSimulateBudget(t *testing.T) {
	if raceDetector {
		t.Skip("make test runs the simulation budget without the race detector")
	}
	seeds := envInt(t, "SIM_BUDGET", 2)
	base := uint64(time.Now().UTC().YearDay()) * 1000
	for _, st := range Stores {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			for i := range seeds {
				rep := Run(t, Options{Seed: base + uint64(i), Store: st, Executions: 150, VirtualDays: 10})
				if !rep.OK() {
					t.Errorf("%s", rep.Table())
				}
			}
		})
	}
}

// TestRankInvariantCatchesIgnoredRank: the invariant that no waiter is
// passed over by one ranked after it holds on a run, and finds the
// broken variant (a key's wait line read in creation order, ignoring the
// priorities) on the same seed.
func TestRankInvariantCatchesIgnoredRank(t *testing.T) {
	brokenVariantFails(t, Options{Seed: 20261203, Store: StoreMemory, Executions: 400, VirtualDays: 1},
		invKeyRankOrder, 1, "the wait line read in creation order", func(o *Options) { o.ignoreRank = true })
}

// TestUrgentLaneInvariantCatchesUrgentOnTheWorkQueue: every work item of
// an urgent execution (priority 1) travels the urgent queue on a run,
// whichever path dispatched it, and the invariant finds the broken
// variant (a dispatcher without the lane, urgent items on the work
// queue) on the same seed.
func TestUrgentLaneInvariantCatchesUrgentOnTheWorkQueue(t *testing.T) {
	brokenVariantFails(t, Options{Seed: 20261203, Store: StoreMemory, Executions: 400, VirtualDays: 1},
		invUrgentLane, 1, "urgent items on the work queue", func(o *Options) { o.urgentToWork = true })
}

// brokenVariantFails proves that invariant inv can fail: a run with
// options o checks it at least minChecks times and keeps it; the same
// run with the runtime broken by breakIt (what says how) violates it.
func brokenVariantFails(t *testing.T, o Options, inv string, minChecks int, what string, breakIt func(*Options)) {
	t.Helper()
	count := func(r Report) int {
		n := 0
		for _, v := range r.Violations {
			if v.Invariant == inv {
				n++
			}
		}
		return n
	}
	good := Run(t, o)
	if good.Checks[inv] < minChecks {
		t.Fatalf("%q: the run checked it %d times; too few to tell:\n%s", inv, good.Checks[inv], good.Table())
	}
	if n := count(good); n != 0 {
		t.Fatalf("%q: %d violations on the correct runtime:\n%s", inv, n, good.Table())
	}
	breakIt(&o)
	bad := Run(t, o)
	t.Logf("%q: %d checks, 0 violations; broken (%s): %d checks, %d violations", inv, good.Checks[inv], what, bad.Checks[inv], count(bad))
	if count(bad) == 0 {
		t.Fatalf("%q held over %d checks with the runtime broken (%s): it checks nothing", inv, bad.Checks[inv], what)
	}
}
