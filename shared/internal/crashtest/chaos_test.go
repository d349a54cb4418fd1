package crashtest_test

import (
	"testing"

	"github.com/qasync/qasync/shared/internal/crashtest"
)

// TestChaos runs the chaos scenario (crashtest.RunChaos) and fails on any
// invariant violation. Without CHAOS_* variables it runs the short
// profile that `make test` includes (60 executions, 2 workers, a kill
// every ~3 s, well under a minute); `make chaos` runs the long one
// (CHAOS_EXECUTIONS=1000, CHAOS_WORKERS=3, CHAOS_MIN_KILLS=20, ...). The
// report table is logged (go test -v shows it).
func TestChaos(t *testing.T) {
	t.Parallel()
	opts, err := crashtest.ChaosOptionsFromEnv(crashtest.ChaosOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := crashtest.RunChaos(t, opts)
	t.Log("\n" + rep.Table())
	for i, v := range rep.Violations {
		if i == 50 {
			t.Errorf("... and %d more violations", len(rep.Violations)-50)
			break
		}
		t.Error(v)
	}
}
