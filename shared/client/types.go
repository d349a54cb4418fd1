package client

import (
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// The request and response documents of the API. Their JSON forms are the
// API's, member for member, as its OpenAPI document (GET /openapi.json)
// gives them: a required member is always encoded, an optional one is left
// out when zero, so that encoding a decoded response gives back the
// document the server sent. Times are RFC 3339.

// SubmitRequest is a submission: POST /v1/pipelines/{pipelineId}/executions.
type SubmitRequest struct {
	// PipelineID names the pipeline to run.
	PipelineID string
	// IdempotencyKey, when set, makes the submission idempotent within the
	// tenant: the same key and body return the same execution (200).
	IdempotencyKey string
	// Body is the pipeline's input.
	Body []byte
	// ContentType is Body's media type (default application/json).
	ContentType string
	// MessageType names the protobuf message of an
	// application/x-protobuf body.
	MessageType string
	// Priority is the execution's priority, 1 (most urgent) to 5 (least);
	// 0 takes the pipeline's default (3 unless it declares one). Sent as
	// the priority query parameter.
	Priority int
}

// Submission is the answer to a submission.
type Submission struct {
	// ExecutionID identifies the execution within its tenant.
	ExecutionID string `json:"executionId"`
	// PipelineID is the pipeline the execution runs.
	PipelineID string `json:"pipelineId"`
	// Status is the execution's status when the answer was made.
	Status store.Status `json:"status"`
	// Duplicate is true when the idempotency key already named this
	// execution (HTTP 200): nothing new was stored or started.
	Duplicate bool `json:"duplicate"`
	// StatusURL is the path of the execution's status document.
	StatusURL string `json:"statusUrl"`
	// ResultURL is the path of its result.
	ResultURL string `json:"resultUrl"`
	// SubmittedAt is when the execution was created.
	SubmittedAt time.Time `json:"submittedAt"`
}

// Execution is an execution's status document (GET /v1/executions/{id},
// and the answer of a re-drive, a cancel and an await completion).
type Execution struct {
	// ExecutionID identifies the execution within its tenant.
	ExecutionID string `json:"executionId"`
	// PipelineID is the pipeline the execution runs.
	PipelineID string `json:"pipelineId"`
	// PipelineVersion is the pipeline definition it is bound to.
	PipelineVersion string `json:"pipelineVersion,omitempty"`
	// IdempotencyKey is the Idempotency-Key it was submitted under, ""
	// for none (or a key the server derived: SERVER_KEY_ONLY).
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Status is the lifecycle status; Status.Terminal() says whether it
	// can still change by itself.
	Status store.Status `json:"status"`
	// StepIndex is the 0-based index of the current step.
	StepIndex int `json:"stepIndex"`
	// StepName is the current step's name.
	StepName string `json:"stepName"`
	// Attempt is the current step's attempt, from 1.
	Attempt int `json:"attempt"`
	// Version is the row version (a re-drive's ExpectedVersion).
	Version int64 `json:"version"`
	// CreatedAt is when the execution was submitted.
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is when it last changed.
	UpdatedAt time.Time `json:"updatedAt"`
	// NextDueAt is when a QUEUED or WAIT_RETRY execution may run next.
	NextDueAt time.Time `json:"nextDueAt,omitzero"`
	// VersionWaitSince is set while it waits for a worker serving its
	// pipeline version.
	VersionWaitSince time.Time `json:"versionWaitSince,omitzero"`
	// ConcurrencyKey is the execution's concurrency key, computed from its
	// input at submit ("" when its pipeline has none or the input gives
	// none): at most its pipeline's limit of one key's executions run at
	// once (client.PipelineConcurrency).
	ConcurrencyKey string `json:"concurrencyKey,omitempty"`
	// Priority is the execution's priority, 1 (most urgent) to 5, given at
	// submit (SubmitRequest.Priority) or its pipeline's default; 0 (absent)
	// on an execution submitted before priorities.
	Priority int `json:"priority,omitempty"`
	// KeyWaitSince is set while the execution is WAITING_KEY: since when
	// it waits for a slot of its concurrency key.
	KeyWaitSince time.Time `json:"keyWaitSince,omitzero"`
	// RateLimit names the rate limit of the execution's pipeline
	// (client.PipelineRateLimit) and RateKey its bucket's key, computed
	// from its input at submit ("" when its pipeline has none).
	RateLimit string `json:"rateLimit,omitempty"`
	RateKey   string `json:"rateKey,omitempty"`
	// RateLimitedUntil is set while the execution (QUEUED) waits for its
	// rate limit's turn: when its limited step is due to start.
	RateLimitedUntil time.Time `json:"rateLimitedUntil,omitzero"`
	// Error is the last failure, nil when there is none.
	Error *ExecutionError `json:"error,omitempty"`
	// Await is the current (or last) external await, nil when none.
	Await *Await `json:"await,omitempty"`
	// CancelReason is the operator's reason once a cancel was requested
	// (the execution is CANCELLED, or RUNNING until its step sees it).
	CancelReason string `json:"cancelReason,omitempty"`
	// CancelRequestedAt is when the cancel was requested (zero: never).
	CancelRequestedAt time.Time `json:"cancelRequestedAt,omitzero"`
	// Pause is the operator's pause in force: the execution is PAUSED, or
	// its pause is requested (RUNNING or WAITING_CHILDREN until its next
	// hand-over); nil otherwise.
	Pause *PauseState `json:"pause,omitempty"`
	// Parent links a map's child to its parent, nil for an execution
	// submitted on its own.
	Parent *ParentLink `json:"parent,omitempty"`
	// Children are the counts of the map the execution waits for
	// (WAITING_CHILDREN) or last waited for, nil when it has none. The
	// status route reads every count; a list answer carries the total
	// only.
	Children *ChildCounts `json:"children,omitempty"`
}

// ParentLink is a child's link to its parent.
type ParentLink struct {
	// ExecutionID is the parent's execution id (same tenant).
	ExecutionID string `json:"executionId"`
	// StepIndex is the index of the parent's map step.
	StepIndex int `json:"stepIndex"`
	// Index is the child's element index in the map's input.
	Index int `json:"index"`
	// Round is the map's round the child ran in: 0, or n for the n-th
	// re-drive of the map's failed children.
	Round int `json:"round,omitempty"`
}

// ChildCounts are a map's counts: Succeeded + Failed children have ended
// (Failed includes rejected items), Running are released and not ended,
// Pending wait for a slot. After a re-drive of the map's failed children
// (Round > 0) the counts are over every element: those not run again
// count as they ended.
type ChildCounts struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Running   int `json:"running"`
	Pending   int `json:"pending"`
	// Round is the map's round: 0, or the number of re-drives of its
	// failed children.
	Round int `json:"round,omitempty"`
}

// ExecutionError is the failure of a status document.
type ExecutionError struct {
	// Code is the machine-readable error code.
	Code string `json:"code"`
	// Message is the human-readable message.
	Message string `json:"message"`
	// TerminalReason is "retry_exhausted" or "non_retryable" when the
	// failure ended the execution, "" while a retry is pending.
	TerminalReason string `json:"terminalReason"`
}

// Await is the external await of a status document.
type Await struct {
	// AwaitID identifies the await (CompleteAwait's awaitID).
	AwaitID string `json:"awaitId"`
	// Status is WAITING, COMPLETED or TIMED_OUT.
	Status store.AwaitStatus `json:"status"`
	// TimeoutAt is zero when the await has no timeout.
	TimeoutAt time.Time `json:"timeoutAt,omitzero"`
	// CompletedAt is when a completion was accepted.
	CompletedAt time.Time `json:"completedAt,omitzero"`
	// Late is true when a completion arrived after the timeout.
	Late bool `json:"late"`
}

// Result is a succeeded execution's result: the bytes of its last step.
type Result struct {
	// ContentType is the bytes' media type.
	ContentType string
	// MessageType names the protobuf message of a protobuf result.
	MessageType string
	// Data is the result.
	Data []byte
}

// RedriveRequest is the body of a re-drive of one execution.
type RedriveRequest struct {
	// Reason is the audit note: required.
	Reason string `json:"reason"`
	// ExpectedVersion, when set, must equal the execution's version.
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
	// ConfirmedNoRemoteEffect states that the remote invocation of a
	// REMOTE_OUTCOME_UNKNOWN execution can make no more effects; required
	// to re-drive that status.
	ConfirmedNoRemoteEffect bool `json:"confirmedNoRemoteEffect,omitempty"`
}

// CancelRequest is the body of a cancel.
type CancelRequest struct {
	// Reason is the audit note: required.
	Reason string `json:"reason"`
}

// ListQuery selects executions of the caller's tenant, newest first:
// GET /v1/executions.
type ListQuery struct {
	// PipelineID keeps one pipeline's executions ("" for all).
	PipelineID string
	// Statuses keeps executions in one of these statuses (none for all).
	Statuses []store.Status
	// Limit is the page size, 1 to 500 (0: the server's default, 50).
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
	// IdempotencyKey, when set, looks up the one live execution the
	// caller's tenant submitted under this key: the page holds it, or
	// nothing. It cannot be combined with PipelineID, Statuses or Cursor
	// (a 400 *Error).
	IdempotencyKey string
}

// ExecutionPage is one page of a list.
type ExecutionPage struct {
	// Executions are newest first.
	Executions []Execution `json:"executions"`
	// NextCursor continues the list; "" on the last page.
	NextCursor string `json:"nextCursor,omitempty"`
}

// History is an execution's history, or one page of it: GET
// /v1/executions/{id}/history.
type History struct {
	// ExecutionID is the execution's id.
	ExecutionID string `json:"executionId"`
	// Events are in commit order, Seq from 1 without gaps over the whole
	// history (a page's events go on from its cursor's).
	Events []Event `json:"events"`
	// NextCursor continues the history: the cursor of the next page; ""
	// on the last page (and in what Client.History returns, which has
	// followed every page).
	NextCursor string `json:"nextCursor,omitempty"`
	// EndCursor is where these events end, on the last page too: read
	// after it later (HistoryPageOptions.Cursor, Client.HistoryAfter) and
	// only the events that joined the history since come back. "" when
	// no event was read from the start (or from a server that predates
	// paging, which answers the whole history every time).
	EndCursor string `json:"endCursor,omitempty"`
}

// HistoryPageOptions select one page of a history (Client.HistoryPage).
type HistoryPageOptions struct {
	// Limit is the most events of the page, 1 to MaxHistoryPage (0: the
	// server's default, DefaultHistoryPage). The server may answer fewer
	// and a NextCursor when the events are unusually large (its byte
	// budget per answer).
	Limit int
	// Cursor reads after a previous page's NextCursor or EndCursor ("":
	// from the first event).
	Cursor string
}

// The history route's page sizes.
const (
	// DefaultHistoryPage is the page size of a history request without
	// a limit.
	DefaultHistoryPage = 100
	// MaxHistoryPage is the largest limit a history request takes
	// (history.MaxPage).
	MaxHistoryPage = history.MaxPage
)

// Event is one entry of a history.
type Event struct {
	// Seq numbers the events from 1.
	Seq int `json:"seq"`
	// Type is the event's kind (history.StepStarted, ...).
	Type history.Type `json:"type"`
	// At is when the change was committed.
	At time.Time `json:"at"`
	// StepIndex is the 0-based index of the step the event is about.
	StepIndex int `json:"stepIndex"`
	// StepName is that step's name.
	StepName string `json:"stepName"`
	// Attempt is the step's attempt.
	Attempt int `json:"attempt"`
	// Status is the execution's status after the event.
	Status store.Status `json:"status"`
	// Error is the step's failure (STEP_FAILED, DEAD_LETTERED).
	Error *EventError `json:"error,omitempty"`
	// RetryAt is when a failed step runs again (STEP_FAILED with a retry).
	RetryAt time.Time `json:"retryAt,omitzero"`
	// WakeAt is when a sleep step's execution wakes up (SLEEPING).
	WakeAt time.Time `json:"wakeAt,omitzero"`
	// Worker is the lease owner (STEP_STARTED, LEASE_TAKEN_OVER).
	Worker string `json:"worker,omitempty"`
	// Reason is an operator's reason (REDRIVEN: "redrive <id>: <reason>"
	// for a bulk re-drive's; CANCEL_REQUESTED, CANCELLED), an outcome's
	// (OUTCOME_UNKNOWN), or what happened (AWAITING, AWAIT_COMPLETED: the
	// await; LEASE_TAKEN_OVER: whose lease lapsed).
	Reason string `json:"reason,omitempty"`
}

// EventError is the failure of an event.
type EventError struct {
	// Code is the machine-readable error code.
	Code string `json:"code"`
	// Message is the human-readable message.
	Message string `json:"message"`
}

// RedriveFilter selects the executions of a bulk re-drive.
type RedriveFilter struct {
	// PipelineID keeps one pipeline's executions ("" for all).
	PipelineID string `json:"pipelineId,omitempty"`
	// Statuses keeps these statuses: DLQ and/or FAILED, the statuses a
	// re-drive takes without confirmation (none: both).
	Statuses []store.Status `json:"status,omitempty"`
	// ErrorCode keeps executions whose last error has this code.
	ErrorCode string `json:"errorCode,omitempty"`
	// CreatedAfter keeps executions created after it (exclusive; zero: no
	// bound).
	CreatedAfter time.Time `json:"createdAfter,omitzero"`
	// CreatedBefore keeps executions created before it (exclusive; zero:
	// no bound). A job never takes executions created after it started.
	CreatedBefore time.Time `json:"createdBefore,omitzero"`
}

// BulkRedriveRequest starts a bulk re-drive: POST /v1/redrives.
type BulkRedriveRequest struct {
	// Filter selects the executions.
	Filter RedriveFilter `json:"filter,omitzero"`
	// Reason is every re-drive's audit note: required.
	Reason string `json:"reason"`
	// RatePerSecond bounds the re-drives per second, 1 to 1000 (0: the
	// server's default, 10).
	RatePerSecond int `json:"ratePerSecond,omitempty"`
	// DryRun counts the matching executions and re-drives none.
	DryRun bool `json:"dryRun,omitempty"`
	// IdempotencyKey, when set, makes the start safe to retry (sent as
	// the Idempotency-Key header): the same key and request answer the
	// job the first one started (HTTP 200, Duplicate), the key with
	// another request is a 422 *Error. Without one every call starts a
	// new job. NewIdempotencyKey makes one to reuse across retries.
	IdempotencyKey string `json:"-"`
}

// BulkRedrive is the answer to a started bulk re-drive.
type BulkRedrive struct {
	// RedriveID names the job (RedriveProgress's argument).
	RedriveID string `json:"redriveId"`
	// Matched is how many executions the filter selected: final, unless
	// the scan was too large to finish before the answer (then
	// RedriveProgress's Matched grows until the scan ends).
	Matched int `json:"matched"`
	// Duplicate is true when the idempotency key already named this job
	// (HTTP 200): nothing new was started.
	Duplicate bool `json:"duplicate"`
}

// RedriveProgress is a bulk re-drive's progress: GET /v1/redrives/{id}.
type RedriveProgress struct {
	// RedriveID names the job.
	RedriveID string `json:"redriveId"`
	// Matched is how many executions the filter selected.
	Matched int `json:"matched"`
	// Redriven counts the executions re-driven so far.
	Redriven int `json:"redriven"`
	// Skipped counts those left alone: no longer matching, or not
	// re-drivable, when their turn came.
	Skipped int `json:"skipped"`
	// Failed counts those whose re-drive failed (a backend failure).
	Failed int `json:"failed"`
	// Done is true once every matched execution was handled (a dry run
	// is done when it answers).
	Done bool `json:"done"`
	// DryRun is true for a job that only counted.
	DryRun bool `json:"dryRun"`
}

// DeadLetterQuery selects dead-letter records of the caller's tenant,
// newest first: GET /v1/dead-letters.
type DeadLetterQuery struct {
	// PipelineID keeps one pipeline's records ("" for all).
	PipelineID string
	// Limit is the page size, 1 to 500 (0: the server's default, 50).
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
	// OutstandingOnly keeps the records whose execution still ends in
	// their failure (DeadLetter.Outstanding). A page then reads a bounded
	// number of records: it may hold fewer than Limit (even none) and
	// still have a NextCursor.
	OutstandingOnly bool
}

// DeadLetterPage is one page of dead-letter records.
type DeadLetterPage struct {
	// DeadLetters are newest first.
	DeadLetters []DeadLetter `json:"deadLetters"`
	// NextCursor continues the list; "" on the last page.
	NextCursor string `json:"nextCursor,omitempty"`
}

// DeadLetter is one dead-letter record: the envelope of an execution's
// terminal failure, as the dead-letter consumer recorded it.
type DeadLetter struct {
	// ID is the record's id (the failed attempt's transition key).
	ID string `json:"id"`
	// ExecutionID is the dead-lettered execution.
	ExecutionID string `json:"executionId"`
	// PipelineID is the pipeline it runs.
	PipelineID string `json:"pipelineId"`
	// StepIndex is the 0-based index of the step that failed.
	StepIndex int `json:"stepIndex"`
	// StepName is that step's name.
	StepName string `json:"stepName"`
	// TransitionKey identifies the failed attempt's transition.
	TransitionKey string `json:"transitionKey"`
	// TerminalReason is why the failure ended the execution
	// (retry_exhausted, non_retryable, ...).
	TerminalReason string `json:"terminalReason"`
	// ErrorCode is the failure's machine-readable code.
	ErrorCode string `json:"errorCode"`
	// ErrorMessage is its human-readable message.
	ErrorMessage string `json:"errorMessage"`
	// RetriesObserved is how many retries the failed step had.
	RetriesObserved int `json:"retriesObserved"`
	// FailedAt is when the step failed.
	FailedAt time.Time `json:"failedAt"`
	// RecordedAt is when the record was written.
	RecordedAt time.Time `json:"recordedAt"`
	// CurrentStatus is the execution's status now: SUCCEEDED once a
	// re-drive made it through, DLQ while it still ends in a failure;
	// "" when its row is gone (it expired a retention after it ended,
	// while the record is kept longer).
	CurrentStatus store.Status `json:"currentStatus,omitempty"`
	// CurrentVersion is the execution's version now (0 when gone): the
	// expectedVersion of a re-drive.
	CurrentVersion int64 `json:"currentVersion,omitempty"`
	// Outstanding is true while the execution still ends in this
	// record's failure: DLQ or FAILED at this record's transition, not
	// re-driven since (a re-drive that failed again leaves a newer
	// record, the outstanding one).
	Outstanding bool `json:"outstanding"`
}

// DeadLetterCounts are the caller's dead-letter records counted by error
// code: GET /v1/dead-letters/counts. The count covers the newest records
// only, up to a bound (5,000): Complete says whether that was all of
// them.
type DeadLetterCounts struct {
	// ByCode counts the records by error code.
	ByCode map[string]int `json:"byCode"`
	// OutstandingByCode counts the outstanding records
	// (DeadLetter.Outstanding) by error code.
	OutstandingByCode map[string]int `json:"outstandingByCode"`
	// Scanned is how many records were counted.
	Scanned int `json:"scanned"`
	// Complete is false when there are more records than the bound (or
	// may be): the counts are then of the newest Scanned.
	Complete bool `json:"complete"`
}
