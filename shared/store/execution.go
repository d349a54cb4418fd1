// The execution record that every state store keeps, its statuses, and
// the small value types derived from it.

package store

import (
	"fmt"
	"strconv"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// Status is an execution's lifecycle state.
type Status string

// Statuses, as in the seed document.
const (
	// Queued: waiting for a worker to claim the current step.
	Queued Status = "QUEUED"
	// Running: a worker holds the lease and runs the current step.
	Running Status = "RUNNING"
	// WaitRetry: the current step failed and waits for its retry time.
	WaitRetry Status = "WAIT_RETRY"
	// WaitingExternal: parked until an external completion arrives.
	WaitingExternal Status = "WAITING_EXTERNAL"
	// RemoteOutcomeUnknown: parked; a remote attempt's outcome is unknown and
	// automatic retry is suppressed until an operator re-drives it.
	RemoteOutcomeUnknown Status = "REMOTE_OUTCOME_UNKNOWN"
	// Succeeded: terminal; the result is available.
	Succeeded Status = "SUCCEEDED"
	// Failed: terminal failure; when DLQPending is set the dead-letter
	// envelope is still to be published.
	Failed Status = "FAILED"
	// DLQ: terminal; the dead-letter envelope was published.
	DLQ Status = "DLQ"
	// Cancelled: terminal; an operator cancelled the execution (its reason
	// is Execution.CancelReason). Nothing claims, sweeps or retries it.
	Cancelled Status = "CANCELLED"
	// Pending: a map's child created but not yet released (its parent's
	// in-flight limit is reached): not dispatched, not in the sweep index,
	// visible in the list. The end of a sibling releases it (QUEUED).
	Pending Status = "PENDING"
	// WaitingChildren: a parent parked at its map step until every child
	// has ended; in the sweep index at a slow cadence (its look repairs
	// lost counts and releases), never claimed until the last group of
	// children finishes and queues it.
	WaitingChildren Status = "WAITING_CHILDREN"
	// Paused: an operator paused the execution (its reason is
	// Execution.PauseReason). It holds no lease, is not in the sweep
	// index, and nothing claims it; PausedFrom is the status a resume
	// puts it back in (NextDueAt kept: a retry or sleep keeps its time).
	Paused Status = "PAUSED"
)

// Statuses lists every status.
var Statuses = []Status{Queued, Running, WaitRetry, WaitingExternal, RemoteOutcomeUnknown, Succeeded, Failed, DLQ, Cancelled, Pending, WaitingChildren,
	WaitingKey, Paused}

// Terminal reports whether s ends the execution.
func (s Status) Terminal() bool { return s == Succeeded || s == Failed || s == DLQ || s == Cancelled }

// Parked reports whether s is excluded from claim and sweep until an
// operator or an external completion acts.
func (s Status) Parked() bool {
	return s == WaitingExternal || s == RemoteOutcomeUnknown || s == Paused
}

// Claimable reports whether a worker may claim an execution in status s
// (subject to its lease and next-due time).
func (s Status) Claimable() bool { return s == Queued || s == WaitRetry || s == Running }

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reasons carried by failed executions and dead-letter envelopes.
const (
	// ReasonRetryExhausted: the step failed on its last allowed attempt.
	ReasonRetryExhausted = "retry_exhausted"
	// ReasonNonRetryable: the step returned a non-retryable error.
	ReasonNonRetryable = "non_retryable"
	// ReasonRejected: the step ended the execution as a rejected item
	// (pipeline.RejectedError); no dead-letter envelope is published.
	ReasonRejected = "rejected"
)

// Error codes the runtime itself assigns, stored on executions and in
// dead-letter envelopes.
const (
	// CodeWorkerLost: the previous attempt's worker lost its lease (crash,
	// timeout) and no attempt was left for a takeover.
	CodeWorkerLost = "worker_lost"
	// CodePipelineVersionUnavailable: no worker served the execution's
	// pipeline definition within the runtime's version wait.
	CodePipelineVersionUnavailable = "pipeline_version_unavailable"
	// CodePayloadUnreadable: the step's input could not be read or verified.
	CodePayloadUnreadable = "payload_unreadable"
	// CodeOutputUnstorable: the step's output cannot be stored (an unknown
	// or empty encoding, a protobuf payload without a message name, a
	// payload too large to chunk); running it again cannot help.
	CodeOutputUnstorable = "step_output_unstorable"
	// CodeReleaseLimit: the attempt was handed back unfinished more times
	// than the runtime's release limit allows (the message names the last
	// cause); the hand-back then counts as a failed attempt.
	CodeReleaseLimit = "release_limit_exceeded"
)

// Failure describes the last error of an execution.
type Failure struct {
	// Code is a short machine-readable error code.
	Code string `json:"code"`
	// Message is a human-readable message (never payload bytes).
	Message string `json:"message"`
	// TerminalReason is set when the failure ended the execution.
	TerminalReason string `json:"terminalReason,omitempty"`
}

// MaxErrorMessage bounds Failure.Message and audit notes so that a row
// with two full inline payloads still fits DynamoDB's item limit.
const MaxErrorMessage = 2048

// Key identifies an execution: executions are scoped to a tenant.
type Key struct {
	TenantID    string `json:"tenantId"`
	ExecutionID string `json:"executionId"`
}

// String renders the key for logs.
func (k Key) String() string { return k.TenantID + "/" + k.ExecutionID }

// Execution is the row a state store keeps for one submitted execution.
// The comments name each field as the design's data model does; the
// DynamoDB provider stores them under the short attribute names of package
// schema (tenant and execution id together in the partition key).
type Execution struct {
	TenantID    string // tenant_id
	ExecutionID string // execution_id
	PipelineID  string // pipeline_id
	Status      Status // status
	// Version is the OCC version, incremented by every claim and commit.
	Version int64 // version
	// StepIndex is the 0-based index of the current step.
	StepIndex int // current_step_index
	// StepName is the current step's name.
	StepName string // step_name
	// Attempt is the attempt number of the current step, from 1.
	Attempt int // attempt
	// MaxAttempt, when positive, overrides the retry policy's attempt limit
	// for the current step (set by re-drive: exactly one more attempt).
	MaxAttempt int // max_attempt
	// LeaseOwner is the worker holding the lease ("" when none).
	LeaseOwner string // lease_owner
	// LeaseExpiresAt is when the lease lapses.
	LeaseExpiresAt time.Time // lease_expires_epoch_ms
	// NextDueAt is when a QUEUED or WAIT_RETRY row may be claimed (the
	// retry time of WAIT_RETRY). It is a plain attribute, not an index key:
	// moving it costs no index write.
	NextDueAt time.Time // next_due_epoch_ms
	// SweepAt is when the sweeper should look at the row: the sort key of
	// the sparse sweep index (zero: not in it, as terminal rows and parked
	// rows without a timeout are not). The happy path never moves it: it
	// is set at submit, left alone by claims and hand-overs, and removed
	// by the terminal commit; the sweeper pushes it forward when it finds
	// a row that is still healthy, and off-path commits (a retry, a failed
	// step, an await with a timeout) set it to when they need a look.
	SweepAt time.Time // sweep_at_epoch_ms
	// Sweeps counts the sweeper's re-dispatches (and failed dead-letter
	// publishes) since the row last made progress; the sweeper spaces its
	// next look by it (grace x 2^Sweeps, capped). A commit resets it.
	Sweeps int // sweep_count
	// PipelineVersion is the definition the execution is bound to (see
	// pipeline.Pipeline.VersionID), set at submit: only a worker serving
	// that definition runs its steps. Empty on rows written before
	// versions existed (any definition of the pipeline serves them).
	PipelineVersion string // pipeline_version
	// Releases counts how often the current attempt was handed back
	// unfinished (backend failure, shutdown, too little time left); at
	// the runtime's release limit a hand-back counts as a failed attempt.
	Releases int // release_count
	// VersionWaitSince is when a worker first found that it does not serve
	// PipelineVersion and left the execution for one that does (zero while
	// no such wait is going on); after the runtime's version wait the
	// execution ends DLQ with pipeline_version_unavailable.
	VersionWaitSince time.Time // version_wait_since_epoch_ms
	// LastTransitionKey is the key of the last committed transition.
	LastTransitionKey string // last_transition_key
	// IdempotencyKey is the client's key the execution was created under
	// ("" for a key the runtime derived from the request).
	IdempotencyKey string // idempotency_key
	// Fingerprint identifies the request the execution was created for
	// (pipeline, payload descriptor and digest): a later submit with the
	// same key and another fingerprint is refused (ErrKeyMismatch).
	Fingerprint string // fingerprint
	// CreateToken identifies the submit call that created the row (random):
	// a create retried after it landed recognises its own row by it.
	CreateToken string // create_token
	// Input is the submitted payload.
	Input payload.Ref // input
	// Result is the output of the last completed step: the checkpoint the
	// next step starts from, and the result once SUCCEEDED.
	Result payload.Ref // result
	// Error is the last failure, if any.
	Error *Failure // error_code, error_message, terminal_reason
	// DLQPending marks a FAILED execution whose dead-letter envelope is not
	// yet published; the sweeper retries the publish, spaced by Sweeps.
	DLQPending bool // dlq_pending
	// Note is the last operator audit note (re-drive reason).
	Note string // note
	// RedriveCount counts operator re-drives.
	RedriveCount int // redrive_count
	// CancelReason is the operator's reason, set when a cancel was
	// requested: the row is CANCELLED, or still RUNNING until its worker
	// sees the request (at its next lease renewal at the latest).
	CancelReason string // cancel_reason
	// CancelRequestedAt is when the cancel was requested (zero: never).
	CancelRequestedAt time.Time // cancel_requested_epoch_ms
	// PauseReason is the operator's reason of the last pause (kept after
	// a resume, for the audit trail, until the next pause).
	PauseReason string // pause_reason
	// PauseRequestedAt is when the pause in force was asked for: set on a
	// PAUSED row, and on a RUNNING or WAITING_CHILDREN row whose pause is
	// requested (it parks PAUSED at its next hand-over), or a QUEUED or
	// WAIT_RETRY one that needs its map's children (it parks past them);
	// zero otherwise.
	PauseRequestedAt time.Time // pause_requested_epoch_ms
	// PausedFrom is the status a PAUSED row resumes to: QUEUED,
	// WAIT_RETRY or WAITING_EXTERNAL ("" on a row that is not PAUSED).
	PausedFrom Status // paused_from
	// CreatedAt is when the execution was accepted.
	CreatedAt time.Time // created_epoch_ms
	// UpdatedAt is when the row last changed.
	UpdatedAt time.Time // updated_epoch_ms
	// ExpiresAt is when the row may be deleted (TTL); reads treat an
	// expired row as absent. Retention counts from the terminal time: the
	// terminal commit sets it to then + retention, every other commit keeps
	// it at least that far ahead, and a park with a timeout keeps it at
	// least a retention past the timeout, so TTL never deletes a live
	// execution.
	ExpiresAt time.Time // ttl_epoch_s
	// RecordsExpireAt is when the records written for the execution
	// expire at the earliest: the payload parts it references (input,
	// result, a late completion) and its command steps' effect records.
	// The runtime keeps it at least half a retention past ExpiresAt, so
	// that no record the row may need is gone while the row lives: a
	// commit that would move ExpiresAt closer first extends the referenced
	// parts (and a command step extends its record when it runs). Kept to
	// the second, like ExpiresAt.
	RecordsExpireAt time.Time // records_expire_epoch_s
	// Await is the current step's external await, if it started one (the
	// row is then WAITING_EXTERNAL until it is completed or times out).
	Await *Await // await (one map attribute)
	// Parent is set on a map's child: its parent and its place in the map
	// (set at create, never changed).
	Parent *ParentRef // parent (one map attribute)
	// Children is set on a parent once its map step has created its
	// children (the row is then WAITING_CHILDREN until they have ended).
	Children *Children // children (one map attribute)
	// ConcurrencyKey is the value of the pipeline's concurrency key for
	// this execution's input (pipeline.Concurrency), set at submit and
	// never changed ("" when the pipeline has none): at most the
	// pipeline's limit of a key's executions hold a slot (SlotStore);
	// the others wait as WAITING_KEY.
	ConcurrencyKey string // concurrency_key
	// SlotHeld is set once the execution holds a slot of its key, from its
	// first claim until a re-drive (a terminal execution's slot is
	// released right after its terminal commit; a holder whose row is
	// terminal is stale: SlotStale).
	SlotHeld bool // slot_held
	// RateLimit names the pipeline's rate limit (pipeline.RateLimit.Name)
	// and RateKey its key's value for this execution's input, both set at
	// submit and never changed ("" when the pipeline has none): the
	// limit's steps take a token of the bucket (tenant, limit, key) before
	// they run (RateStore).
	RateLimit string // rate_limit
	RateKey   string // rate_key
	// RateReservedAt is when the current step waits for its rate limit's
	// turn, set when it was handed back to wait (zero when it does not
	// wait), and RateReservedVersion the version of the row that hand-back
	// wrote when the step holds a reservation of that start (0: it only
	// waits, holding none). The step runs on the reservation, without
	// reserving again, only when the row is claimed straight from that
	// version (Version is RateReservedVersion+1): any other write in
	// between voids it. A commit of the step's outcome clears both.
	RateReservedAt      time.Time // rate_reserved_at
	RateReservedVersion int64     // rate_reserved_version
	// Priority is the execution's priority, 1 (most urgent) to 5, set at
	// submit and never changed (0 on a row written before priorities:
	// read as the rank's fallback, see WaitRank).
	Priority int // priority
	// Rank orders the execution among those competing with it (the wait
	// line of its concurrency key, a local queue's due items): smaller
	// goes first. Fixed at submit: CreatedAt plus (Priority-1) times the
	// runtime's priority aging, so that a less urgent execution is passed
	// over only by executions submitted less than that much after it
	// (bounded starvation). Zero on a row written before priorities.
	Rank time.Time // rank_epoch_ms
}

// WaitRank is the execution's rank, or its CreatedAt on a row written
// before priorities (as if it had priority 1): the sort key of its
// concurrency key's wait line.
func (e *Execution) WaitRank() time.Time {
	if e.Rank.IsZero() {
		return e.CreatedAt
	}
	return e.Rank
}

// AwaitStatus is the state of an external await.
type AwaitStatus string

// Await statuses.
const (
	// AwaitWaiting: the execution is parked, waiting for the completion.
	AwaitWaiting AwaitStatus = "WAITING"
	// AwaitCompleted: the completion arrived; the execution moved on.
	AwaitCompleted AwaitStatus = "COMPLETED"
	// AwaitTimedOut: the timeout passed first; the step failed with
	// AWAIT_TIMEOUT.
	AwaitTimedOut AwaitStatus = "TIMED_OUT"
)

// Await is an external await started by a step: the execution is parked
// until a completion with the await's resume token arrives.
type Await struct {
	// ID identifies the await; it is derived from execution, step and
	// attempt, so a retried await step starts a new await.
	ID string
	// StepIndex is the index of the step that started the await. An
	// on-time completion leaves the execution QUEUED at that step with the
	// completion as Result; the worker that claims it commits the step with
	// that output without running it again.
	StepIndex int
	// Status is the await's state.
	Status AwaitStatus
	// TimeoutAt is when the await times out (zero: never).
	TimeoutAt time.Time
	// CompletedAt is when the completion was accepted.
	CompletedAt time.Time
	// Digest is the hex SHA-256 of the accepted completion payload.
	Digest string
	// Late marks a completion that arrived after the timeout; it is kept
	// for reconciliation (LatePayload) and changes nothing else.
	Late bool
	// LatePayload is the late completion's payload.
	LatePayload payload.Ref
}

// Key returns the execution's key.
func (e *Execution) Key() Key { return Key{TenantID: e.TenantID, ExecutionID: e.ExecutionID} }

// TransitionKey returns executionId:stepIndex:attempt for the current step.
func (e *Execution) TransitionKey() string {
	return TransitionKey(e.ExecutionID, e.StepIndex, e.Attempt)
}

// TransitionKey formats executionId:stepIndex:attempt.
func TransitionKey(executionID string, stepIndex, attempt int) string {
	return executionID + ":" + strconv.Itoa(stepIndex) + ":" + strconv.Itoa(attempt)
}

// StepIdempotencyKey is stable across attempts of one step of one
// execution: steps pass it to downstream systems so that a retried or
// taken-over step does not repeat a business effect. It names the step,
// not its index, so that a new definition that inserts or removes steps
// never gives another step the same key.
func StepIdempotencyKey(tenantID, executionID, stepName string) string {
	return fmt.Sprintf("%d:%s:%d:%s:%s", len(tenantID), tenantID, len(executionID), executionID, stepName)
}

// Due reports whether a QUEUED or WAIT_RETRY row may be claimed at now:
// NextDueAt is set and at or before now.
func (e *Execution) Due(now time.Time) bool {
	return !e.NextDueAt.IsZero() && !e.NextDueAt.After(now)
}

// Leased reports whether a worker's lease on the row is still in force at
// now.
func (e *Execution) Leased(now time.Time) bool {
	return e.LeaseOwner != "" && e.LeaseExpiresAt.After(now)
}

// Expired reports whether the row's TTL has passed at now.
func (e *Execution) Expired(now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}

// Truncate shortens s to at most n bytes on a rune boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
