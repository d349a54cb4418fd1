package cli_test

import (
	"regexp"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// TestPauseCommands: pause ID parks an awaiting execution PAUSED (again:
// no change), resume ID puts it back WAITING_EXTERNAL and a second resume
// exits 4 (not paused); pause --filter counts (dry run) and pauses with
// --wait, pause --status prints the progress, resume --filter --wait lets
// them go on; without the token the route is refused.
func TestPauseCommands(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, r := newRunner(t, tg), newRunner(t, tg).admin()
	parked := r.settle(clitest.PipelineWait, store.WaitingExternal)
	anon.want(cli.ExitFailure, "pause", parked.ExecutionID, "--reason", "no")
	hasField(t, r.ok("pause", parked.ExecutionID, "--reason", "hold, OPS-1"), "status", "PAUSED")
	if e := decode[client.Execution](t, r.ok("pause", parked.ExecutionID, "--reason", "again", "-o", "json")); e.Status != store.Paused ||
		e.Pause == nil || e.Pause.Reason != "hold, OPS-1" || e.Pause.ResumesTo != store.WaitingExternal {
		t.Fatalf("second pause %+v", e)
	}
	hasField(t, r.ok("resume", parked.ExecutionID, "--reason", "go on"), "status", "WAITING_EXTERNAL")
	r.want(cli.ExitConflict, "resume", parked.ExecutionID, "--reason", "again")
	done := r.settle(clitest.PipelineOK, store.Succeeded)
	r.want(cli.ExitConflict, "pause", done.ExecutionID, "--reason", "late")
	r.want(cli.ExitUsage, "pause", parked.ExecutionID)

	filter := "pipelineId=" + clitest.PipelineWait + ",status=WAITING_EXTERNAL"
	dry := decode[client.BulkJob](t, r.ok("pause", "--filter", filter, "--reason", "count", "--dry-run", "-o", "json"))
	if dry.Matched < 1 || dry.JobID == "" || dry.Action != "pause" {
		t.Fatalf("dry run %+v", dry)
	}
	res := r.want(0, "pause", "--filter", filter, "--reason", "freeze", "--rate", "50", "--wait")
	hasField(t, res.stdout, "done", "true")
	id := regexp.MustCompile(`(?m)^pause\s+(\S+)`).FindStringSubmatch(res.stdout)[1]
	p := decode[client.BulkProgress](t, r.ok("pause", "--status", id, "-o", "json"))
	if !p.Done || p.Applied < 1 || p.Applied != p.Matched-p.Skipped-p.Failed {
		t.Fatalf("pause --status %+v", p)
	}
	waitFor(t, r, parked.ExecutionID, store.Paused)
	res = r.want(0, "resume", "--filter", "pipelineId="+clitest.PipelineWait, "--reason", "thaw", "--rate", "50", "--wait")
	hasField(t, res.stdout, "done", "true")
	waitFor(t, r, parked.ExecutionID, store.WaitingExternal)
	r.want(cli.ExitNotFound, "resume", "--status", id) // a pause job is no resume job
}
