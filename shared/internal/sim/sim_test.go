package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
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
				KeepTrace: os.Getenv("SIM_TRACE_FILE") != ""})
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
