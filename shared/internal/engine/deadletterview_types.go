package engine

import (
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/store"
)

// DeadLetterView is a dead-letter record with what became of its execution.
type DeadLetterView struct {
	deadletter.Record
	// Current is the execution's row now; nil when it is gone (expired).
	Current *store.Execution
	// Outstanding: the execution still ends in this record's failure (its row is DLQ or FAILED and was not re-driven since the record).
	Outstanding bool
}

// DeadLetterViewQuery selects a page of dead-letter views.
type DeadLetterViewQuery struct {
	deadletter.ListQuery
	// OutstandingOnly keeps the views whose Outstanding is true.
	OutstandingOnly bool
}

// DeadLetterViewPage is one page of views, newest first.
type DeadLetterViewPage struct {
	DeadLetters []DeadLetterView
	// Cursor continues the query ("" on the last page).
	Cursor string
}

// DeadLetterCounts are a tenant's dead-letter records counted by error code, over at most a bounded number of the newest records.
type DeadLetterCounts struct {
	ByCode      map[string]int
	Outstanding map[string]int
	Scanned     int
	Complete    bool
}
