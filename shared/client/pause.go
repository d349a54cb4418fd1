package client

// Pause and resume of one execution, and of many by filter.

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// PauseState is an execution's pause in force (Execution.Pause).
type PauseState struct {
	// Reason is the operator's.
	Reason string `json:"reason"`
	// RequestedAt is when the pause was asked for.
	RequestedAt time.Time `json:"requestedAt"`
	// ResumesTo is the status a resume puts a PAUSED execution back in
	// (QUEUED, WAIT_RETRY or WAITING_EXTERNAL); empty while the pause is
	// only requested.
	ResumesTo store.Status `json:"resumesTo,omitempty"`
}

// PauseRequest is the body of a pause or a resume of one execution.
type PauseRequest struct {
	// Reason is the audit note: required.
	Reason string `json:"reason"`
	// ExpectedVersion, when set, must equal the execution's version.
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
}

// BulkFilter selects the executions of a bulk pause or resume.
type BulkFilter struct {
	// PipelineID keeps one pipeline's executions ("" for all).
	PipelineID string `json:"pipelineId,omitempty"`
	// Statuses keeps these statuses: for a pause QUEUED, WAIT_RETRY,
	// WAITING_EXTERNAL, RUNNING, WAITING_CHILDREN and WAITING_KEY (none:
	// all six); for a resume PAUSED (the default).
	Statuses []store.Status `json:"status,omitempty"`
	// CreatedAfter and CreatedBefore bound the creation time (exclusive;
	// zero: no bound). A job never takes executions created after it
	// started.
	CreatedAfter  time.Time `json:"createdAfter,omitzero"`
	CreatedBefore time.Time `json:"createdBefore,omitzero"`
}

// BulkPauseRequest starts a bulk pause (POST /v1/pauses) or resume (POST
// /v1/resumes).
type BulkPauseRequest struct {
	Filter BulkFilter `json:"filter,omitzero"`
	// Reason goes into every execution's audit log: required.
	Reason string `json:"reason"`
	// RatePerSecond bounds the executions handled per second, 1 to 1000
	// (0: the server's default, 10).
	RatePerSecond int `json:"ratePerSecond,omitempty"`
	// DryRun only counts the matching executions.
	DryRun bool `json:"dryRun,omitempty"`
	// IdempotencyKey, when set, makes the start safe to retry (the
	// Idempotency-Key header), as for a bulk re-drive.
	IdempotencyKey string `json:"-"`
}

// BulkJob is the answer to a started bulk pause or resume.
type BulkJob struct {
	// JobID names the job (PauseProgress's or ResumeProgress's argument).
	JobID string `json:"jobId"`
	// Action is "pause" or "resume".
	Action string `json:"action"`
	// Matched is how many executions the filter selected (see
	// BulkRedrive.Matched).
	Matched int `json:"matched"`
	// Duplicate is true when the idempotency key already named this job.
	Duplicate bool `json:"duplicate"`
}

// BulkProgress is a bulk pause's or resume's progress.
type BulkProgress struct {
	JobID  string `json:"jobId"`
	Action string `json:"action"`
	// Matched is how many executions the filter selected.
	Matched int `json:"matched"`
	// Applied counts the executions paused (or whose pause was
	// requested) or resumed so far.
	Applied int `json:"applied"`
	// Skipped counts those left alone: no longer matching, or no longer
	// pausable (resumable), when their turn came.
	Skipped int `json:"skipped"`
	// Failed counts those whose pause or resume failed (a backend failure).
	Failed int `json:"failed"`
	// Done is true once every matched execution was handled.
	Done bool `json:"done"`
	// DryRun is true for a job that only counted.
	DryRun bool `json:"dryRun"`
}

// Pause pauses an execution (an operator call): PAUSED at once when it
// is queued, retrying, sleeping or awaiting; a request that parks it at
// its next hand-over when it is RUNNING or WAITING_CHILDREN.
func (c *Client) Pause(ctx context.Context, executionID string, req PauseRequest) (Execution, error) {
	return c.pauseCall(ctx, executionID, "/pause", req)
}

// Resume lets a PAUSED execution go on where it was (or withdraws a pause
// request not yet in effect): an operator call.
func (c *Client) Resume(ctx context.Context, executionID string, req PauseRequest) (Execution, error) {
	return c.pauseCall(ctx, executionID, "/resume", req)
}

func (c *Client) pauseCall(ctx context.Context, executionID, suffix string, req PauseRequest) (Execution, error) {
	if executionID == "" {
		return Execution{}, missing("the execution id")
	}
	if strings.TrimSpace(req.Reason) == "" {
		return Execution{}, missing("the reason")
	}
	var e Execution
	_, err := c.doJSON(ctx, call{method: http.MethodPost, path: executionPath(executionID) + suffix, operator: true}, req, &e)
	return e, err
}

// StartPauses starts a durable, rate-limited bulk pause of the executions
// req.Filter selects.
func (c *Client) StartPauses(ctx context.Context, req BulkPauseRequest) (BulkJob, error) {
	return c.startBulk(ctx, "/v1/pauses", req)
}

// StartResumes starts a durable, rate-limited bulk resume.
func (c *Client) StartResumes(ctx context.Context, req BulkPauseRequest) (BulkJob, error) {
	return c.startBulk(ctx, "/v1/resumes", req)
}

func (c *Client) startBulk(ctx context.Context, path string, req BulkPauseRequest) (BulkJob, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return BulkJob{}, missing("the reason")
	}
	k := call{method: http.MethodPost, path: path, operator: true}
	if req.IdempotencyKey != "" {
		k.header = http.Header{IdempotencyKeyHeader: {req.IdempotencyKey}}
	}
	var j BulkJob
	_, err := c.doJSON(ctx, k, req, &j)
	return j, err
}

// PauseProgress returns a bulk pause's progress.
func (c *Client) PauseProgress(ctx context.Context, jobID string) (BulkProgress, error) {
	return c.bulkProgress(ctx, "/v1/pauses/", jobID)
}

// ResumeProgress returns a bulk resume's progress.
func (c *Client) ResumeProgress(ctx context.Context, jobID string) (BulkProgress, error) {
	return c.bulkProgress(ctx, "/v1/resumes/", jobID)
}

func (c *Client) bulkProgress(ctx context.Context, prefix, jobID string) (BulkProgress, error) {
	if jobID == "" {
		return BulkProgress{}, missing("the job id")
	}
	var p BulkProgress
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: prefix + url.PathEscape(jobID), operator: true}, nil, &p)
	return p, err
}
