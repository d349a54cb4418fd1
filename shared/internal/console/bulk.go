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

// redriveURL is a bulk re-drive's page.
func redriveURL(id string) string { return Prefix + "/redrives/" + url.PathEscape(id) }

// bulkFilter reads the bulk re-drive form's filter and rate, or returns
// the problem.
func bulkFilter(form url.Values) (f engine.RedriveFilter, rate int, problem string) {
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
		if s != store.DLQ && s != store.Failed {
			return f, 0, fmt.Sprintf("A bulk re-drive takes %s and %s executions (the statuses a re-drive takes without confirmation).", store.DLQ, store.Failed)
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
			return f, 0, fmt.Sprintf("The rate must be a number of re-drives a second from 1 to %d.", engine.MaxRedriveRate)
		}
		rate = n
	}
	return f, rate, ""
}

// bulkDryRun handles POST /console/redrives: the dry run of the form's
// bulk re-drive (operator), then its page.
func (c *Console) bulkDryRun(w http.ResponseWriter, r *http.Request) {
	if !c.operatorPost(w, r) {
		return
	}
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	filter, rate, problem := bulkFilter(r.PostForm)
	if problem != "" {
		c.errorPage(w, r, http.StatusBadRequest, "Bad bulk re-drive", problem)
		return
	}
	reason, ok := c.formReason(w, r)
	if !ok {
		return
	}
	job, err := c.b.StartRedrivesWith(r.Context(), tenant, engine.RedrivesOptions{Filter: filter, Reason: reason, RatePerSecond: rate, DryRun: true})
	if err != nil {
		c.bulkError(w, r, err)
		return
	}
	c.logAction(r, slog.LevelInfo, "console_bulk_redrive_dry_run", slog.String("tenant", tenant), slog.String("redrive_id", job.ID),
		slog.Int("matched", job.Matched), slog.Bool("done", job.Done))
	http.Redirect(w, r, redriveURL(job.ID), http.StatusSeeOther)
}

// bulkStart handles POST /console/redrives/{job}/start: the bulk
// re-drive that the dry run {job} counted (operator).
func (c *Console) bulkStart(w http.ResponseWriter, r *http.Request) {
	if !c.operatorPost(w, r) {
		return
	}
	dry, ok := c.redriveJob(w, r)
	if !ok {
		return
	}
	switch {
	case !dry.DryRun:
		c.errorPage(w, r, http.StatusConflict, "Not a dry run", "This bulk re-drive already runs: its page shows its progress.")
		return
	case !dry.Done:
		c.errorPage(w, r, http.StatusConflict, "Still counting", "The dry run has not finished counting the matching executions. Wait for its count, then start.")
		return
	case dry.Matched == 0:
		c.errorPage(w, r, http.StatusConflict, "Nothing to re-drive", "No execution matched the dry run's filter.")
		return
	}
	tenant := c.reqTenant(r)
	job, err := c.b.StartRedrivesWith(r.Context(), tenant, engine.RedrivesOptions{Filter: dry.Filter, Reason: dry.Reason,
		RatePerSecond: dry.RatePerSecond, IdempotencyKey: "console-dry-run-" + dry.ID})
	if err != nil {
		c.bulkError(w, r, err)
		return
	}
	c.logAction(r, slog.LevelInfo, "console_bulk_redrive_started", slog.String("tenant", tenant), slog.String("redrive_id", job.ID),
		slog.String("dry_run_id", dry.ID), slog.Int("matched", job.Matched), slog.Bool("duplicate", job.Duplicate))
	http.Redirect(w, r, redriveURL(job.ID), http.StatusSeeOther)
}

// bulkError answers a bulk re-drive the engine refused or failed.
func (c *Console) bulkError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, engine.ErrInvalidRedrive):
		c.errorPage(w, r, http.StatusBadRequest, "Bad bulk re-drive", "The bulk re-drive is not valid: check its filter, reason and rate.")
	case errors.Is(err, store.ErrKeyMismatch):
		c.errorPage(w, r, http.StatusConflict, "Already started", "This dry run already started another bulk re-drive.")
	default:
		c.backendError(w, r, "Bulk re-drive", err)
	}
}

// reqTenant is the tenant the request's handlers resolved (c.tenant).
func (c *Console) reqTenant(r *http.Request) string {
	if st, ok := r.Context().Value(reqStateKey{}).(*reqState); ok {
		return st.tenant
	}
	return ""
}

// redriveJob reads the bulk re-drive the address names, of the request's
// tenant, or writes the refusal.
func (c *Console) redriveJob(w http.ResponseWriter, r *http.Request) (engine.RedriveJob, bool) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return engine.RedriveJob{}, false
	}
	id := r.PathValue("job")
	if !validID(id) {
		c.errorPage(w, r, http.StatusNotFound, "Bulk re-drive not found", "No bulk re-drive with this id exists for this tenant.")
		return engine.RedriveJob{}, false
	}
	job, err := c.b.RedriveJob(r.Context(), tenant, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.errorPage(w, r, http.StatusNotFound, "Bulk re-drive not found", "No bulk re-drive with this id exists for this tenant (or it expired).")
		return engine.RedriveJob{}, false
	case err != nil:
		c.backendError(w, r, "Bulk re-drive", err)
		return engine.RedriveJob{}, false
	}
	return job, true
}

// bulkData is a bulk re-drive's page.
type bulkData struct {
	base
	Job engine.RedriveJob
	// StartURL is the dry run's start form's action ("" when it cannot
	// start: not a finished dry run, or nothing matched).
	StartURL string
	Handled  int
}

// bulkPage handles GET /console/redrives/{job}: a bulk re-drive's (or its
// dry run's) filter and progress (operator).
func (c *Console) bulkPage(w http.ResponseWriter, r *http.Request) {
	if !c.operatorGet(w, r) {
		return
	}
	job, ok := c.redriveJob(w, r)
	if !ok {
		return
	}
	title := "Bulk re-drive " + job.ID
	if job.DryRun {
		title = "Dry run " + job.ID
	}
	d := bulkData{base: c.base(w, r, title, "dead-letters", c.reqTenant(r)), Job: job, Handled: job.Redriven + job.Skipped + job.Failed}
	if job.DryRun && job.Done && job.Matched > 0 {
		d.StartURL = redriveURL(job.ID) + "/start"
	}
	c.render(w, http.StatusOK, &d.base, d.content)
}
