package cli_test

import (
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/clitest"
)

// TestScheduleCommands: schedule create prints the schedule, schedules
// lists it, pause and resume change its state, delete removes it; a
// refused field is named, an unknown schedule exits 3 and the routes
// need the operator token.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, r := newRunner(t, tg), newRunner(t, tg).admin()
	if res := anon.want(cli.ExitFailure, "schedules"); !strings.Contains(res.stderr, "401") {
		t.Fatalf("schedules without a token: %s", res.stderr)
	}
	if res := r.want(cli.ExitFailure, "schedule", "create", clitest.PipelineOK, "--spec", "@every 10s"); !strings.Contains(res.stderr, `"spec"`) {
		t.Fatalf("a refused spec: %s", res.stderr)
	}
	s := decode[client.Schedule](t, r.ok("schedule", "create", clitest.PipelineOK, "--spec", "0 9 * * MON-FRI", "--tz", "Europe/Paris",
		"--overlap", "BUFFER_ONE", "--catchup", "0", "--data", `{"n":1}`, "-o", "json"))
	if s.Overlap != "BUFFER_ONE" || s.CatchupLimit != 0 || s.TimeZone != "Europe/Paris" || s.NextFireAt == nil || strings.Join(strings.Fields(string(s.Input)), "") != `{"n":1}` {
		t.Fatalf("created %+v", s)
	}
	if out := r.ok("schedules"); !strings.Contains(out, s.ScheduleID) || !strings.Contains(out, "0 9 * * MON-FRI") || !strings.Contains(out, "active") {
		t.Fatalf("schedules:\n%s", out)
	}
	hasField(t, r.ok("schedule", "pause", s.ScheduleID), "state", "paused")
	if l := decode[client.ScheduleList](t, r.ok("schedules", "-o", "json")); len(l.Schedules) != 1 || !l.Schedules[0].Paused {
		t.Fatalf("schedules after pause %+v", l)
	}
	hasField(t, r.ok("schedule", "resume", s.ScheduleID), "state", "active")
	hasField(t, r.ok("schedule", "get", s.ScheduleID), "overlap", "BUFFER_ONE")
	r.ok("schedule", "delete", s.ScheduleID)
	r.want(cli.ExitNotFound, "schedule", "get", s.ScheduleID)
	r.want(cli.ExitUsage, "schedule", "frobnicate", "x")
}
