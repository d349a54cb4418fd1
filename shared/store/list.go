package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
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

// ErrInvalidListQuery reports a ListQuery that no store can answer: no
// tenant, a limit outside 0..MaxListLimit, or an unknown status.
var ErrInvalidListQuery = errors.New("store: invalid list query")

// Validate checks q (ErrInvalidListQuery, wrapped with what is wrong).
// Stores call it first, so that every provider refuses the same queries.
func (q ListQuery) Validate() error {
	switch {
	case q.TenantID == "":
		return fmt.Errorf("%w: a tenant is required", ErrInvalidListQuery)
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalidListQuery, q.Limit, MaxListLimit)
	}
	for _, s := range q.Statuses {
		if !s.Valid() {
			return fmt.Errorf("%w: unknown status %q", ErrInvalidListQuery, s)
		}
	}
	return nil
}

// PageSize is the page size q asks for: Limit, or DefaultListLimit when
// it is zero.
func (q ListQuery) PageSize() int {
	if q.Limit == 0 {
		return DefaultListLimit
	}
	return q.Limit
}

// Fingerprint identifies the query a cursor belongs to: the tenant and
// every filter, not the limit (a client may change its page size between
// pages) nor the cursor. Stores put it in their cursors and refuse a
// cursor whose fingerprint is not the query's (ErrInvalidCursor).
func (q ListQuery) Fingerprint() string {
	statuses := make([]string, len(q.Statuses))
	for i, s := range q.Statuses {
		statuses[i] = string(s)
	}
	sort.Strings(statuses)
	h := sha256.New()
	for _, part := range []string{q.TenantID, q.PipelineID, strings.Join(statuses, ","),
		strconv.FormatInt(listBound(q.CreatedAfter), 10), strconv.FormatInt(listBound(q.CreatedBefore), 10)} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// listBound is a created bound in milliseconds (0 for none).
func listBound(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// CreatedRange is q's CreatedAt range in milliseconds, both ends
// inclusive: the query's exclusive bounds moved in by one millisecond,
// the precision stores keep (bounds and times are compared as whole
// milliseconds). empty reports that no execution can match.
func (q ListQuery) CreatedRange() (from, to int64, empty bool) {
	from, to = math.MinInt64, math.MaxInt64
	if !q.CreatedAfter.IsZero() {
		from = q.CreatedAfter.UnixMilli() + 1
	}
	if !q.CreatedBefore.IsZero() {
		to = q.CreatedBefore.UnixMilli() - 1
	}
	return from, to, from > to
}

// Matches reports whether e passes q's filters (tenant, pipeline,
// statuses, created range). Stores that read rows to filter them (by
// status, which no index holds) use it, so that all filter alike.
func (q ListQuery) Matches(e *Execution) bool {
	if e.TenantID != q.TenantID || (q.PipelineID != "" && e.PipelineID != q.PipelineID) {
		return false
	}
	if from, to, empty := q.CreatedRange(); empty || e.CreatedAt.UnixMilli() < from || e.CreatedAt.UnixMilli() > to {
		return false
	}
	if len(q.Statuses) == 0 {
		return true
	}
	for _, s := range q.Statuses {
		if e.Status == s {
			return true
		}
	}
	return false
}
