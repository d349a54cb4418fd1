package engine

// Schedules: a schedule starts executions of a pipeline at the fire
// times of a cron spec or an interval (package schedule is the policy).
//
// Design. A schedule is a record of the state store's job store (like a
// bulk re-drive: on DynamoDB an item of the execution table outside both
// indexes), so it costs nothing on a step's path. Its id begins with
// ScheduleIDPrefix, which is how the bulk re-drive driver tells it apart.
// A schedule stays in the job store's active set from its creation to
// its deletion (paused ones too, so that the list shows them): the
// sweeper, its driver (DriveSchedules after each sweep; RunSchedules in
// qasync serve), reads the active set once a pass and acts on the
// schedules that are due. There is no due-time index: a pass reads every
// schedule's record, which is why a deployment holds at most
// MaxSchedules of them (docs/schedules.md states the cost).
//
// A pass over a due schedule: it reads the previous run (one Get) unless
// the overlap policy is ALLOW_ALL, decides (schedule.Decide), claims the
// fire times with one version-guarded update of the record (the next
// fire time moves on, the started ones are noted in flight), submits an
// execution per started fire time under the fire's idempotency key
// (schedule.IdempotencyKey), and clears the in-flight note with a second
// update. Two drivers never both advance a schedule (the version guard),
// and a fire time submitted twice (a driver that died between its claim
// and its submits, re-done by the next pass; or a retried submit) is one
// execution.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/internal/schedule"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// Schedule limits.
const (
	// ScheduleIDPrefix begins every schedule's id (and no bulk re-drive's).
	ScheduleIDPrefix = "sch-"
	// MaxSchedules bounds the schedules of a deployment (every tenant's):
	// every driver pass reads all of their records.
	MaxSchedules = 1000
	// MaxSchedulesPerTenant bounds one tenant's schedules.
	MaxSchedulesPerTenant = 100
	// MaxScheduleInput bounds a schedule's input (JSON), kept in its record.
	MaxScheduleInput = 8 << 10
	// DefaultScheduleCatchup is the catch-up limit of a schedule that
	// names none: one missed fire time (a sweep that came a little late
	// then still starts both).
	DefaultScheduleCatchup = 1
	// scheduleRecordTTL is the expiry of a schedule's record, renewed by
	// every write of it.
	scheduleRecordTTL = 10 * 365 * 24 * time.Hour
	// scheduleDeletedTTL keeps a deleted schedule's record (inactive,
	// read as not found) until it expires.
	scheduleDeletedTTL = time.Hour
	// scheduleInFlightGrace is how long a pass leaves a fire another
	// driver claimed to that driver's submits before it submits it again.
	scheduleInFlightGrace = 30 * time.Second
	// scheduleTries bounds the version-guarded updates one call retries.
	scheduleTries = 3
)

// Errors of schedules (test with errors.Is).
var (
	// ErrSchedulesUnavailable: the runtime has no job store.
	ErrSchedulesUnavailable = errors.New("engine: schedules need a job store (the state store keeps none)")
	// ErrInvalidSchedule: a field of a schedule is not acceptable
	// (a *ScheduleFieldError names it).
	ErrInvalidSchedule = errors.New("engine: invalid schedule")
	// ErrTooManySchedules: the tenant or the deployment holds its most.
	ErrTooManySchedules = errors.New("engine: too many schedules")
)

// ScheduleFieldError is an ErrInvalidSchedule naming the field at fault.
type ScheduleFieldError struct {
	Field, Reason string
}

func (e *ScheduleFieldError) Error() string {
	return fmt.Sprintf("engine: invalid schedule: %s: %s", e.Field, e.Reason)
}

// Unwrap makes the error match ErrInvalidSchedule.
func (e *ScheduleFieldError) Unwrap() error { return ErrInvalidSchedule }

// ScheduleSpec is what a schedule is created with.
type ScheduleSpec struct {
	PipelineID string
	// Spec is a 5-field cron expression or a descriptor (@hourly,
	// @every 15m).
	Spec string
	// TimeZone is an IANA time zone ("" is UTC).
	TimeZone string
	// Overlap is the overlap policy ("" is schedule.Skip).
	Overlap schedule.Overlap
	// CatchupLimit is how many missed fire times are started after an
	// outage besides the newest (nil: DefaultScheduleCatchup).
	CatchupLimit *int
	// Input is the JSON object every execution gets (nil: {}), at most
	// MaxScheduleInput bytes.
	Input json.RawMessage
	// Paused creates the schedule paused.
	Paused bool
}

// Schedule is a schedule and its progress.
type Schedule struct {
	ID, TenantID, PipelineID string
	Spec, TimeZone           string
	Overlap                  schedule.Overlap
	CatchupLimit             int
	Input                    json.RawMessage
	Paused                   bool
	// NextFireAt is the first fire time not handled yet (zero: the spec
	// fires no more).
	NextFireAt time.Time
	// LastFireAt is the fire time of the newest execution started, and
	// LastExecutionID its execution (the id's slot: a Get finds it).
	LastFireAt      time.Time
	LastExecutionID string
	// PendingFireAt is the fire time BUFFER_ONE keeps for later (zero:
	// none).
	PendingFireAt time.Time
	// Fired counts the fire times started, Skipped those counted skipped
	// by the overlap policy or the catch-up limit.
	Fired, Skipped       int
	CreatedAt, UpdatedAt time.Time
	Version              int64
}

// scheduleState is a schedule's record (store.Job.State).
type scheduleState struct {
	Kind         string           `json:"kind"`
	PipelineID   string           `json:"pipelineId"`
	Spec         string           `json:"spec"`
	TimeZone     string           `json:"timeZone"`
	Overlap      schedule.Overlap `json:"overlap"`
	CatchupLimit int              `json:"catchupLimit"`
	Input        json.RawMessage  `json:"input,omitempty"`
	Paused       bool             `json:"paused,omitempty"`
	Next         time.Time        `json:"next"`
	LastFire     time.Time        `json:"lastFire,omitzero"`
	LastExec     string           `json:"lastExec,omitempty"`
	Pending      time.Time        `json:"pending,omitzero"`
	// InFlight are the fire times the last claim started, until their
	// submits are done.
	InFlight []time.Time `json:"inFlight,omitempty"`
	Fired    int         `json:"fired"`
	Skipped  int         `json:"skipped"`
}

// IsScheduleJob reports whether a job store record is a schedule's.
func IsScheduleJob(key store.JobKey) bool { return strings.HasPrefix(key.ID, ScheduleIDPrefix) }

func decodeSchedule(j store.Job) (Schedule, scheduleState, error) {
	var st scheduleState
	if err := json.Unmarshal(j.State, &st); err != nil || st.Kind != "schedule" {
		return Schedule{}, st, fmt.Errorf("engine: schedule %s: unreadable record", j.Key)
	}
	return Schedule{ID: j.Key.ID, TenantID: j.Key.TenantID, PipelineID: st.PipelineID, Spec: st.Spec, TimeZone: st.TimeZone,
		Overlap: st.Overlap, CatchupLimit: st.CatchupLimit, Input: st.Input, Paused: st.Paused, NextFireAt: st.Next,
		LastFireAt: st.LastFire, LastExecutionID: st.LastExec, PendingFireAt: st.Pending, Fired: st.Fired, Skipped: st.Skipped,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, Version: j.Version}, st, nil
}

// validateSchedule checks spec and returns its parsed cron and record.
func (r *Runtime) validateSchedule(spec ScheduleSpec) (*schedule.Cron, scheduleState, error) {
	st := scheduleState{Kind: "schedule", PipelineID: spec.PipelineID, Spec: strings.TrimSpace(spec.Spec), TimeZone: spec.TimeZone,
		Overlap: spec.Overlap, CatchupLimit: DefaultScheduleCatchup, Paused: spec.Paused}
	if _, ok := r.deps.Registry.Get(spec.PipelineID); !ok {
		return nil, st, &ScheduleFieldError{"pipelineId", fmt.Sprintf("no pipeline %q is registered", spec.PipelineID)}
	}
	if st.TimeZone == "" {
		st.TimeZone = "UTC"
	}
	if st.Overlap == "" {
		st.Overlap = schedule.Skip
	}
	if !st.Overlap.Valid() {
		return nil, st, &ScheduleFieldError{"overlap", fmt.Sprintf("must be %s, %s or %s", schedule.Skip, schedule.BufferOne, schedule.AllowAll)}
	}
	if spec.CatchupLimit != nil {
		if *spec.CatchupLimit < 0 || *spec.CatchupLimit > schedule.MaxCatchup {
			return nil, st, &ScheduleFieldError{"catchupLimit", fmt.Sprintf("must be from 0 to %d", schedule.MaxCatchup)}
		}
		st.CatchupLimit = *spec.CatchupLimit
	}
	if _, err := time.LoadLocation(st.TimeZone); err != nil || st.TimeZone == "Local" {
		return nil, st, &ScheduleFieldError{"timeZone", fmt.Sprintf("%q is not an IANA time zone", st.TimeZone)}
	}
	c, err := schedule.Parse(st.Spec, st.TimeZone)
	if err != nil {
		return nil, st, &ScheduleFieldError{"spec", strings.TrimPrefix(err.Error(), schedule.ErrInvalid.Error()+": ")}
	}
	in := spec.Input
	if len(in) == 0 {
		in = json.RawMessage("{}")
	}
	if len(in) > MaxScheduleInput || !json.Valid(in) || !bytes.HasPrefix(bytes.TrimSpace(in), []byte("{")) {
		return nil, st, &ScheduleFieldError{"input", fmt.Sprintf("must be a JSON object of at most %d bytes", MaxScheduleInput)}
	}
	st.Input = in
	return c, st, nil
}

// CreateSchedule creates a schedule of tenant's: its first fire time is
// the spec's first at or after now.
func (r *Runtime) CreateSchedule(ctx context.Context, tenant string, spec ScheduleSpec) (Schedule, error) {
	if r.deps.Jobs == nil {
		return Schedule{}, ErrSchedulesUnavailable
	}
	c, st, err := r.validateSchedule(spec)
	if err != nil {
		return Schedule{}, err
	}
	all, err := r.activeSchedules(ctx)
	if err != nil {
		return Schedule{}, err
	}
	mine := 0
	for _, j := range all {
		if j.Key.TenantID == tenant {
			mine++
		}
	}
	if len(all) >= MaxSchedules || mine >= MaxSchedulesPerTenant {
		return Schedule{}, fmt.Errorf("%w: a tenant holds at most %d and a deployment %d", ErrTooManySchedules, MaxSchedulesPerTenant, MaxSchedules)
	}
	now := r.deps.Clock.Now()
	st.Next = c.First(now)
	var b [12]byte
	r.random(b[:])
	rec := store.Job{Key: store.JobKey{TenantID: tenant, ID: ScheduleIDPrefix + hex.EncodeToString(b[:])}, Active: true,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(scheduleRecordTTL)}
	if rec.State, err = json.Marshal(&st); err != nil {
		return Schedule{}, err
	}
	if err := r.deps.Jobs.CreateJob(ctx, rec); err != nil {
		return Schedule{}, err
	}
	rec.Version = 1
	r.deps.Logger.LogAttrs(ctx, slog.LevelInfo, "schedule_created", slog.String("event", "schedule_created"),
		slog.String("tenant", tenant), slog.String("schedule_id", rec.Key.ID), slog.String("pipeline", st.PipelineID),
		slog.String("spec", st.Spec), slog.String("time_zone", st.TimeZone), slog.String("overlap", string(st.Overlap)))
	s, _, err := decodeSchedule(rec)
	return s, err
}

// activeSchedules reads the job store's active set and keeps the
// schedules, by tenant and id: a pass drives them in one order whatever
// order the store lists them in (the memory store's is a map's), so that
// a simulation's seed repeats its run.
func (r *Runtime) activeSchedules(ctx context.Context) ([]store.Job, error) {
	jobs, err := r.deps.Jobs.ActiveJobs(ctx)
	if err != nil {
		return nil, err
	}
	jobs = slices.DeleteFunc(jobs, func(j store.Job) bool { return !IsScheduleJob(j.Key) })
	slices.SortFunc(jobs, func(a, b store.Job) int {
		return cmp.Or(strings.Compare(a.Key.TenantID, b.Key.TenantID), strings.Compare(a.Key.ID, b.Key.ID))
	})
	return jobs, nil
}

// GetSchedule reads one of tenant's schedules (store.ErrNotFound when it
// has none with that id, or it was deleted).
func (r *Runtime) GetSchedule(ctx context.Context, tenant, id string) (Schedule, error) {
	_, s, err := r.getSchedule(ctx, tenant, id)
	return s, err
}

func (r *Runtime) getSchedule(ctx context.Context, tenant, id string) (store.Job, Schedule, error) {
	if r.deps.Jobs == nil {
		return store.Job{}, Schedule{}, ErrSchedulesUnavailable
	}
	if !IsScheduleJob(store.JobKey{ID: id}) {
		return store.Job{}, Schedule{}, store.ErrNotFound
	}
	j, err := r.deps.Jobs.GetJob(ctx, store.JobKey{TenantID: tenant, ID: id})
	if err != nil {
		return store.Job{}, Schedule{}, err
	}
	if !j.Active {
		return store.Job{}, Schedule{}, store.ErrNotFound // deleted
	}
	s, _, err := decodeSchedule(j)
	return j, s, err
}

// ListSchedules returns tenant's schedules, by id.
func (r *Runtime) ListSchedules(ctx context.Context, tenant string) ([]Schedule, error) {
	if r.deps.Jobs == nil {
		return nil, ErrSchedulesUnavailable
	}
	jobs, err := r.activeSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := []Schedule{}
	for _, j := range jobs {
		if j.Key.TenantID != tenant {
			continue
		}
		if s, _, err := decodeSchedule(j); err == nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Schedule) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// PauseSchedule pauses a schedule: it fires no more until resumed, and
// the fire times meanwhile are not caught up. A fire time BUFFER_ONE kept
// for later will not start either: the pause counts it skipped.
func (r *Runtime) PauseSchedule(ctx context.Context, tenant, id string) (Schedule, error) {
	return r.changeSchedule(ctx, tenant, id, "schedule_paused", func(st *scheduleState, _ *schedule.Cron, _ time.Time) bool {
		st.Paused = true
		st.dropPending()
		return true
	})
}

// dropPending gives up the fire time BUFFER_ONE kept (a pause): it fell
// while the schedule was active and will not start, so it is counted
// skipped, as the overlap policy counts the kept times it replaces.
// Without the count a fire time had neither an execution nor a skip.
func (st *scheduleState) dropPending() {
	if !st.Pending.IsZero() {
		st.Skipped++
		st.Pending = time.Time{}
	}
}

// ResumeSchedule resumes a paused schedule: its next fire time is the
// spec's first at or after now (a resumed schedule does not catch up the
// time it was paused). Resuming one that runs changes nothing.
func (r *Runtime) ResumeSchedule(ctx context.Context, tenant, id string) (Schedule, error) {
	return r.changeSchedule(ctx, tenant, id, "schedule_resumed", func(st *scheduleState, c *schedule.Cron, now time.Time) bool {
		if !st.Paused {
			return true
		}
		st.Paused = false
		st.dropPending() // a record paused before the pause counted it
		st.Next = c.First(now)
		return true
	})
}

// DeleteSchedule deletes a schedule: it leaves the active set and fires
// no more; the executions it started are not touched.
func (r *Runtime) DeleteSchedule(ctx context.Context, tenant, id string) error {
	_, err := r.changeSchedule(ctx, tenant, id, "schedule_deleted", func(*scheduleState, *schedule.Cron, time.Time) bool { return false })
	return err
}

// changeSchedule applies change to the schedule's record under its
// version (re-read and retried on a conflict); change returns false to
// delete it.
func (r *Runtime) changeSchedule(ctx context.Context, tenant, id, event string, change func(*scheduleState, *schedule.Cron, time.Time) bool) (Schedule, error) {
	for try := 1; ; try++ {
		j, _, err := r.getSchedule(ctx, tenant, id)
		if err != nil {
			return Schedule{}, err
		}
		_, st, err := decodeSchedule(j)
		if err != nil {
			return Schedule{}, err
		}
		c, err := schedule.Parse(st.Spec, st.TimeZone)
		if err != nil {
			return Schedule{}, fmt.Errorf("engine: schedule %s: %w", j.Key, err)
		}
		now := r.deps.Clock.Now()
		j.Active = change(&st, c, now)
		j.UpdatedAt = now
		j.ExpiresAt = now.Add(scheduleRecordTTL)
		if !j.Active {
			j.ExpiresAt = now.Add(scheduleDeletedTTL)
		}
		if j.State, err = json.Marshal(&st); err != nil {
			return Schedule{}, err
		}
		got, err := r.deps.Jobs.UpdateJob(ctx, j, j.Version)
		if errors.Is(err, store.ErrConflict) && try < scheduleTries {
			continue
		}
		if err != nil {
			return Schedule{}, err
		}
		r.deps.Logger.LogAttrs(ctx, slog.LevelInfo, event, slog.String("event", event),
			slog.String("tenant", tenant), slog.String("schedule_id", id))
		s, _, err := decodeSchedule(got)
		return s, err
	}
}

// ScheduleReport counts what one DriveSchedules pass did.
type ScheduleReport struct {
	// Schedules is how many schedules the pass read; Due how many of
	// them it acted on.
	Schedules, Due int
	// Started counts the fire times started (executions submitted),
	// Skipped those counted skipped, Failed the schedules the pass could
	// not advance (a backend failure; the next pass tries again).
	Started, Skipped, Failed int
}

// DriveSchedules is one driver pass: every active schedule that is due
// at the clock's now is advanced (see the file's comment). Schedules that
// are not due cost no write.
func (r *Runtime) DriveSchedules(ctx context.Context) (ScheduleReport, error) {
	var rep ScheduleReport
	if r.deps.Jobs == nil {
		return rep, nil
	}
	jobs, err := r.activeSchedules(ctx)
	if err != nil {
		return rep, err
	}
	rep.Schedules = len(jobs)
	for _, j := range jobs {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		started, skipped, acted, err := r.driveSchedule(ctx, j)
		if acted {
			rep.Due++
		}
		rep.Started += started
		rep.Skipped += skipped
		if err != nil {
			rep.Failed++
			r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "schedule_drive_failed", slog.String("event", "schedule_drive_failed"),
				slog.String("tenant", j.Key.TenantID), slog.String("schedule_id", j.Key.ID), slog.String("error", err.Error()))
		}
	}
	return rep, nil
}

// scheduleIdlePoll is the shortest wait of RunSchedules between passes
// (each pass reads every schedule's record).
const scheduleIdlePoll = 5 * time.Second

// RunSchedules calls DriveSchedules every interval (at least
// scheduleIdlePoll) until ctx ends: the driver of qasync serve, where a
// schedule's precision is that interval.
func (r *Runtime) RunSchedules(ctx context.Context, interval time.Duration) {
	interval = max(interval, scheduleIdlePoll)
	for ctx.Err() == nil {
		if _, err := r.DriveSchedules(ctx); err != nil && ctx.Err() == nil {
			r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "schedule_drive_failed", slog.String("event", "schedule_drive_failed"), slog.String("error", err.Error()))
		}
		if sleepCtx(ctx, interval) != nil {
			return
		}
	}
}

// driveSchedule advances one schedule as of now: acted reports whether
// it was due (or had fires in flight).
func (r *Runtime) driveSchedule(ctx context.Context, j store.Job) (started, skipped int, acted bool, err error) {
	s, st, err := decodeSchedule(j)
	if err != nil {
		return 0, 0, false, err
	}
	now := r.deps.Clock.Now()
	if len(st.InFlight) > 0 {
		if now.Sub(j.UpdatedAt) < scheduleInFlightGrace {
			return 0, 0, false, nil // the claiming driver is submitting them
		}
		// That driver stopped between its claim and its submits (or
		// before clearing the note): submit again (the same keys) and
		// clear.
		if err := r.submitFires(ctx, s, st.InFlight); err != nil {
			return 0, 0, true, err
		}
		st.InFlight = nil
		if j, err = r.putSchedule(ctx, j, &st, now); err != nil {
			return 0, 0, true, ignoreConflict(err)
		}
	}
	if st.Paused || st.Next.IsZero() {
		return 0, 0, false, nil
	}
	c, err := schedule.Parse(st.Spec, st.TimeZone)
	if err != nil {
		return 0, 0, false, err
	}
	due, late, after := c.DueTimes(st.Next, now, st.CatchupLimit)
	if len(due) == 0 && st.Pending.IsZero() {
		return 0, 0, false, nil
	}
	running := false
	if st.Overlap != schedule.AllowAll && st.LastExec != "" {
		prev, err := r.deps.Store.Get(ctx, store.Key{TenantID: s.TenantID, ExecutionID: st.LastExec})
		switch {
		case err == nil:
			running = !prev.Status.Terminal()
		case !errors.Is(err, store.ErrNotFound):
			return 0, 0, true, err
		}
	}
	d := schedule.Decide(st.Overlap, due, st.Pending, running)
	if len(due) == 0 && len(d.Start) == 0 {
		return 0, 0, false, nil // a buffered fire waits for the previous run
	}
	st.Next, st.Pending = after, d.Pending
	st.Skipped += late + d.Skipped
	st.Fired += len(d.Start)
	st.InFlight = d.Start
	if len(d.Start) > 0 {
		newest := d.Start[len(d.Start)-1]
		st.LastFire = newest
		st.LastExec = ExecutionSlot(s.TenantID, schedule.IdempotencyKey(s.ID, newest))
	}
	// The claim: a driver that lost it (another advanced the schedule)
	// does nothing more.
	if j, err = r.putSchedule(ctx, j, &st, now); err != nil {
		return 0, 0, true, ignoreConflict(err)
	}
	if late+d.Skipped > 0 {
		r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "schedule_fires_skipped", slog.String("event", "schedule_fires_skipped"),
			slog.String("tenant", s.TenantID), slog.String("schedule_id", s.ID), slog.Int("catchup_skipped", late),
			slog.Int("overlap_skipped", d.Skipped), slog.Bool("previous_running", running))
	}
	if len(d.Start) == 0 {
		return 0, late + d.Skipped, true, nil
	}
	if err := r.submitFires(ctx, s, d.Start); err != nil {
		return 0, late + d.Skipped, true, err // the next pass submits them after the grace
	}
	st.InFlight = nil
	if _, err := r.putSchedule(ctx, j, &st, r.deps.Clock.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
		return len(d.Start), late + d.Skipped, true, err
	}
	return len(d.Start), late + d.Skipped, true, nil
}

// ignoreConflict turns a lost version race into no error: another driver
// advanced the schedule.
func ignoreConflict(err error) error {
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// putSchedule writes st into j's record under j's version.
func (r *Runtime) putSchedule(ctx context.Context, j store.Job, st *scheduleState, now time.Time) (store.Job, error) {
	var err error
	if j.State, err = json.Marshal(st); err != nil {
		return j, err
	}
	j.UpdatedAt, j.ExpiresAt = now, now.Add(scheduleRecordTTL)
	return r.deps.Jobs.UpdateJob(ctx, j, j.Version)
}

// submitFires submits an execution per fire time, each under its fire's
// idempotency key, oldest first.
func (r *Runtime) submitFires(ctx context.Context, s Schedule, fires []time.Time) error {
	in, err := payload.RawJSON(s.Input)
	if err != nil {
		return fmt.Errorf("engine: schedule %s: input: %w", s.ID, err)
	}
	for _, f := range fires {
		res, err := r.Submit(ctx, SubmitRequest{TenantID: s.TenantID, PipelineID: s.PipelineID,
			IdempotencyKey: schedule.IdempotencyKey(s.ID, f), Input: in, scheduled: true})
		if errors.Is(err, ErrPipelineNotFound) || errors.Is(err, ErrInvalidInput) || errors.Is(err, store.ErrKeyMismatch) {
			// Refused for good (the pipeline went away, or its first
			// step no longer takes the input): the fire is dropped, not
			// retried at every pass.
			r.deps.Logger.LogAttrs(ctx, slog.LevelError, "schedule_fire_refused", slog.String("event", "schedule_fire_refused"),
				slog.String("tenant", s.TenantID), slog.String("schedule_id", s.ID), slog.String("fire_time", f.UTC().Format(time.RFC3339)),
				slog.String("error", err.Error()))
			continue
		}
		if err != nil {
			return fmt.Errorf("engine: schedule %s: fire %s: %w", s.ID, f.UTC().Format(time.RFC3339), err)
		}
		r.deps.Logger.LogAttrs(ctx, slog.LevelInfo, "schedule_fired", slog.String("event", "schedule_fired"),
			slog.String("tenant", s.TenantID), slog.String("schedule_id", s.ID), slog.String("fire_time", f.UTC().Format(time.RFC3339)),
			slog.String("execution_id", res.Execution.ExecutionID), slog.Bool("duplicate", res.Duplicate))
	}
	return nil
}
