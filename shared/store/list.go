package store

import (
	"context"
	"errors"
	"time"
)

// MaxListLimit is the largest page a List call returns.
const MaxListLimit = 500

// DefaultListLimit is the page size when a ListQuery's Limit is zero.
const DefaultListLimit = 50

// ErrInvalidCursor reports a cursor that no page of this query returned
// (another query's, another table's, or a corrupted one).
var ErrInvalidCursor = errors.New("store: invalid cursor")

// ListQuery selects a page of one tenant's executions, newest first.
type ListQuery struct {
	// TenantID is required: a list never crosses tenants.
	TenantID string
	// PipelineID keeps one pipeline's executions ("" for all).
	PipelineID string
	// Statuses keeps executions in one of these statuses (empty for all).
	Statuses []Status
	// CreatedAfter and CreatedBefore bound CreatedAt (exclusive; zero for
	// no bound).
	CreatedAfter, CreatedBefore time.Time
	// Limit is the page size, 1 to MaxListLimit (0: DefaultListLimit). A
	// page may hold fewer executions than Limit and still have a Cursor
	// when filters dropped rows: a List call reads a bounded number of
	// rows.
	Limit int
	// Cursor continues the query from a previous page ("" for the first).
	Cursor string
}

// ListPage is one page of a List.
type ListPage struct {
	// Executions are newest first (CreatedAt descending).
	Executions []Execution
	// Cursor continues the query ("" on the last page).
	Cursor string
}

// Lister lists a tenant's executions. Every state store provider
// implements it (the conformance suite's list file checks the contract):
// newest first, the tenant's rows only, every row matching the filters
// exactly once across the pages of one query, and a cursor of another
// query refused with ErrInvalidCursor. Listing writes nothing: on
// DynamoDB it reads the list index (written once at submit) and the rows
// it finds.
type Lister interface {
	List(ctx context.Context, q ListQuery) (ListPage, error)
}
