package deadletter

import (
	"context"
	"errors"
	"time"
)

// Record kinds.
const (
	// KindExecution records an execution's dead-letter envelope.
	KindExecution = "execution"
	// KindPoison records a work item the work queue gave up on (moved to
	// the poison queue by its redrive policy).
	KindPoison = "poison"
)

// Record is the dead-letter consumer's durable note of one dead letter.
// It never holds payload bytes.
type Record struct {
	// ID identifies the record and makes recording idempotent: the
	// envelope's transition key for KindExecution, "poison:" + the SQS
	// message id for KindPoison.
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	TenantID    string `json:"tenantId,omitempty"`
	ExecutionID string `json:"executionId,omitempty"`
	// Envelope is set for KindExecution.
	Envelope *Envelope `json:"envelope,omitempty"`
	// MessageID and ReceiveCount describe the SQS message (KindPoison).
	MessageID    string `json:"messageId,omitempty"`
	ReceiveCount int    `json:"receiveCount,omitempty"`
	// RecordedAt is when the record was first stored.
	RecordedAt time.Time `json:"recordedAt"`
	// ExpiresAt is when the record may be deleted (zero: never).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Recorder stores dead-letter records. Implementations: in memory,
// DynamoDB; both pass the recorder suite of package backendtest
// (Provider.Recorder).
type Recorder interface {
	// Put stores r unless a record with r.ID exists. created reports
	// whether this call stored it; a repeat is not an error.
	Put(ctx context.Context, r Record) (created bool, err error)
	// Get reads the record with id, or returns ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)
}

// ListQuery selects a page of one tenant's dead-letter records, newest
// first.
type ListQuery struct {
	// TenantID is required.
	TenantID string
	// PipelineID keeps one pipeline's records ("" for all).
	PipelineID string
	// Limit is the page size, 1 to 500 (0: 50).
	Limit int
	// Cursor continues the query from a previous page ("" for the first).
	Cursor string
}

// ListPage is one page of dead-letter records.
type ListPage struct {
	Records []Record
	// Cursor continues the query ("" on the last page).
	Cursor string
}

// Lister lists a tenant's dead-letter records (the operator plane's
// GET /v1/dead-letters). Recorders implement it; poison records, which
// carry no tenant, are not listed.
type Lister interface {
	List(ctx context.Context, q ListQuery) (ListPage, error)
}

// ErrNotFound reports a missing record.
var ErrNotFound = errors.New("deadletter: record not found")
