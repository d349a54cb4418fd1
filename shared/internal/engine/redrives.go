package engine

// Bulk re-drive: a durable job that re-drives every execution a filter
// matched, at a bounded rate, each with the single re-drive's audit
// record.
//
// Design. A job is a record of the state store's job store (on DynamoDB
// an item of the execution table outside both indexes), so it costs no
// table and nothing on a step's path. It runs in two phases:
//
//  1. Scan: the tenant's list (store.Lister) is paged with the filter and
//     the matching ids are written to numbered pages beside the record,
//     so that "matched" is a fixed set and every member is handled once.
//     StartRedrives scans within a few seconds; a larger scan goes on in
//     the driver.
//  2. Re-drive: the pages are walked at ratePerSecond; each execution is
//     re-driven as POST .../redrive does (RedriveWith, expected version
//     the one just read), its audit note naming the job id and reason, or
//     skipped when it no longer matches or cannot be re-driven.
//
// Durability. Whoever advances a job holds its lease, a field of the
// record written with a version-guarded update, and checkpoints its
// position and counters at least every few seconds (extending the
// lease). The driver is the sweeper: RunRedrives beside RunSweeper in
// qasync serve, and the sweeper function after its sweeps in Lambda, with
// the invocation's time left. A process that stops (a restart, a Lambda
// timeout) loses at most what it did since its last checkpoint; once its
// lease lapses the next driver resumes there. Re-doing that stretch is
// safe: an execution whose audit note already names this job was
// re-driven by it and is counted as such, without a second re-drive.
// Rather than a job execution of its own (a pipeline step looping over
// pages), the sweeper drives jobs: it already runs on a schedule in every
// deployment, has the grants a re-drive needs, and a job then never
// competes with user work for the work queue or the workers.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// Bulk re-drive limits.
const (
	// DefaultRedriveRate is the re-drives per second of a job that names
	// no rate.
	DefaultRedriveRate = 10
	// MaxRedriveRate is the highest rate a job may ask for.
	MaxRedriveRate = 1000
	// redriveStartBudget is how long StartRedrives scans before it
	// answers (a longer scan goes on in the driver).
	redriveStartBudget = 5 * time.Second
	// redriveLease is how long a driver's hold on a job lasts without a
	// checkpoint; a driver checkpoints at least every redriveCheckpoint.
	redriveLease      = time.Minute
	redriveCheckpoint = 5 * time.Second
	// redriveSlice is how long RunRedrives advances the jobs in one go.
	redriveSlice = 20 * time.Second
	// redriveTries bounds the reads and re-drives of one execution that
	// lose to concurrent changes or fail transiently.
	redriveTries = 3
)

// Errors of bulk re-drive (test with errors.Is).
var (
	// ErrRedrivesUnavailable: the runtime has no job store.
	ErrRedrivesUnavailable = errors.New("engine: bulk re-drive needs a job store (the state store keeps none)")
	// ErrInvalidRedrive: the bulk re-drive's filter, reason or rate is not
	// acceptable (the message says which).
	ErrInvalidRedrive = errors.New("engine: invalid bulk re-drive")
)

// RedriveFilter selects the executions of a bulk re-drive.
type RedriveFilter struct {
	// PipelineID keeps one pipeline's executions ("" for all).
	PipelineID string
	// Statuses: DLQ and FAILED, the statuses a re-drive takes without
	// confirmation (empty: both).
	Statuses []store.Status
	// ErrorCode keeps executions whose last error has this code.
	ErrorCode string
	// CreatedAfter and CreatedBefore bound the creation time (exclusive;
	// zero for none). A job never takes executions created after it
	// started.
	CreatedAfter, CreatedBefore time.Time
}

// matches reports whether e passes the filter.
func (f RedriveFilter) matches(e *store.Execution) bool {
	if !slices.Contains(f.Statuses, e.Status) || (f.PipelineID != "" && e.PipelineID != f.PipelineID) {
		return false
	}
	return f.ErrorCode == "" || (e.Error != nil && e.Error.Code == f.ErrorCode)
}

// RedriveJob is a bulk re-drive and its progress.
type RedriveJob struct {
	ID string
	// Matched is how many executions the filter matched (final once the
	// scan is done; it grows while a large scan goes on).
	Matched int
	// Redriven, Skipped (no longer matching, or not re-drivable when its
	// turn came) and Failed (a backend failure) count the executions
	// handled so far.
	Redriven, Skipped, Failed int
	// Done: every matched execution was handled (a dry run: the scan ended).
	Done          bool
	DryRun        bool
	Reason        string
	RatePerSecond int
	Filter        RedriveFilter
	CreatedAt     time.Time
	// Duplicate: the start's idempotency key already named this job, so
	// the start started nothing (RedrivesOptions.IdempotencyKey).
	Duplicate bool
	// Action is what the job does to each execution: BulkRedrive (""),
	// BulkPause or BulkResume (pause.go).
	Action BulkAction
}

// RedrivesOptions are the inputs of a bulk re-drive (StartRedrivesWith).
type RedrivesOptions struct {
	// Filter selects the executions.
	Filter RedriveFilter
	// Reason goes into every re-driven execution's audit note (required).
	Reason string
	// RatePerSecond bounds the re-drives a second (0: DefaultRedriveRate).
	RatePerSecond int
	// DryRun only counts the matching executions.
	DryRun bool
	// Action is what the job does: BulkRedrive ("", the default),
	// BulkPause or BulkResume.
	Action BulkAction
	// IdempotencyKey, when set, makes the start safe to retry: the job id
	// derives from the tenant and the key, so a start with a key that
	// already named a live job returns that job (Duplicate) and starts
	// nothing, and one whose request differs from that job's (filter,
	// reason, rate, dry run) fails with store.ErrKeyMismatch. The key is
	// kept as long as the job (the execution retention). "" starts a new
	// job every time.
	IdempotencyKey string
}

// redriveState is a job's document (store.Job.State).
type redriveState struct {
	PipelineID string         `json:"p,omitempty"`
	Statuses   []store.Status `json:"s"`
	ErrorCode  string         `json:"e,omitempty"`
	After      time.Time      `json:"a,omitzero"`
	Before     time.Time      `json:"b,omitzero"`
	Reason     string         `json:"r"`
	Rate       int            `json:"n"`
	DryRun     bool           `json:"dry,omitempty"`
	Action     BulkAction     `json:"act,omitempty"`
	// Fingerprint identifies the request of a job started with an
	// idempotency key (redrivesFingerprint), so that a retry of the start
	// can tell its own request from another one under the same key.
	Fingerprint string `json:"fp,omitempty"`
	// Scan is the list cursor; Scanned once the list is exhausted.
	Scan    string `json:"sc,omitempty"`
	Scanned bool   `json:"sd,omitempty"`
	// Pages are the pages of ids written; Page and Offset the next id.
	Pages  int `json:"pg,omitempty"`
	Page   int `json:"pi,omitempty"`
	Offset int `json:"po,omitempty"`

	Matched  int  `json:"m,omitempty"`
	Redriven int  `json:"rd,omitempty"`
	Skipped  int  `json:"sk,omitempty"`
	Failed   int  `json:"f,omitempty"`
	Done     bool `json:"d,omitempty"`
	// Owner holds the job until LeaseUntil.
	Owner      string    `json:"o,omitempty"`
	LeaseUntil time.Time `json:"l,omitzero"`
}

func (st *redriveState) filter() RedriveFilter {
	return RedriveFilter{PipelineID: st.PipelineID, Statuses: st.Statuses, ErrorCode: st.ErrorCode, CreatedAfter: st.After, CreatedBefore: st.Before}
}

// auditPrefix begins the audit note of every execution a job re-drives:
// it names the job, and tells a resumed job what it already did.
func auditPrefix(jobID string) string { return "redrive " + jobID + ": " }

// redriveJob is a job being advanced: its record and decoded state.
type redriveJob struct {
	rec store.Job
	st  redriveState
}

func decodeRedriveJob(j store.Job) (*redriveJob, error) {
	rj := &redriveJob{rec: j}
	if err := json.Unmarshal(j.State, &rj.st); err != nil {
		return nil, fmt.Errorf("engine: bulk re-drive %s: unreadable state: %w", j.Key, err)
	}
	return rj, nil
}

func (j *redriveJob) view() RedriveJob {
	st := &j.st
	return RedriveJob{ID: j.rec.Key.ID, Matched: st.Matched, Redriven: st.Redriven, Skipped: st.Skipped, Failed: st.Failed,
		Done: st.Done, DryRun: st.DryRun, Reason: st.Reason, RatePerSecond: st.Rate, Filter: st.filter(), CreatedAt: j.rec.CreatedAt,
		Action: st.Action}
}

// StartRedrives starts a bulk re-drive of tenant's executions that match
// filter, at most ratePerSecond a second (0: DefaultRedriveRate), each
// with reason in its audit note: StartRedrivesWith without an idempotency
// key (every call starts a new job).
func (r *Runtime) StartRedrives(ctx context.Context, tenant string, filter RedriveFilter, reason string, ratePerSecond int, dryRun bool) (RedriveJob, error) {
	return r.StartRedrivesWith(ctx, tenant, RedrivesOptions{Filter: filter, Reason: reason, RatePerSecond: ratePerSecond, DryRun: dryRun})
}

// StartRedrivesWith starts a bulk re-drive of tenant's executions that
// match opts.Filter. It records the job, scans the matching executions
// for up to a few seconds (Matched; a larger scan goes on in the driver)
// and returns; the driver re-drives them. A dry run only counts. With an
// idempotency key, a start that finds the key's job returns it with
// Duplicate set (two concurrent starts with one key make one job: the
// job store creates a key once). Errors: ErrInvalidRedrive (a blank
// reason, a rate outside 0..MaxRedriveRate, a status other than DLQ and
// FAILED), store.ErrKeyMismatch (the key named a job of another
// request), ErrRedrivesUnavailable.
func (r *Runtime) StartRedrivesWith(ctx context.Context, tenant string, opts RedrivesOptions) (RedriveJob, error) {
	if r.deps.Jobs == nil {
		return RedriveJob{}, ErrRedrivesUnavailable
	}
	filter, reason, ratePerSecond, dryRun := opts.Filter, opts.Reason, opts.RatePerSecond, opts.DryRun
	switch {
	case tenant == "":
		return RedriveJob{}, fmt.Errorf("%w: a tenant is required", ErrInvalidRedrive)
	case strings.TrimSpace(reason) == "":
		return RedriveJob{}, fmt.Errorf("%w: a reason is required", ErrInvalidRedrive)
	case ratePerSecond < 0 || ratePerSecond > MaxRedriveRate:
		return RedriveJob{}, fmt.Errorf("%w: rate %d per second outside 1..%d", ErrInvalidRedrive, ratePerSecond, MaxRedriveRate)
	}
	if ratePerSecond == 0 {
		ratePerSecond = DefaultRedriveRate
	}
	statuses, err := opts.Action.statuses(filter.Statuses)
	if err != nil {
		return RedriveJob{}, err
	}
	slices.Sort(statuses)
	now := r.deps.Clock.Now()
	before := filter.CreatedBefore
	if frozen := now.Add(time.Millisecond); before.IsZero() || before.After(frozen) {
		before = frozen // nothing submitted after the job started
	}
	id, fingerprint := r.newJobID(), ""
	if opts.IdempotencyKey != "" {
		id = opts.Action.jobID(tenant, opts.IdempotencyKey)
		fingerprint = redrivesFingerprint(filter, statuses, reason, ratePerSecond, dryRun)
	}
	job := &redriveJob{st: redriveState{
		PipelineID: filter.PipelineID, Statuses: statuses, ErrorCode: filter.ErrorCode, After: filter.CreatedAfter, Before: before,
		Reason: store.Truncate(reason, store.MaxErrorMessage-len(auditPrefix(id))), Rate: ratePerSecond, DryRun: dryRun, Fingerprint: fingerprint,
		Action: opts.Action,
		// The start's own hold, apart from this process's driver, which
		// leaves the job alone until the start hands it over.
		Owner: r.cfg.WorkerID + "/start", LeaseUntil: now.Add(redriveLease),
	}}
	job.rec = store.Job{Key: store.JobKey{TenantID: tenant, ID: id}, Active: true,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(r.cfg.ExecutionTTL)}
	if job.rec.State, err = json.Marshal(&job.st); err != nil {
		return RedriveJob{}, err
	}
	if len(job.rec.State) > store.MaxJobState {
		return RedriveJob{}, fmt.Errorf("%w: the filter and reason take %d bytes, more than %d", ErrInvalidRedrive, len(job.rec.State), store.MaxJobState)
	}
	for try := 1; ; try++ {
		err := r.deps.Jobs.CreateJob(ctx, job.rec)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrConflict) || fingerprint == "" {
			return RedriveJob{}, err
		}
		dup, err := r.keyedRedrive(ctx, job.rec.Key, fingerprint)
		switch {
		case errors.Is(err, store.ErrNotFound) && try < 2:
			continue // the key's job expired between the create and the read
		case errors.Is(err, store.ErrNotFound):
			// Again: the caller retries (503), not a missing execution.
			return RedriveJob{}, fmt.Errorf("engine: bulk re-drive %s: %w: its job kept expiring while it was started", job.rec.Key, store.ErrUnavailable)
		}
		return dup, err
	}
	job.rec.Version = 1
	log := r.jobLogger(job)
	log.LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_started", slog.String("event", "bulk_redrive_started"),
		slog.String("reason", job.st.Reason), slog.Int("rate_per_second", ratePerSecond), slog.Bool("dry_run", dryRun),
		slog.String("pipeline", filter.PipelineID), slog.Any("statuses", statuses), slog.String("error_code", filter.ErrorCode),
		slog.String("action", opts.Action.String()))
	deadline := time.Now().Add(redriveStartBudget)
	if d, ok := ctx.Deadline(); ok && d.Add(-time.Second).Before(deadline) {
		deadline = d.Add(-time.Second)
	}
	for !job.st.Scanned && time.Now().Before(deadline) && ctx.Err() == nil {
		if err := r.scanStep(ctx, job); err != nil {
			break // the driver goes on from the last checkpoint
		}
	}
	// Hand the job to the driver (or end a dry run, or a job that matched
	// nothing).
	job.st.Owner, job.st.LeaseUntil = "", time.Time{}
	if job.st.Scanned && (job.st.DryRun || job.st.Matched == 0) {
		job.st.Done = true
	}
	if err := r.checkpoint(ctx, job); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_checkpoint_failed", slog.String("event", "bulk_redrive_checkpoint_failed"), slog.String("error", err.Error()))
	}
	if job.st.Done {
		r.jobDone(ctx, job)
	}
	return job.view(), nil
}

// keyedRedrive answers a start whose idempotency key already names a
// live job (key): that job, Duplicate, when it was started by the same
// request (fingerprint); else store.ErrKeyMismatch (store.ErrNotFound
// when the job expired since).
func (r *Runtime) keyedRedrive(ctx context.Context, key store.JobKey, fingerprint string) (RedriveJob, error) {
	j, err := r.deps.Jobs.GetJob(ctx, key)
	if err != nil {
		return RedriveJob{}, err
	}
	job, err := decodeRedriveJob(j)
	if err != nil {
		return RedriveJob{}, err
	}
	if job.st.Fingerprint != fingerprint {
		return RedriveJob{}, fmt.Errorf("%w: bulk re-drive %s was started with another request", store.ErrKeyMismatch, key)
	}
	r.jobLogger(job).LogAttrs(ctx, slog.LevelInfo, "bulk_redrive_deduplicated", slog.String("event", "bulk_redrive_deduplicated"))
	v := job.view()
	v.Duplicate = true
	return v, nil
}

// redriveJobID is the id of the bulk re-drive tenant starts under an
// idempotency key: 32 hex digits (the form of a random job id) of a
// SHA-256 of both, length-prefixed, apart from the execution ids'.
func redriveJobID(tenant, key string) string {
	return hashParts("qasync-redrive", tenant, key)[:32]
}

// redrivesFingerprint identifies a bulk re-drive's request as the start
// checked it (statuses defaulted and sorted, the rate defaulted), so that
// a retry of the same request matches whatever the client left to the
// defaults. CreatedBefore is the one asked for, not the start's cut-off.
func redrivesFingerprint(f RedriveFilter, statuses []store.Status, reason string, rate int, dryRun bool) string {
	parts := []string{f.PipelineID, f.ErrorCode, timeKey(f.CreatedAfter), timeKey(f.CreatedBefore), reason,
		strconv.Itoa(rate), strconv.FormatBool(dryRun)}
	for _, s := range statuses {
		parts = append(parts, string(s))
	}
	return hashParts(parts...)[:32]
}

// timeKey renders t for a fingerprint ("" for the zero time).
func timeKey(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// RedriveJob returns tenant's bulk re-drive id and its progress
// (store.ErrNotFound for another tenant's or an unknown id).
func (r *Runtime) RedriveJob(ctx context.Context, tenant, id string) (RedriveJob, error) {
	if r.deps.Jobs == nil {
		return RedriveJob{}, ErrRedrivesUnavailable
	}
	j, err := r.deps.Jobs.GetJob(ctx, store.JobKey{TenantID: tenant, ID: id})
	if err != nil {
		return RedriveJob{}, err
	}
	job, err := decodeRedriveJob(j)
	if err != nil {
		return RedriveJob{}, err
	}
	return job.view(), nil
}

// DriveRedrives advances every active bulk re-drive for at most slice
// (at its rate; jobs concurrently), each under its lease, and reports how
// many jobs it held. A job another live driver holds is left to it.
func (r *Runtime) DriveRedrives(ctx context.Context, slice time.Duration) (int, error) {
	if r.deps.Jobs == nil {
		return 0, nil
	}
	jobs, err := r.deps.Jobs.ActiveJobs(ctx)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(slice)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held int
	)
	for _, j := range jobs {
		if IsScheduleJob(j.Key) {
			continue // DriveSchedules's
		}
		wg.Go(func() {
			job, err := decodeRedriveJob(j)
			if err != nil {
				r.deps.Logger.LogAttrs(ctx, slog.LevelError, "bulk_redrive_unreadable", slog.String("event", "bulk_redrive_unreadable"), slog.String("error", err.Error()))
				return
			}
			if !r.holdJob(ctx, job) {
				return
			}
			mu.Lock()
			held++
			mu.Unlock()
			r.advance(ctx, job, deadline)
		})
	}
	wg.Wait()
	return held, nil
}

// redriveIdlePoll is the shortest wait of RunRedrives between looks for
// jobs while it holds none (each look is one read of the active jobs).
const redriveIdlePoll = 5 * time.Second

// RunRedrives calls DriveRedrives until ctx ends: again at once while it
// holds jobs, else every interval (at least redriveIdlePoll).
func (r *Runtime) RunRedrives(ctx context.Context, interval time.Duration) {
	interval = max(interval, redriveIdlePoll)
	for ctx.Err() == nil {
		held, err := r.DriveRedrives(ctx, redriveSlice)
		if err != nil && ctx.Err() == nil {
			r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_drive_failed", slog.String("event", "bulk_redrive_drive_failed"), slog.String("error", err.Error()))
		}
		if held > 0 && err == nil {
			continue
		}
		if sleepCtx(ctx, interval) != nil {
			return
		}
	}
}

// holdJob takes the job's lease for this worker: free or lapsed, or its
// own already. A lost race (another driver took it) returns false.
func (r *Runtime) holdJob(ctx context.Context, job *redriveJob) bool {
	now := r.deps.Clock.Now()
	if job.st.Done || (job.st.Owner != "" && job.st.Owner != r.cfg.WorkerID && job.st.LeaseUntil.After(now)) {
		return false
	}
	if job.st.Owner != "" && job.st.Owner != r.cfg.WorkerID {
		r.jobLogger(job).LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_taken_over", slog.String("event", "bulk_redrive_taken_over"),
			slog.String("previous_owner", job.st.Owner))
	}
	job.st.Owner = r.cfg.WorkerID
	return r.checkpoint(ctx, job) == nil
}

// advance runs the job until deadline (or ctx ends), then hands it back.
func (r *Runtime) advance(ctx context.Context, job *redriveJob, deadline time.Time) {
	log := r.jobLogger(job)
	interval := time.Second / time.Duration(max(job.st.Rate, 1))
	next := time.Now()
	lastCheckpoint := time.Now()
	var ids []string
	failed := func(err error) {
		log.LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_step_failed", slog.String("event", "bulk_redrive_step_failed"), slog.String("error", err.Error()))
	}
	for ctx.Err() == nil && time.Now().Before(deadline) {
		st := &job.st
		if !st.Scanned {
			if err := r.scanStep(ctx, job); err != nil {
				failed(err)
				return
			}
			lastCheckpoint = time.Now()
			continue
		}
		if st.Page >= st.Pages {
			st.Done = true
			break
		}
		if ids == nil {
			page, err := r.deps.Jobs.JobPage(ctx, job.rec.Key, st.Page)
			if errors.Is(err, store.ErrNotFound) {
				failed(fmt.Errorf("page %d of the matched executions is gone: %w", st.Page, err))
				page = []string{} // nothing left to do with it
			} else if err != nil {
				failed(err)
				return
			}
			ids = page
		}
		if st.Offset >= len(ids) {
			st.Page, st.Offset, ids = st.Page+1, 0, nil
			continue
		}
		if wait := time.Until(next); wait > 0 {
			if time.Now().Add(wait).After(deadline) {
				break
			}
			if sleepCtx(ctx, wait) != nil {
				break
			}
		}
		next = maxTime(next, time.Now()).Add(interval)
		outcome := r.redriveOne(ctx, job, ids[st.Offset])
		if ctx.Err() != nil {
			break // stopped during it: the next driver handles it again (its note tells)
		}
		switch outcome {
		case redriveDone:
			st.Redriven++
		case redriveSkipped:
			st.Skipped++
		case redriveFailed:
			st.Failed++
		}
		st.Offset++
		if time.Since(lastCheckpoint) >= redriveCheckpoint {
			if r.checkpoint(ctx, job) != nil {
				return // another driver holds it now
			}
			lastCheckpoint = time.Now()
		}
	}
	// Stopped (the slice's end, a shutdown): hand the job back, so that
	// the next driver goes on at once. A process that dies instead leaves
	// its last checkpoint and a lease that lapses within redriveLease.
	if !job.st.Done {
		job.st.Owner, job.st.LeaseUntil = "", time.Time{}
	}
	if err := r.checkpoint(ctx, job); err != nil {
		failed(err)
		return
	}
	if job.st.Done {
		r.jobDone(ctx, job)
	}
}

// scanStep lists one page of the job's matches, writes their ids as the
// next page (a dry run only counts them) and checkpoints.
func (r *Runtime) scanStep(ctx context.Context, job *redriveJob) error {
	st := &job.st
	page, err := r.deps.Store.List(ctx, store.ListQuery{TenantID: job.rec.Key.TenantID, PipelineID: st.PipelineID, Statuses: st.Statuses,
		CreatedAfter: st.After, CreatedBefore: st.Before, Limit: store.MaxJobPage, Cursor: st.Scan})
	if err != nil {
		return err
	}
	filter := st.filter()
	var ids []string
	for i := range page.Executions {
		if filter.matches(&page.Executions[i]) {
			ids = append(ids, page.Executions[i].ExecutionID)
		}
	}
	if len(ids) > 0 && !st.DryRun {
		if err := r.deps.Jobs.PutJobPage(ctx, job.rec.Key, st.Pages, ids, job.rec.ExpiresAt); err != nil {
			return err
		}
		st.Pages++
	}
	st.Matched += len(ids)
	st.Scan, st.Scanned = page.Cursor, page.Cursor == ""
	return r.checkpoint(ctx, job)
}

// checkpoint writes the job's state under its version, extending the
// lease of its holder.
func (r *Runtime) checkpoint(ctx context.Context, job *redriveJob) error {
	now := r.deps.Clock.Now()
	if job.st.Owner != "" {
		job.st.LeaseUntil = now.Add(redriveLease)
	}
	rec := job.rec
	rec.Active, rec.UpdatedAt = !job.st.Done, now
	var err error
	if rec.State, err = json.Marshal(&job.st); err != nil {
		return err
	}
	// A stop (shutdown, a Lambda deadline) must not cut the write short.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	got, err := r.deps.Jobs.UpdateJob(wctx, rec, job.rec.Version)
	if err != nil {
		return err
	}
	job.rec = got
	return nil
}

// jobDone logs a finished job.
func (r *Runtime) jobDone(ctx context.Context, job *redriveJob) {
	st := &job.st
	r.jobLogger(job).LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_completed", slog.String("event", "bulk_redrive_completed"),
		slog.Int("matched", st.Matched), slog.Int("redriven", st.Redriven), slog.Int("skipped", st.Skipped),
		slog.Int("failed", st.Failed), slog.Bool("dry_run", st.DryRun))
}

func (r *Runtime) jobLogger(job *redriveJob) *slog.Logger {
	return r.deps.Logger.With(slog.String("redrive_id", job.rec.Key.ID), slog.String("tenant", job.rec.Key.TenantID),
		slog.String("action", job.st.Action.String()))
}

// redriveOutcome is what a job did with one execution.
type redriveOutcome int

const (
	redriveDone redriveOutcome = iota
	redriveSkipped
	redriveFailed
)

// redriveOne re-drives one execution of the job as the single re-drive
// does, its audit note naming the job and reason; an execution whose note
// already names the job was re-driven by it before a restart.
func (r *Runtime) redriveOne(ctx context.Context, job *redriveJob, id string) redriveOutcome {
	if job.st.Action != BulkRedrive {
		return r.pauseOne(ctx, job, id)
	}
	key := store.Key{TenantID: job.rec.Key.TenantID, ExecutionID: id}
	prefix := auditPrefix(job.rec.Key.ID)
	filter := job.st.filter()
	for try := 1; ; try++ {
		e, err := r.deps.Store.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return redriveSkipped
		case err != nil && try < redriveTries:
			continue
		case err != nil:
			return redriveFailed
		case strings.HasPrefix(e.Note, prefix):
			// Re-driven by this job before (a restart, or a write whose
			// answer was lost, so the work item may never have been sent):
			// still QUEUED at that re-drive's attempt, it gets its work item
			// again (a duplicate item is harmless; a missing one would wait
			// for the sweeper).
			if e.Status == store.Queued {
				r.dispatch(ctx, &e, 0)
			}
			return redriveDone
		case !filter.matches(&e):
			return redriveSkipped
		}
		version := e.Version
		_, err = r.RedriveWith(ctx, key, RedriveOptions{Reason: prefix + job.st.Reason, ExpectedVersion: &version, RedriveID: job.rec.Key.ID})
		switch {
		case err == nil:
			return redriveDone
		case errors.Is(err, ErrNotRedrivable), errors.Is(err, ErrRemoteEffectUnconfirmed), errors.Is(err, ErrChildrenExpired), errors.Is(err, store.ErrNotFound):
			return redriveSkipped
		case try >= redriveTries:
			r.jobLogger(job).LogAttrs(ctx, slog.LevelWarn, "bulk_redrive_execution_failed", slog.String("event", "bulk_redrive_execution_failed"),
				slog.String("execution_id", id), slog.String("error", err.Error()))
			return redriveFailed
		}
		// A concurrent change (the version moved) or a transient failure:
		// read the row again.
	}
}

// newJobID is a random job id (32 hex digits).
func (r *Runtime) newJobID() string {
	var b [16]byte
	r.random(b[:])
	return hex.EncodeToString(b[:])
}
