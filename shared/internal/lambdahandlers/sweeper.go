package lambdahandlers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/engine"
)

// MaxSweeps caps the sweeps of one sweeper invocation.
const MaxSweeps = 50

// DefaultSweepMargin is the margin the sweeper function keeps before its
// deadline: it starts another sweep only with more time left than this.
const DefaultSweepMargin = 10 * time.Second

// SweepReport is what one sweeper invocation did: the sums of its sweeps'
// engine.SweepResult counts.
type SweepReport struct {
	// Sweeps is how many times SweepOnce ran.
	Sweeps int `json:"sweeps"`
	// Due is how many due rows the sweeps found.
	Due int `json:"due"`
	// Redispatched counts work items sent again.
	Redispatched int `json:"redispatched"`
	// DeadLettersPublished counts pending dead letters published.
	DeadLettersPublished int `json:"deadLettersPublished"`
	// AwaitsTimedOut counts awaits whose timeout the sweeps enforced.
	AwaitsTimedOut int `json:"awaitsTimedOut"`
	// Cancelled counts cancelled executions whose worker had died, ended
	// CANCELLED by the sweeps.
	Cancelled int `json:"cancelled"`
	// Rescheduled counts healthy rows whose next look was pushed forward.
	Rescheduled int `json:"rescheduled"`
	// Failed counts rows the sweeps could not handle.
	Failed int `json:"failed"`
	// More is the last sweep's More: rows may still be due (the invocation
	// stopped for time or at MaxSweeps; the next schedule continues).
	More bool `json:"more"`
	// RedriveJobs counts the bulk re-drive jobs the invocation advanced
	// after its sweeps.
	RedriveJobs int `json:"redriveJobs"`
	// SchedulesStarted and SchedulesSkipped count the schedules' fire
	// times the invocation started and counted skipped
	// (Runtime.DriveSchedules, after the sweeps).
	SchedulesStarted int `json:"schedulesStarted"`
	SchedulesSkipped int `json:"schedulesSkipped"`
}

// redriveSliceWithoutDeadline is how long an invocation without a
// deadline (a test) advances bulk re-drive jobs.
const redriveSliceWithoutDeadline = 10 * time.Second

// Sweeper is the sweeper function's handler for its EventBridge schedule
// (the event's content is not used). It runs Runtime.Sweep, again while
// the sweep reports More and the deadline leaves more than margin, each
// sweep skipping the rows the invocation already handled,
// at most MaxSweeps times (the first sweep always runs), and returns and
// logs (event "sweeper_completed") the totals. With the time left beyond
// margin it then passes over the schedules (Runtime.DriveSchedules: the
// due ones start their executions) and advances the active bulk re-drive jobs
// (Runtime.DriveRedrives): the sweeper is their driver, so a job goes on
// at every schedule and resumes after an invocation that timed out. A
// SweepOnce error is
// logged ("sweep_failed") and returned, so that the invocation counts as
// failed (Errors metric, asynchronous retry); the next schedule sweeps
// anyway.
func Sweeper(rt *engine.Runtime, margin time.Duration, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (SweepReport, error) {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, _ events.EventBridgeEvent) (SweepReport, error) {
		start := time.Now()
		var rep SweepReport
		stop := "drained"
		pass := &engine.SweepPass{} // page on: never the same row twice per invocation
		for {
			res, err := rt.Sweep(ctx, pass)
			if err != nil {
				log.LogAttrs(ctx, slog.LevelWarn, "sweep_failed", slog.String("event", "sweep_failed"),
					slog.Int("sweeps", rep.Sweeps), slog.String("error", err.Error()))
				return rep, fmt.Errorf("lambdahandlers: sweep %d: %w", rep.Sweeps+1, err)
			}
			rep.Sweeps++
			rep.Due += res.Due
			rep.Redispatched += res.Redispatched
			rep.DeadLettersPublished += res.DeadLettersPublished
			rep.AwaitsTimedOut += res.AwaitsTimedOut
			rep.Cancelled += res.Cancelled
			rep.Rescheduled += res.Rescheduled
			rep.Failed += res.Failed
			rep.More = res.More
			if !res.More {
				break
			}
			if rep.Sweeps >= MaxSweeps {
				stop = "max_sweeps"
				break
			}
			if left, ok := timeLeft(ctx); ok && left <= margin {
				stop = "time"
				break
			}
		}
		// The schedules' pass: a schedule's precision is this function's
		// schedule (a minute by default).
		sch, err := rt.DriveSchedules(ctx)
		if err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "schedule_drive_failed", slog.String("event", "schedule_drive_failed"), slog.String("error", err.Error()))
		}
		rep.SchedulesStarted, rep.SchedulesSkipped = sch.Started, sch.Skipped
		slice := redriveSliceWithoutDeadline
		if left, ok := timeLeft(ctx); ok {
			slice = left - margin
		}
		if slice > 0 {
			held, err := rt.DriveRedrives(ctx, slice)
			if err != nil {
				log.LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_drive_failed", slog.String("event", "bulk_redrive_drive_failed"), slog.String("error", err.Error()))
			}
			rep.RedriveJobs = held
		}
		level := slog.LevelInfo
		if rep.Failed > 0 {
			level = slog.LevelWarn
		}
		log.LogAttrs(ctx, level, "sweeper_completed", slog.String("event", "sweeper_completed"),
			slog.Int("sweeps", rep.Sweeps), slog.Int("due", rep.Due), slog.Int("redispatched", rep.Redispatched),
			slog.Int("dead_letters_published", rep.DeadLettersPublished), slog.Int("awaits_timed_out", rep.AwaitsTimedOut),
			slog.Int("rescheduled", rep.Rescheduled), slog.Int("cancelled", rep.Cancelled), slog.Int("failed", rep.Failed),
			slog.Int("redrive_jobs", rep.RedriveJobs), slog.Int("schedules_started", rep.SchedulesStarted), slog.Int("schedules_skipped", rep.SchedulesSkipped),
			slog.Bool("more", rep.More), slog.String("stopped", stop),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
		return rep, nil
	}
}
