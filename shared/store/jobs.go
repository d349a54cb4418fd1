package store

import (
	"context"
	"time"
)

// JobKey identifies an operator job (a bulk re-drive): jobs are scoped to
// a tenant like executions.
type JobKey struct {
	TenantID string
	ID       string
}

// String renders the key for logs.
func (k JobKey) String() string { return k.TenantID + "/" + k.ID }

// Job is the durable record of an operator job, such as a bulk re-drive
// (engine.Runtime.StartRedrives). The state store keeps it beside the
// executions, outside every index, so that a job costs nothing on a
// step's path; what the job does is in State, which the store does not
// read.
type Job struct {
	Key JobKey
	// Version is the OCC version: 1 when created, +1 by every UpdateJob.
	Version int64
	// Active jobs are the ones ActiveJobs returns: a driver (the sweeper)
	// advances them until they finish.
	Active bool
	// State is the job's own document (JSON), at most MaxJobState bytes.
	State []byte
	// CreatedAt and UpdatedAt are kept to the millisecond.
	CreatedAt, UpdatedAt time.Time
	// ExpiresAt is when the record and its pages may be deleted (TTL, to
	// the second; required); reads treat an expired job as absent.
	ExpiresAt time.Time
}

// MaxJobState bounds Job.State, so that a job record stays a small item
// (a bulk re-drive's is about a kilobyte: its filter, reason and list
// cursor), and every update of it costs a few write units at most.
const MaxJobState = 16 << 10

// MaxJobPage is the most ids one job page holds.
const MaxJobPage = 500

// JobStore keeps operator jobs: a record per job, guarded by its version,
// and numbered pages of ids (the executions a bulk re-drive matched),
// written once. The memory and DynamoDB state stores implement it; the
// conformance suite's jobs file checks the contract.
type JobStore interface {
	// CreateJob writes a new job (version 1); ErrConflict when a live job
	// with its key exists.
	CreateJob(ctx context.Context, j Job) error
	// GetJob reads one job; ErrNotFound when missing or expired.
	GetJob(ctx context.Context, key JobKey) (Job, error)
	// UpdateJob replaces the job's Active, State, UpdatedAt and ExpiresAt
	// (required, like at creation) and sets version = expectVersion+1, if
	// the stored version is still expectVersion: otherwise ErrConflict
	// (ErrNotFound when the job is gone).
	UpdateJob(ctx context.Context, j Job, expectVersion int64) (Job, error)
	// ActiveJobs returns every live active job, of every tenant, in any
	// order. It reads no table or index that grows with the executions:
	// jobs are few.
	ActiveJobs(ctx context.Context) ([]Job, error)
	// PutJobPage writes page n (from 0) of a job's ids, at most
	// MaxJobPage of them, replacing what page n held.
	PutJobPage(ctx context.Context, key JobKey, n int, ids []string, expires time.Time) error
	// JobPage reads page n; ErrNotFound when it was never written (or
	// expired).
	JobPage(ctx context.Context, key JobKey, n int) ([]string, error)
}
