package deadletter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
// GET /v1/dead-letters), newest first (RecordedAt), each record once
// across the pages of a query, a cursor of another query refused with
// ErrInvalidCursor. Recorders implement it; poison records are not
// listed (Record.Listed).
type Lister interface {
	List(ctx context.Context, q ListQuery) (ListPage, error)
}

// ErrNotFound reports a missing record.
var ErrNotFound = errors.New("deadletter: record not found")

// RecordRetention is how long a dead-letter record is kept (its
// ExpiresAt, applied by the table's TTL): 90 days, three times the
// default execution TTL, so the record outlives the execution it
// describes and leaves a quarter for the follow-up.
const RecordRetention = 90 * 24 * time.Hour

// ExecutionRecord is the KindExecution record of env, recorded at now and
// kept RecordRetention: what the dead-letter consumer stores for every
// envelope it reads.
func ExecutionRecord(env Envelope, now time.Time) Record {
	return Record{
		ID: env.TransitionKey, Kind: KindExecution, TenantID: env.TenantID, ExecutionID: env.ExecutionID, Envelope: &env,
		RecordedAt: now, ExpiresAt: now.Add(RecordRetention),
	}
}

// Listed reports whether a Lister lists r: an execution's record with a
// tenant (poison records are not listed).
func (r Record) Listed() bool {
	return r.Kind == KindExecution && r.TenantID != "" && r.Envelope != nil
}

// Page sizes of a ListQuery.
const (
	// MaxListLimit is the largest page a List call returns.
	MaxListLimit = 500
	// DefaultListLimit is the page size when a ListQuery's Limit is zero.
	DefaultListLimit = 50
)

// Errors of List (test with errors.Is).
var (
	// ErrInvalidListQuery: no tenant, or a limit outside 0..MaxListLimit.
	ErrInvalidListQuery = errors.New("deadletter: invalid list query")
	// ErrInvalidCursor: the cursor is not one a page of this query returned.
	ErrInvalidCursor = errors.New("deadletter: invalid cursor")
)

// Validate checks q (ErrInvalidListQuery, wrapped with what is wrong).
func (q ListQuery) Validate() error {
	switch {
	case q.TenantID == "":
		return fmt.Errorf("%w: a tenant is required", ErrInvalidListQuery)
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalidListQuery, q.Limit, MaxListLimit)
	}
	return nil
}

// PageSize is the page size q asks for (DefaultListLimit when zero).
func (q ListQuery) PageSize() int {
	if q.Limit == 0 {
		return DefaultListLimit
	}
	return q.Limit
}

// Fingerprint identifies the query a cursor belongs to (tenant and
// pipeline, not the limit); listers refuse a cursor of another.
func (q ListQuery) Fingerprint() string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d:%s;%d:%s", len(q.TenantID), q.TenantID, len(q.PipelineID), q.PipelineID))
	return hex.EncodeToString(h[:12])
}

// Matches reports whether r is listed by q (its tenant's listed record,
// of q's pipeline when q names one).
func (q ListQuery) Matches(r Record) bool {
	return r.Listed() && r.TenantID == q.TenantID && (q.PipelineID == "" || r.Envelope.PipelineID == q.PipelineID)
}
