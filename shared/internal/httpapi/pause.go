package httpapi

// The operator's pause and resume: of one execution
// (POST /v1/executions/{executionId}/pause and /resume) and of many by
// filter (POST /v1/pauses and /v1/resumes, with their progress under
// GET /v1/pauses/{jobId} and /v1/resumes/{jobId}), authorized as
// re-drive is. The bulk forms are bulk re-drive's jobs with another
// action (engine.BulkAction).

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// Routes of pause and resume.
const (
	routePause     = "POST /v1/executions/{executionId}/pause"
	routeResume    = "POST /v1/executions/{executionId}/resume"
	routePauses    = "POST /v1/pauses"
	routePauseJob  = "GET /v1/pauses/{jobId}"
	routeResumes   = "POST /v1/resumes"
	routeResumeJob = "GET /v1/resumes/{jobId}"
)

// Problem kinds of pause and resume.
var (
	kindNotPausable = kind{"execution-not-pausable", http.StatusConflict, "Execution cannot be paused"}
	kindNotPaused   = kind{"execution-not-paused", http.StatusConflict, "Execution is not paused"}
	kindJobNotFound = kind{"bulk-job-not-found", http.StatusNotFound, "Bulk job not found"}
)

// routePauses registers the pause and resume routes (New calls it).
func (a *api) routePauses() {
	a.route(routePause, func(w http.ResponseWriter, r *http.Request) { a.pauseOne(w, r, true) })
	a.route(routeResume, func(w http.ResponseWriter, r *http.Request) { a.pauseOne(w, r, false) })
	a.route(routePauses, func(w http.ResponseWriter, r *http.Request) { a.startBulk(w, r, engine.BulkPause) })
	a.route(routeResumes, func(w http.ResponseWriter, r *http.Request) { a.startBulk(w, r, engine.BulkResume) })
	a.route(routePauseJob, func(w http.ResponseWriter, r *http.Request) { a.bulkProgress(w, r, engine.BulkPause) })
	a.route(routeResumeJob, func(w http.ResponseWriter, r *http.Request) { a.bulkProgress(w, r, engine.BulkResume) })
}

// pauseOne handles a pause (pause true) or a resume of one execution.
// A pause answers 200 when the execution is PAUSED (now, or already),
// 202 when it is a request (RUNNING, WAITING_CHILDREN); a resume 200.
func (a *api) pauseOne(w http.ResponseWriter, r *http.Request, pause bool) {
	body, ok := a.operatorBody(w, r)
	if !ok {
		return
	}
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	var req client.PauseRequest
	detail := decodeBody(body, &req, `{"reason": string, "expectedVersion": integer}`)
	if detail == "" {
		detail = checkReason(req.Reason)
	}
	if detail != "" {
		writeProblem(w, kindInvalidRequest.problem(detail))
		return
	}
	opts := engine.PauseOptions{Reason: req.Reason, ExpectedVersion: req.ExpectedVersion}
	var (
		e   store.Execution
		err error
	)
	if pause {
		e, _, err = a.rt.Pause(r.Context(), key, opts)
	} else {
		e, err = a.rt.Resume(r.Context(), key, opts)
	}
	var prob Problem
	switch {
	case err == nil && pause && e.Status != store.Paused:
		writeJSON(w, http.StatusAccepted, statusDocument(&e))
		return
	case err == nil:
		writeJSON(w, http.StatusOK, statusDocument(&e))
		return
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, kindExecutionNotFound.problem("No execution with this id exists for this tenant."))
		return
	case errors.Is(err, engine.ErrNotPausable):
		prob = kindNotPausable.problem(fmt.Sprintf("The execution is %s: only QUEUED, WAIT_RETRY, WAITING_EXTERNAL, RUNNING, WAITING_CHILDREN and WAITING_KEY executions can be paused.", e.Status))
	case errors.Is(err, engine.ErrNotPaused):
		prob = kindNotPaused.problem(fmt.Sprintf("The execution is %s, not PAUSED, and has no pause request to withdraw.", e.Status))
	case errors.Is(err, engine.ErrVersionMismatch):
		prob = kindVersionMismatch.problem("The execution's version is not the expected one; read its status and retry.")
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrLeaseLost):
		prob = kindVersionMismatch.problem("The execution kept changing meanwhile; read its status and retry.")
	default:
		a.fail(w, r, err)
		return
	}
	prob.ExecutionID, prob.ExecutionStatus = e.ExecutionID, e.Status
	writeProblem(w, prob)
}

// bulkPauseRequest is the body of POST /v1/pauses and /v1/resumes.
type bulkPauseRequest struct {
	Filter struct {
		PipelineID    string         `json:"pipelineId"`
		Status        []store.Status `json:"status"`
		CreatedAfter  string         `json:"createdAfter"`
		CreatedBefore string         `json:"createdBefore"`
	} `json:"filter"`
	Reason        string `json:"reason"`
	RatePerSecond *int   `json:"ratePerSecond"`
	DryRun        bool   `json:"dryRun"`
}

// bulkJobURL is the URL of a bulk pause's or resume's progress.
func (a *api) bulkJobURL(action engine.BulkAction, id string) string {
	return a.basePath + "/v1/" + action.String() + "s/" + url.PathEscape(id)
}

// startBulk handles POST /v1/pauses and /v1/resumes, as startRedrives.
func (a *api) startBulk(w http.ResponseWriter, r *http.Request, action engine.BulkAction) {
	a.startJob(w, r, bulkKind{
		noun:        "bulk " + action.String(),
		invalid:     fmt.Sprintf("The bulk %s is not valid: a pause takes QUEUED, WAIT_RETRY, WAITING_EXTERNAL, RUNNING, WAITING_CHILDREN and WAITING_KEY executions, a resume PAUSED ones.", action),
		unavailable: "This deployment's state store keeps no bulk jobs.",
		url:         func(id string) string { return a.bulkJobURL(action, id) },
		started: func(job engine.RedriveJob) any {
			return client.BulkJob{JobID: job.ID, Action: action.String(), Matched: job.Matched, Duplicate: job.Duplicate}
		},
	}, func(body []byte, key string) (engine.RedrivesOptions, string) {
		var req bulkPauseRequest
		detail := decodeBody(body, &req, `{"filter": {"pipelineId", "status", "createdAfter", "createdBefore"}, "reason": string, "ratePerSecond": integer, "dryRun": boolean}`)
		// The re-drive request's checks (reason, pipeline, times, rate),
		// with the statuses left to the engine's check for the action.
		rr := RedrivesRequest{Filter: RedrivesFilter{PipelineID: req.Filter.PipelineID, CreatedAfter: req.Filter.CreatedAfter,
			CreatedBefore: req.Filter.CreatedBefore}, Reason: req.Reason, RatePerSecond: req.RatePerSecond}
		filter, rate := engine.RedriveFilter{}, 0
		if detail == "" {
			filter, rate, detail = checkRedrives(&rr)
		}
		for _, s := range req.Filter.Status {
			if detail == "" && !s.Valid() {
				detail = fmt.Sprintf(`"filter.status" holds %q, which is no status.`, store.Truncate(string(s), 64))
			}
		}
		filter.Statuses = req.Filter.Status
		return engine.RedrivesOptions{Action: action, Filter: filter, Reason: req.Reason, RatePerSecond: rate, DryRun: req.DryRun, IdempotencyKey: key}, detail
	})
}

// bulkProgress handles GET /v1/pauses/{jobId} and /v1/resumes/{jobId}: a
// job of another action is not found here.
func (a *api) bulkProgress(w http.ResponseWriter, r *http.Request, action engine.BulkAction) {
	job, ok := a.readJob(w, r, "jobId", kindJobNotFound.problem("No bulk "+action.String()+" with this id exists for this tenant."),
		"This deployment's state store keeps no bulk jobs.", func(j engine.RedriveJob) bool { return j.Action == action })
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, client.BulkProgress{JobID: job.ID, Action: action.String(), Matched: job.Matched, Applied: job.Redriven,
		Skipped: job.Skipped, Failed: job.Failed, Done: job.Done, DryRun: job.DryRun})
}
