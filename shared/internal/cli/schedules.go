package cli

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"strconv"
	"time"

	"github.com/qasync/qasync/shared/client"
)

// The schedules' commands (operator routes).
var scheduleCommands = []*command{
	{name: "schedules", usage: "schedules", summary: "list the schedules (operator)",
		help: `Lists the tenant's schedules, by id: pipeline, spec and time zone, overlap policy,
whether paused, the next and last fire times and how many fire times were started
(FIRED) and skipped (SKIPPED: by the overlap policy or the catch-up limit). With -o json:
{"schedules": [...]}. An operator route: the admin token locally (QASYNC_ADMIN_TOKEN or
--admin-token-file), the route's IAM permission behind API Gateway.`, flags: schedulesCmd},
	{name: "schedule", usage: "schedule create PIPELINE --spec S [--tz Z] [--overlap O] [--catchup N] [--data JSON|@file] [--paused] | schedule get|pause|resume|delete ID",
		summary: "create, show, pause, resume or delete a schedule (operator)",
		help: `schedule create PIPELINE --spec S [--tz Z] [--overlap SKIP|BUFFER_ONE|ALLOW_ALL] [--catchup N] [--data JSON|@file] [--paused]
    creates a schedule that starts an execution of PIPELINE at every fire time of S: a
    5-field cron expression ("0 9 * * MON-FRI") or a descriptor (@hourly, @daily,
    @every 15m), in the IANA time zone Z (default UTC). --overlap says what happens
    while the previous run is not terminal (default SKIP); --catchup how many missed fire
    times start after an outage besides the newest (default 1); --data is every
    execution's input (a JSON object, default {}). Each fire time is one execution
    (idempotency key schedule:<id>:<fire time>). The sweeper drives schedules: their
    precision is its period (a minute on AWS, --sweep-interval in qasync serve).
schedule get ID       prints the schedule.
schedule pause ID     pauses it: nothing fires until resumed.
schedule resume ID    resumes it from now on (the paused time is not caught up).
schedule delete ID    deletes it (its executions are not touched).
An operator route: the admin token locally (QASYNC_ADMIN_TOKEN or --admin-token-file),
the route's IAM permission behind API Gateway.`, flags: scheduleCmd},
}

func init() {
	commands = append(commands, scheduleCommands...)
	operatorCommands = append(operatorCommands, "schedules", "schedule")
}

func schedulesCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		all, err := c.Schedules(ctx)
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, client.ScheduleList{Schedules: all})
			return nil
		}
		printSchedules(s.env.Stdout, all)
		return nil
	}
}

func scheduleCmd(fs *flag.FlagSet) runFunc {
	spec := fs.String("spec", "", "create: the cron expression or descriptor (required)")
	tz := fs.String("tz", "", "create: the IANA time zone (default UTC)")
	overlap := fs.String("overlap", "", "create: SKIP, BUFFER_ONE or ALLOW_ALL (default SKIP)")
	catchup := fs.Int("catchup", -1, "create: missed fire times started after an outage besides the newest (default 1)")
	data := fs.String("data", "", "create: every execution's input, a JSON object: text, @file, or @- for stdin (default {})")
	paused := fs.Bool("paused", false, "create: create it paused")
	return func(ctx context.Context, s *session, args []string) error {
		if len(args) == 0 {
			return usagef("missing create, get, pause, resume or delete")
		}
		var (
			sch client.Schedule
			err error
		)
		switch args[0] {
		case "create":
			if err := wantArgs(args[1:], "PIPELINE"); err != nil {
				return err
			}
			if *spec == "" {
				return usagef("--spec is required")
			}
			req := client.ScheduleRequest{PipelineID: args[1], Spec: *spec, TimeZone: *tz, Overlap: *overlap, Paused: *paused}
			if *catchup >= 0 {
				req.CatchupLimit = catchup
			}
			if *data != "" {
				body, err := s.readData(*data)
				if err != nil {
					return err
				}
				req.Input = json.RawMessage(body)
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			if sch, err = c.CreateSchedule(ctx, req); err != nil {
				return err
			}
		case "get", "pause", "resume", "delete":
			if err := wantArgs(args[1:], "ID"); err != nil {
				return err
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			switch args[0] {
			case "get":
				sch, err = c.Schedule(ctx, args[1])
			case "pause":
				sch, err = c.PauseSchedule(ctx, args[1])
			case "resume":
				sch, err = c.ResumeSchedule(ctx, args[1])
			case "delete":
				if err := c.DeleteSchedule(ctx, args[1]); err != nil {
					return err
				}
				if s.json() {
					writeJSON(s.env.Stdout, map[string]any{"scheduleId": args[1], "deleted": true})
				} else {
					fields(s.env.Stdout, "schedule", args[1], "deleted", "true")
				}
				return nil
			}
			if err != nil {
				return err
			}
		default:
			return usagef("unknown schedule command %q: create, get, pause, resume or delete", args[0])
		}
		if s.json() {
			writeJSON(s.env.Stdout, sch)
			return nil
		}
		printSchedule(s.env.Stdout, sch)
		return err
	}
}

func tsp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return ts(*t)
}

func stateText(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}

// printSchedules writes the schedules as a table.
func printSchedules(w io.Writer, all []client.Schedule) {
	rows := make([][]string, 0, len(all))
	for _, s := range all {
		rows = append(rows, []string{s.ScheduleID, s.PipelineID, s.Spec, s.TimeZone, s.Overlap, stateText(s.Paused),
			tsp(s.NextFireAt), tsp(s.LastFireAt), strconv.Itoa(s.Fired), strconv.Itoa(s.Skipped)})
	}
	table(w, []string{"ID", "PIPELINE", "SPEC", "TIME ZONE", "OVERLAP", "STATE", "NEXT", "LAST", "FIRED", "SKIPPED"}, rows)
}

// printSchedule writes one schedule as name-value pairs.
func printSchedule(w io.Writer, s client.Schedule) {
	fields(w, "schedule", s.ScheduleID, "pipeline", s.PipelineID, "spec", s.Spec, "time zone", s.TimeZone, "overlap", s.Overlap,
		"catch-up", strconv.Itoa(s.CatchupLimit), "state", stateText(s.Paused), "next fire", tsp(s.NextFireAt),
		"last fire", tsp(s.LastFireAt), "last execution", s.LastExecutionID, "pending fire", tsp(s.PendingFireAt),
		"fired", strconv.Itoa(s.Fired), "skipped", strconv.Itoa(s.Skipped), "input", string(s.Input))
}
