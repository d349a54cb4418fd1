package datadirtest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/internal/datadirtest"
)

// TestCheckFailsARunThatLeavesTheDefaultDataDir: a run that creates
// .qasync in the working directory fails (status 1) naming the key, and
// the directory is removed; a clean run keeps its status; a directory
// that was there before the run is not the run's doing.
func TestCheckFailsARunThatLeavesTheDefaultDataDir(t *testing.T) {
	t.Chdir(t.TempDir())
	var out strings.Builder
	leaves := func() int {
		if err := os.MkdirAll(".qasync", 0o700); err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := datadirtest.Check(leaves, &out); code != 1 || !strings.Contains(out.String(), "pipeline.orchestrator.embedded.data-dir") {
		t.Fatalf("a run leaving .qasync: status %d, output %q; want 1 naming the key", code, out.String())
	}
	if _, err := os.Stat(".qasync"); !os.IsNotExist(err) {
		t.Fatalf("the directory the run left is still there: %v", err)
	}
	out.Reset()
	if code := datadirtest.Check(func() int { return 3 }, &out); code != 3 || out.Len() != 0 {
		t.Fatalf("a clean run: status %d, output %q; want its own status, silently", code, out.String())
	}
	if err := os.MkdirAll(".qasync", 0o700); err != nil {
		t.Fatal(err)
	}
	if code := datadirtest.Check(func() int { return 0 }, &out); code != 0 {
		t.Fatalf("a directory there before the run: status %d, want 0", code)
	}
}
