package cli

// qasync pause and qasync resume: one execution, or many by filter.

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/qasync/qasync/shared/client"
)

// pauseCommands are the pause and resume commands (commands lists them).
var pauseCommands = []command{
	{name: "pause", usage: "pause ID --reason R | --filter F --reason R [--rate N] [--dry-run] [--key K] [--wait] | --status JOB_ID", summary: "pause one execution, or many by filter (operator)",
		help: `pause ID --reason R
    pauses an execution: a queued, retrying, sleeping or awaiting one is PAUSED at once (no
    lease, never swept or claimed; its due time and await are kept); a running step runs to
    its end and its commit parks the execution PAUSED (a waiting map parent parks when its
    children are done). An await completion arriving while paused is recorded for the
    resume. Pausing a PAUSED execution changes nothing; an ended, PENDING or
    REMOTE_OUTCOME_UNKNOWN one exits 4 (conflict).
pause --filter pipelineId=P,status=S,createdAfter=T,createdBefore=T --reason R [--rate N] [--dry-run] [--key K] [--wait]
    starts a durable bulk pause (as redrive --filter: rate, dry run, idempotency key,
    progress); status may be QUEUED, WAIT_RETRY, WAITING_EXTERNAL, RUNNING,
    WAITING_CHILDREN and WAITING_KEY (default all six).
pause --status JOB_ID
    prints a bulk pause's progress.
An operator route: the admin token locally (QASYNC_ADMIN_TOKEN or --admin-token-file),
the route's IAM permission behind API Gateway.`, flags: func(fs *flag.FlagSet) runFunc { return pauseCmd(fs, true) }},
	{name: "resume", usage: "resume ID --reason R | --filter F --reason R [--rate N] [--dry-run] [--key K] [--wait] | --status JOB_ID", summary: "resume one paused execution, or many by filter (operator)",
		help: `resume ID --reason R
    puts a PAUSED execution back where it was: QUEUED or WAIT_RETRY with its own due time
    (at once when it has passed), or WAITING_EXTERNAL with its await; on a running one whose
    pause is only requested, withdraws the request. Any other status exits 4 (conflict:
    execution-not-paused).
resume --filter pipelineId=P,createdAfter=T,createdBefore=T --reason R [--rate N] [--dry-run] [--key K] [--wait]
    starts a durable bulk resume of the PAUSED executions the filter selects.
resume --status JOB_ID
    prints a bulk resume's progress.`, flags: func(fs *flag.FlagSet) runFunc { return pauseCmd(fs, false) }},
}

func pauseCmd(fs *flag.FlagSet, pause bool) runFunc {
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	reason := fs.String("reason", "", "why (the audit note; required)")
	var filters filterFlag
	fs.Var(&filters, "filter", "bulk: select by `key=value,...`: pipelineId, status (may repeat), createdAfter, createdBefore (RFC 3339)")
	rate := fs.Int("rate", 0, "bulk: executions per second at most (default: the server's)")
	dryRun := fs.Bool("dry-run", false, "bulk: count the matching executions, change none")
	wait := fs.Bool("wait", false, "bulk: follow the progress until done")
	progress := fs.String("status", "", "print the progress of bulk "+verb+" `JOB_ID`")
	key := fs.String("key", "", "bulk: idempotency key of the job (default: a new one)")
	expected := fs.Int64("expected-version", 0, "one: act only if the execution is at this version")
	return func(ctx context.Context, s *session, args []string) error {
		c, err := s.client()
		if err != nil {
			return err
		}
		switch {
		case *progress != "":
			if len(args) > 0 || len(filters) > 0 || *reason != "" {
				return usagef("--status JOB_ID takes no execution id, --filter or --reason")
			}
			return s.bulkPauseProgress(ctx, c, pause, *progress, false)
		case len(filters) > 0:
			if len(args) > 0 {
				return usagef("give an execution id or --filter, not both")
			}
			var rf client.RedriveFilter
			for _, spec := range filters {
				if err := parseFilter(spec, &rf); err != nil {
					return err
				}
			}
			if rf.ErrorCode != "" {
				return usagef("--filter errorCode is for a re-drive")
			}
			if strings.TrimSpace(*reason) == "" {
				return usagef("--reason is required")
			}
			if *rate < 0 {
				return usagef("--rate %d: must be positive", *rate)
			}
			req := client.BulkPauseRequest{Filter: client.BulkFilter{PipelineID: rf.PipelineID, Statuses: rf.Statuses,
				CreatedAfter: rf.CreatedAfter, CreatedBefore: rf.CreatedBefore}, Reason: *reason, RatePerSecond: *rate, DryRun: *dryRun, IdempotencyKey: *key}
			if req.IdempotencyKey == "" {
				req.IdempotencyKey = client.NewIdempotencyKey()
			}
			start := c.StartPauses
			if !pause {
				start = c.StartResumes
			}
			j, err := start(ctx, req)
			if err != nil {
				if outcomeUnknown(err) {
					fmt.Fprintf(s.env.Stderr, "qasync %s: the bulk %s may have started; to reach its job rather than start another, run the command again with --key %s\n",
						s.cmd, verb, visible(req.IdempotencyKey))
				}
				return err
			}
			if s.json() && !*wait {
				writeJSON(s.env.Stdout, j)
				return nil
			}
			if !s.json() {
				fields(s.env.Stdout, verb, j.JobID, "matched", strconv.Itoa(j.Matched), "dry run", strconv.FormatBool(req.DryRun),
					"duplicate", strconv.FormatBool(j.Duplicate))
			}
			if !*wait {
				return nil
			}
			return s.bulkPauseProgress(ctx, c, pause, j.JobID, true)
		}
		if *key != "" {
			return usagef("--key is for a bulk %s (--filter)", verb)
		}
		if err := wantArgs(args, "ID"); err != nil {
			return usagef("%v (or --filter F, or --status JOB_ID)", err)
		}
		if strings.TrimSpace(*reason) == "" {
			return usagef("--reason is required")
		}
		req := client.PauseRequest{Reason: *reason}
		if *expected != 0 {
			req.ExpectedVersion = expected
		}
		call := c.Pause
		if !pause {
			call = c.Resume
		}
		e, err := call(ctx, args[0], req)
		if err != nil {
			return err
		}
		s.printExecution(e)
		return nil
	}
}

// bulkPauseProgress prints a bulk pause's (resume's) progress, once or
// (follow) until it is done.
func (s *session) bulkPauseProgress(ctx context.Context, c *client.Client, pause bool, id string, follow bool) error {
	get := c.PauseProgress
	if !pause {
		get = c.ResumeProgress
	}
	wait := s.pollMin()
	for {
		p, err := get(ctx, id)
		if err != nil {
			return err
		}
		if !follow || p.Done {
			if s.json() {
				writeJSON(s.env.Stdout, p)
			} else {
				fields(s.env.Stdout, p.Action, p.JobID, "matched", strconv.Itoa(p.Matched), "applied", strconv.Itoa(p.Applied),
					"skipped", strconv.Itoa(p.Skipped), "failed", strconv.Itoa(p.Failed), "done", strconv.FormatBool(p.Done),
					"dry run", strconv.FormatBool(p.DryRun))
			}
			return nil
		}
		if !s.json() {
			fmt.Fprintf(s.env.Stderr, "applied %d, skipped %d, failed %d of %d\n", p.Applied, p.Skipped, p.Failed, p.Matched)
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(wait*2, s.pollMax())
	}
}

func init() {
	for i := range pauseCommands {
		commands = append(commands, &pauseCommands[i])
	}
	operatorCommands = append(operatorCommands, "pause", "resume")
}
