package console

// Bulk re-drive from the console: the dead-letters page's form starts a
// dry run (engine.RedrivesOptions.DryRun) of its filter, reason and rate,
// whose page shows how many executions match; only from there can the
// operator start the re-drive, which takes the dry run's own filter,
// reason and rate (its creation cut-off included), so that what starts
// is what was counted. The start's idempotency key is the dry run's id:
// sending the start form twice starts one job. The job's page shows its
// progress (engine.Runtime.RedriveJob) while the sweeper drives it.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// maxErrorCodeLen is the longest error code filter (the HTTP API's).
const maxErrorCodeLen = 128

// bulkKind is what a bulk job does, as the console names and routes it:
// the bulk re-drive, pause and resume share their form, dry run, start
// and progress page (an engine bulk job with another action).
type bulkKind struct {
	Action engine.BulkAction
	// Path is the jobs' address under Prefix ("/redrives").
	Path string
	// ID prefixes the form's element ids ("bulk" for the re-drive).
	ID string
	// Verb ("Re-drive"), Noun ("re-drive"), Done ("Re-driven") label the
	// pages; Doing ("re-drives") says what the sweeper does.
	Verb, Noun, Done, Doing string
	// Statuses are those the action takes (the form's choice).
	Statuses []store.Status
	// Back and BackName are the page the form is on.
	Back, BackName string
}

// The bulk kinds.
var (
	bulkRedrive = bulkKind{Action: engine.BulkRedrive, Path: "/redrives", ID: "bulk", Verb: "Re-drive", Noun: "re-drive", Done: "Re-driven",
		Doing: "re-drives", Statuses: []store.Status{store.DLQ, store.Failed}, Back: Prefix + "/dead-letters", BackName: "Dead letters"}
	bulkPause = bulkKind{Action: engine.BulkPause, Path: "/pauses", ID: "bulk-pause", Verb: "Pause", Noun: "pause", Done: "Paused",
		Doing: "pauses", Statuses: []store.Status{store.Queued, store.WaitRetry, store.WaitingExternal, store.Running, store.WaitingChildren},
		Back: Prefix, BackName: "Executions"}
	bulkResume = bulkKind{Action: engine.BulkResume, Path: "/resumes", ID: "bulk-resume", Verb: "Resume", Noun: "resume", Done: "Resumed",
		Doing: "resumes", Statuses: []store.Status{store.Paused}, Back: Prefix, BackName: "Executions"}
	bulkKinds = []bulkKind{bulkRedrive, bulkPause, bulkResume}
)

// url is a job's page.
func (k bulkKind) url(id string) string { return Prefix + k.Path + "/" + url.PathEscape(id) }

// bulkFilter reads a bulk form's filter and rate, or returns the
// problem.
func bulkFilter(form url.Values, k bulkKind) (f engine.RedriveFilter, rate int, problem string) {
	f.PipelineID = strings.TrimSpace(form.Get("pipeline"))
	if f.PipelineID != "" && !pipeline.ValidID(f.PipelineID) {
		return f, 0, pipelineIDRule
	}
	f.ErrorCode = strings.TrimSpace(form.Get("errorCode"))
	if len(f.ErrorCode) > maxErrorCodeLen {
		return f, 0, fmt.Sprintf("The error code must be at most %d bytes.", maxErrorCodeLen)
	}
	for _, v := range form["status"] {
		s := store.Status(strings.ToUpper(strings.TrimSpace(v)))
		if !slices.Contains(k.Statuses, s) {
			return f, 0, fmt.Sprintf("A bulk %s takes %s executions.", k.Noun, statusNames(k.Statuses))
		}
		if !slices.Contains(f.Statuses, s) {
			f.Statuses = append(f.Statuses, s)
		}
	}
	var problem2 string
	f.CreatedAfter, f.CreatedBefore, problem2 = readTimes(form)
	if problem2 != "" {
		return f, 0, problem2
	}
	if v := strings.TrimSpace(form.Get("rate")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > engine.MaxRedriveRate {
			return f, 0, fmt.Sprintf("The rate must be a number of %s a second from 1 to %d.", k.Doing, engine.MaxRedriveRate)
		}
		rate = n
	}
	return f, rate, ""
}

// statusNames joins statuses for a message ("DLQ and FAILED").
func statusNames(ss []store.Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// bulkDryRun handles POST /console/redrives (/pauses, /resumes): the
// dry run of the form's bulk job (operator), then its page.
func (c *Console) bulkDryRun(k bulkKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.operatorPost(w, r) {
			return
		}
		tenant, ok := c.tenant(w, r)
		if !ok {
			return
		}
		filter, rate, problem := bulkFilter(r.PostForm, k)
		if problem != "" {
			c.errorPage(w, r, http.StatusBadRequest, "Bad bulk "+k.Noun, problem)
			return
		}
		reason, ok := c.formReason(w, r)
		if !ok {
			return
		}
		job, err := c.b.StartRedrivesWith(r.Context(), tenant, engine.RedrivesOptions{Filter: filter, Reason: reason, RatePerSecond: rate, DryRun: true, Action: k.Action})
		if err != nil {
			c.bulkError(w, r, k, err)
			return
		}
		c.logAction(r, slog.LevelInfo, "console_bulk_"+k.Action.String()+"_dry_run", slog.String("tenant", tenant), slog.String("redrive_id", job.ID),
			slog.Int("matched", job.Matched), slog.Bool("done", job.Done))
		http.Redirect(w, r, k.url(job.ID), http.StatusSeeOther)
	}
}

// bulkStart handles POST /console/redrives/{job}/start (/pauses,
// /resumes): the bulk job that the dry run {job} counted (operator).
func (c *Console) bulkStart(k bulkKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.operatorPost(w, r) {
			return
		}
		dry, ok := c.redriveJob(w, r, k)
		if !ok {
			return
		}
		switch {
		case !dry.DryRun:
			c.errorPage(w, r, http.StatusConflict, "Not a dry run", "This bulk "+k.Noun+" already runs: its page shows its progress.")
			return
		case !dry.Done:
			c.errorPage(w, r, http.StatusConflict, "Still counting", "The dry run has not finished counting the matching executions. Wait for its count, then start.")
			return
		case dry.Matched == 0:
			c.errorPage(w, r, http.StatusConflict, "Nothing to "+k.Noun, "No execution matched the dry run's filter.")
			return
		}
		tenant := c.reqTenant(r)
		job, err := c.b.StartRedrivesWith(r.Context(), tenant, engine.RedrivesOptions{Filter: dry.Filter, Reason: dry.Reason,
			RatePerSecond: dry.RatePerSecond, IdempotencyKey: "console-dry-run-" + dry.ID, Action: k.Action})
		if err != nil {
			c.bulkError(w, r, k, err)
			return
		}
		c.logAction(r, slog.LevelInfo, "console_bulk_"+k.Action.String()+"_started", slog.String("tenant", tenant), slog.String("redrive_id", job.ID),
			slog.String("dry_run_id", dry.ID), slog.Int("matched", job.Matched), slog.Bool("duplicate", job.Duplicate))
		http.Redirect(w, r, k.url(job.ID), http.StatusSeeOther)
	}
}

// bulkError answers a bulk job the engine refused or failed.
func (c *Console) bulkError(w http.ResponseWriter, r *http.Request, k bulkKind, err error) {
	switch {
	case errors.Is(err, engine.ErrInvalidRedrive):
		c.errorPage(w, r, http.StatusBadRequest, "Bad bulk "+k.Noun, "The bulk "+k.Noun+" is not valid: check its filter, reason and rate.")
	case errors.Is(err, store.ErrKeyMismatch):
		c.errorPage(w, r, http.StatusConflict, "Already started", "This dry run already started another bulk "+k.Noun+".")
	default:
		c.backendError(w, r, "Bulk "+k.Noun, err)
	}
}

// reqTenant is the tenant the request's handlers resolved (c.tenant).
func (c *Console) reqTenant(r *http.Request) string {
	if st, ok := r.Context().Value(reqStateKey{}).(*reqState); ok {
		return st.tenant
	}
	return ""
}

// redriveJob reads the bulk job of kind k the address names, of the
// request's tenant, or writes the refusal (a job of another kind is not
// found at this address).
func (c *Console) redriveJob(w http.ResponseWriter, r *http.Request, k bulkKind) (engine.RedriveJob, bool) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return engine.RedriveJob{}, false
	}
	id := r.PathValue("job")
	if !validID(id) {
		c.errorPage(w, r, http.StatusNotFound, "Bulk "+k.Noun+" not found", "No bulk "+k.Noun+" with this id exists for this tenant.")
		return engine.RedriveJob{}, false
	}
	job, err := c.b.RedriveJob(r.Context(), tenant, id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && job.Action != k.Action:
		c.errorPage(w, r, http.StatusNotFound, "Bulk "+k.Noun+" not found", "No bulk "+k.Noun+" with this id exists for this tenant (or it expired).")
		return engine.RedriveJob{}, false
	case err != nil:
		c.backendError(w, r, "Bulk "+k.Noun, err)
		return engine.RedriveJob{}, false
	}
	return job, true
}

// bulkData is a bulk job's page.
type bulkData struct {
	base
	Kind bulkKind
	Job  engine.RedriveJob
	// StartURL is the dry run's start form's action ("" when it cannot
	// start: not a finished dry run, or nothing matched).
	StartURL string
	Handled  int
}

// bulkPage handles GET /console/redrives/{job} (/pauses, /resumes): a
// bulk job's (or its dry run's) filter and progress (operator).
func (c *Console) bulkPage(k bulkKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.operatorGet(w, r) {
			return
		}
		job, ok := c.redriveJob(w, r, k)
		if !ok {
			return
		}
		title := "Bulk " + k.Noun + " " + job.ID
		if job.DryRun {
			title = "Dry run " + job.ID
		}
		nav := "dead-letters"
		if k.Action != engine.BulkRedrive {
			nav = "executions"
		}
		d := bulkData{base: c.base(w, r, title, nav, c.reqTenant(r)), Kind: k, Job: job, Handled: job.Redriven + job.Skipped + job.Failed}
		if job.DryRun && job.Done && job.Matched > 0 {
			d.StartURL = k.url(job.ID) + "/start"
		}
		c.render(w, http.StatusOK, &d.base, d.content)
	}
}
