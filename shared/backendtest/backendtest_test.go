package backendtest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/backendtest"
)

// TestExerciseRefusesEmptyProvider: a Provider listing no seam fails
// instead of passing without testing anything. The failing run happens
// in a child process (this test binary, re-run on this test alone).
func TestExerciseRefusesEmptyProvider(t *testing.T) {
	if os.Getenv("BACKENDTEST_EMPTY_PROVIDER") == "1" {
		backendtest.Exercise(t, backendtest.Provider{})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExerciseRefusesEmptyProvider$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BACKENDTEST_EMPTY_PROVIDER=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the Provider lists no seam") {
		t.Fatalf("Exercise with an empty Provider: err = %v, output:\n%s", err, out)
	}
}
