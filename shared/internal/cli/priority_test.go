package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
)

// TestSubmitPriority: submit --priority sends it (status and list show
// it: the PRIORITY column), an execution submitted without one shows the
// pipeline's default, and a priority outside 1..5 is a usage error
// before any request.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--priority", "1", "--data", `{"order":1}`, "-o", "json"))
	hasField(t, r.ok("status", sub.ExecutionID), "priority", "1")
	if e := decode[client.Execution](t, r.ok("status", sub.ExecutionID, "-o", "json")); e.Priority != 1 {
		t.Fatalf("status -o json priority %d, want 1", e.Priority)
	}
	plain := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--data", `{"order":2}`, "-o", "json"))
	hasField(t, r.ok("status", plain.ExecutionID), "priority", "3")
	lines := strings.Split(strings.TrimSpace(r.ok("list")), "\n")
	if !regexp.MustCompile(`^EXECUTION\s+PIPELINE\s+STATUS\s+PRIORITY\s+STEP`).MatchString(lines[0]) {
		t.Fatalf("list header %q", lines[0])
	}
	got := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		got[f[0]] = f[3]
	}
	if got[sub.ExecutionID] != "1" || got[plain.ExecutionID] != "3" {
		t.Fatalf("listed priorities %v, want 1 and 3", got)
	}
	for _, bad := range []string{"0", "6", "-2"} {
		res := r.want(2, "submit", clitest.PipelineOK, "--priority", bad)
		if !strings.Contains(res.stderr, "--priority must be 1 (most urgent) to 5 (least urgent)") {
			t.Errorf("--priority %s: stderr %q", bad, res.stderr)
		}
	}
}
