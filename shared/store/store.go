// Package store defines the execution state store seam: execution rows,
// idempotency keys, leases and the due-work query. Every implementation
// (memstore now, DynamoDB next, an embedded durable store later) passes the
// one conformance suite in storetest.
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
	"time"

	"github.com/qasync/qasync/shared/execution"
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
// Times are kept to the millisecond, except ExpiresAt (the TTL), which is
// kept to the second.
type Store interface {
	// CreateOrGet atomically writes the new execution row and its
	// idempotency key row, or, when the key already exists, returns the
	// execution it maps to with created=false. A key whose stored
	// fingerprint differs from req.Fingerprint returns ErrKeyMismatch.
	CreateOrGet(ctx context.Context, req CreateRequest) (e execution.Execution, created bool, err error)

	// Get reads one execution. Missing or expired rows return ErrNotFound.
	Get(ctx context.Context, key execution.Key) (execution.Execution, error)

	// Claim takes the lease on an execution. It succeeds only if, at the
	// moment of the write, the row's version equals req.ExpectVersion, its
	// status is claimable, it holds no unexpired lease and it is due
	// (NextDueAt <= req.Now). On success the row becomes RUNNING with the
	// new lease and attempt, NextDueAt = LeaseUntil (so an abandoned lease
	// becomes due), and version+1. Otherwise ErrConflict (or ErrNotFound).
	Claim(ctx context.Context, req ClaimRequest) (execution.Execution, error)

	// Renew extends the lease of a RUNNING row held by owner at version,
	// moving LeaseExpiresAt and NextDueAt to until. It does not change the
	// version. If owner or version no longer match: ErrLeaseLost.
	Renew(ctx context.Context, key execution.Key, owner string, version int64, until time.Time) error

	// Update commits a transition: it replaces the row's mutable fields
	// with next's, and sets version = guard.Version+1, if and only if the
	// stored version equals guard.Version and the stored lease owner equals
	// guard.LeaseOwner ("" meaning: no lease held). The identity fields,
	// Input, CreatedAt and ExpiresAt are not changed. On a failed condition
	// it returns ErrLeaseLost when guard.LeaseOwner is set, ErrConflict
	// otherwise.
	Update(ctx context.Context, guard Guard, next execution.Execution) (execution.Execution, error)

	// Due lists rows in the due-work index (NextDueAt set) whose NextDueAt
	// is at or before dueBy, oldest first, at most limit. It reads only the
	// index, never the whole table, and skips expired rows.
	Due(ctx context.Context, dueBy time.Time, limit int) ([]DueRef, error)
}

// CreateRequest is the input of CreateOrGet.
type CreateRequest struct {
	// Execution is the new row: version 1, status QUEUED, ids and input set.
	Execution execution.Execution
	// IdempotencyKey is the tenant-scoped key (client-supplied or derived).
	IdempotencyKey string
	// Fingerprint identifies the request (pipeline + payload digest).
	Fingerprint string
}

// ClaimRequest is the input of Claim.
type ClaimRequest struct {
	Key execution.Key
	// ExpectVersion is the version the caller read.
	ExpectVersion int64
	// Owner names the claiming worker.
	Owner string
	// Now is the claim time; the row must be due and unleased at Now.
	Now time.Time
	// LeaseUntil is the new lease expiry.
	LeaseUntil time.Time
	// Attempt is the attempt number the claim starts.
	Attempt int
}

// Guard is the condition of an Update.
type Guard struct {
	Key execution.Key
	// Version is the version the caller read (or claimed).
	Version int64
	// LeaseOwner is the lease the caller holds; "" when it holds none.
	LeaseOwner string
}

// DueRef is one entry of the due-work index.
type DueRef struct {
	Key        execution.Key
	PipelineID string
	Status     execution.Status
	NextDueAt  time.Time
	DLQPending bool
}

// KeyID is the idempotency key row's partition key: the tenant and the key,
// each length-prefixed, so that no (tenant, key) pair can collide with
// another however either is spelled.
func KeyID(tenantID, key string) string {
	return strconv.Itoa(len(tenantID)) + ":" + tenantID + ":" + strconv.Itoa(len(key)) + ":" + key
}
