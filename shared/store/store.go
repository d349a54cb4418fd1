// Package store defines the execution state store seam: execution rows
// (Execution, its statuses and the small value types derived from it),
// idempotency keys, leases and the due-work query. Every implementation
// (in memory, embedded, DynamoDB) passes the state store suite of package
// backendtest (Provider.State).
//
// Every write is conditional. Claims, renewals and commits are guarded by
// the row version (optimistic concurrency) and, where a worker holds the
// lease, by the lease owner; a failed condition surfaces as ErrConflict or
// ErrLeaseLost, never as a backend error type.
package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Errors every Store returns (possibly wrapped; test with errors.Is).
var (
	// ErrNotFound: no such execution for this tenant (or it expired).
	ErrNotFound = errors.New("store: execution not found")
	// ErrConflict: a conditional write lost to a concurrent change
	// (version moved, row not claimable, or key already taken).
	ErrConflict = errors.New("store: conflicting concurrent update")
	// ErrLeaseLost: the caller no longer holds the lease it wrote under.
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrKeyMismatch: the idempotency key is already bound to a different
	// request (another pipeline or payload).
	ErrKeyMismatch = errors.New("store: idempotency key reused with a different request")
	// ErrUnavailable: the backend throttled or failed (5xx) even after the
	// client's retries; the call may succeed if repeated later.
	ErrUnavailable = errors.New("store: backend unavailable, retry later")
)

// Store is the execution state store seam.
//
// A store keeps one row per slot (Slot of the execution id): creates are
// conditional on the slot, and every other call names the full execution
// id, so that an incarnation of a slot never reads or changes another's
// row (Answers). GetBatch, Claim, Renew, Update and Reschedule of an id
// whose slot holds another incarnation behave as for a missing row.
//
// Times are kept to the millisecond, except ExpiresAt (the TTL), which is
// kept to the second.
//
// The sweep index (Execution.SweepAt) is the only index a
// transition may move, and the happy path does not move it: Claim and
// Renew never touch it and Update leaves it alone when the guard says
// KeepSweep. Everything else about a row is a plain attribute.
//
// Every state store lists (Lister): the operator plane's list of a
// tenant's executions reads it, and listing writes nothing.
type Store interface {
	Lister

	// CreateOrGet writes the new execution row (one conditional write),
	// or, when a live row with its key exists, returns that row with
	// created=false: the runtime derives the execution id from the tenant
	// and the idempotency key, so the row's key IS the idempotency key and
	// no other record is needed. An existing row whose Fingerprint differs
	// from the new one's returns ErrKeyMismatch; one with the same
	// CreateToken is this very create, retried after it had in fact landed
	// (an unknown outcome), and reports created=true.
	CreateOrGet(ctx context.Context, req CreateRequest) (e Execution, created bool, err error)

	// Get reads one execution. Missing or expired rows return ErrNotFound,
	// and so does the row of another incarnation of the id's slot (see
	// IncarnationSep). An id without an incarnation names its slot: Get
	// returns the slot's live row, whatever its incarnation (a look-up by
	// idempotency key).
	Get(ctx context.Context, key Key) (Execution, error)

	// GetBatch reads several executions (the sweeper's look at the rows
	// the sweep index returned), strongly consistent, in any order;
	// missing and expired rows are left out.
	GetBatch(ctx context.Context, keys []Key) ([]Execution, error)

	// Claim takes the lease on an execution. It succeeds only if, at the
	// moment of the write, the row's version equals req.ExpectVersion and
	// either its status is QUEUED or WAIT_RETRY with NextDueAt at or
	// before req.DueBy, or it is RUNNING with a lease that expired at or
	// before req.TakeoverBy. On success the row becomes RUNNING with the
	// new lease, attempt and release count, and version+1; NextDueAt and
	// SweepAt are not changed. Otherwise ErrConflict (or ErrNotFound).
	Claim(ctx context.Context, req ClaimRequest) (Execution, error)

	// Renew extends the lease of a RUNNING row held by owner at version,
	// moving LeaseExpiresAt to until. It changes nothing else (not the
	// version, not the sweep index). If owner or version no longer match:
	// ErrLeaseLost.
	Renew(ctx context.Context, key Key, owner string, version int64, until time.Time) error

	// Update commits a transition: it replaces the row's mutable fields
	// with next's, and sets version = guard.Version+1, if and only if the
	// stored version equals guard.Version and the stored lease owner equals
	// guard.LeaseOwner ("" meaning: no lease held). The identity fields
	// (tenant, execution id, pipeline id and version, idempotency key),
	// Input and CreatedAt are not changed; ExpiresAt is set from next when
	// next's is not zero. SweepAt and Sweeps are set from next (a zero
	// SweepAt leaves the sweep index) unless guard.KeepSweep, which leaves
	// the stored ones as they are. On a failed condition it returns
	// ErrLeaseLost when guard.LeaseOwner is set, ErrConflict otherwise.
	Update(ctx context.Context, guard Guard, next Execution) (Execution, error)

	// Reschedule moves a row's SweepAt from from to to (zero: out of the
	// sweep index) and sets its Sweeps, if its stored SweepAt is still
	// from; it changes nothing else (not the version). It is how the
	// sweeper pushes the next look at a row forward. A SweepAt that moved
	// meanwhile returns ErrConflict; a missing row ErrNotFound.
	Reschedule(ctx context.Context, key Key, from, to time.Time, sweeps int) error

	// Due pages through the sweep index: rows whose SweepAt is at or
	// before q.By, oldest first, at most q.Limit per page, continuing
	// after q.Cursor (from the previous page's DuePage.Cursor; empty for
	// the first page). It reads only the index, never the whole table,
	// and skips expired rows. A cursor is opaque and valid only with the
	// same q.By.
	Due(ctx context.Context, q DueQuery) (DuePage, error)
}

// CreateRequest is the input of CreateOrGet.
type CreateRequest struct {
	// Execution is the new row: version 1, status QUEUED, ids, input,
	// Fingerprint and CreateToken set.
	Execution Execution
}

// ClaimRequest is the input of Claim.
type ClaimRequest struct {
	Key Key
	// ExpectVersion is the version the caller read.
	ExpectVersion int64
	// Owner names the claiming worker.
	Owner string
	// Now is the claim time (the row's UpdatedAt).
	Now time.Time
	// DueBy is the latest NextDueAt a QUEUED or WAIT_RETRY row may have:
	// Now plus the clock-skew tolerance.
	DueBy time.Time
	// TakeoverBy is the latest LeaseExpiresAt a RUNNING row's lapsed lease
	// may have for a takeover: Now minus the clock-skew tolerance.
	TakeoverBy time.Time
	// LeaseUntil is the new lease expiry.
	LeaseUntil time.Time
	// Attempt is the attempt number the claim starts.
	Attempt int
	// Releases is the release count the row gets (kept for the same
	// attempt, 0 for a new one).
	Releases int
	// SweepAt, when set, moves the sweeper's next look to it and resets
	// the re-dispatch count (Sweeps) in the claim's own write. The engine
	// sets it when the sweeper had re-dispatched the row (its looks
	// spaced out for lost work items): a worker that dies right after
	// the claim, or whose claim's answer is lost, is then taken over
	// within the claim's lease. Zero leaves the sweep as it is: a claim
	// on the happy path writes no index key.
	SweepAt time.Time
}

// Guard is the condition of an Update.
type Guard struct {
	Key Key
	// Version is the version the caller read (or claimed).
	Version int64
	// LeaseOwner is the lease the caller holds; "" when it holds none.
	LeaseOwner string
	// KeepSweep leaves the stored SweepAt and Sweeps as they are (the
	// sweeper may have pushed them since the caller read the row): a
	// hand-over to the next step then costs no index write.
	KeepSweep bool
}

// DueQuery is the input of Due.
type DueQuery struct {
	// By is the latest SweepAt returned.
	By time.Time
	// Limit bounds the refs of one page (at least 1).
	Limit int
	// Cursor continues a previous page ("" for the first).
	Cursor string
}

// DuePage is one page of the sweep index.
type DuePage struct {
	Refs []DueRef
	// Cursor continues after this page; "" when the index holds no more
	// rows due by the query's By.
	Cursor string
}

// DueRef is one entry of the sweep index.
type DueRef struct {
	// Key is the row's; its execution id may be a bare slot (an index
	// that does not hold the incarnation), which GetBatch answers with
	// the slot's live row.
	Key        Key
	PipelineID string
	SweepAt    time.Time
}

// Claimable is Claim's condition on one row (besides the version): a
// QUEUED or WAIT_RETRY row due by dueBy, or a RUNNING row whose lease
// expired by takeoverBy. Stores that evaluate the condition in Go (memory,
// embedded) use it; the DynamoDB store writes the same as an expression.
func Claimable(row *Execution, dueBy, takeoverBy time.Time) bool {
	switch row.Status {
	case Queued, WaitRetry:
		return row.Due(dueBy)
	case Running:
		return !row.LeaseExpiresAt.After(takeoverBy)
	}
	return false
}

// IncarnationSep separates the two parts of an execution id the runtime
// issues, "<slot>.<incarnation>". The slot names the row's place in a
// store: derived from the tenant and the idempotency key (so that a
// duplicate submit finds the live row with one conditional write), or
// random without a key. The incarnation is random, new for every create:
// a key reused after its execution's row expired makes a new execution
// with another id, which shares nothing with the old one (no step key,
// command id, await token, dead-letter record, history or payload).
// A slot never contains IncarnationSep: an id without one names a slot
// (indexes answer with bare slots), so a slot with one would read as an
// id of another slot.
const IncarnationSep = "."

// Slot returns the part of an execution id that names its row's place in
// a store: the id up to its last IncarnationSep, or the whole id when it
// has none (an id without an incarnation).
func Slot(executionID string) string {
	if i := strings.LastIndex(executionID, IncarnationSep); i > 0 {
		return executionID[:i]
	}
	return executionID
}

// Incarnation returns the part of an execution id after its last
// IncarnationSep ("" when it has none).
func Incarnation(executionID string) string {
	if i := strings.LastIndex(executionID, IncarnationSep); i > 0 {
		return executionID[i+1:]
	}
	return ""
}

// Answers reports whether the stored row with execution id stored answers
// a read of asked: the same id, or asked is a bare slot (no incarnation)
// and stored lives in it. Writes require the very id (stored == asked):
// a writer that read one incarnation never changes another.
func Answers(asked, stored string) bool {
	return asked == stored || (Incarnation(asked) == "" && Slot(stored) == asked)
}

// KeyID joins a tenant and a key, each length-prefixed, so that no
// (tenant, key) pair can collide with another however either is spelled.
func KeyID(tenantID, key string) string {
	return strconv.Itoa(len(tenantID)) + ":" + tenantID + ":" + strconv.Itoa(len(key)) + ":" + key
}
