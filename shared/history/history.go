// Package history defines an execution's history: the events of its
// lifecycle in commit order (submitted, each step started and finished,
// awaits, re-drives, cancels, the end), as the operator plane shows them.
//
// A history is derived, not written by the engine: Derive turns two
// consecutive versions of an execution row into the events between them,
// so a provider records history from the row writes it already makes (in
// memory and in the embedded store in the same write; on DynamoDB from the
// table's stream, which adds no request to a step's path).
package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// Type is an event's kind.
type Type string

// Event types.
const (
	Submitted      Type = "SUBMITTED"
	StepStarted    Type = "STEP_STARTED"
	StepSucceeded  Type = "STEP_SUCCEEDED"
	StepFailed     Type = "STEP_FAILED"
	LeaseTakenOver Type = "LEASE_TAKEN_OVER"
	Awaiting       Type = "AWAITING"
	AwaitCompleted Type = "AWAIT_COMPLETED"
	Sleeping       Type = "SLEEPING"
	// ChildrenStarted: a map step created its children and the execution
	// waits for them (WAITING_CHILDREN); Reason counts them.
	ChildrenStarted Type = "CHILDREN_STARTED"
	// ChildrenFinished: every child of the map ended; the map step runs
	// again to collect their outcomes.
	ChildrenFinished Type = "CHILDREN_FINISHED"
	OutcomeUnknown   Type = "OUTCOME_UNKNOWN"
	Redriven         Type = "REDRIVEN"
	CancelRequested  Type = "CANCEL_REQUESTED"
	Cancelled        Type = "CANCELLED"
	// PauseRequested: an operator asked to pause a RUNNING (or
	// WAITING_CHILDREN, or a QUEUED or WAIT_RETRY one that needs its map's
	// children) execution; it parks PAUSED at its next hand-over.
	PauseRequested Type = "PAUSE_REQUESTED"
	// Paused: the execution became PAUSED (Reason: the operator's).
	Paused Type = "PAUSED"
	// Resumed: an operator resumed a PAUSED execution (Status: where it
	// went back to), or withdrew a pause request that had not yet taken
	// effect.
	Resumed      Type = "RESUMED"
	DeadLettered Type = "DEAD_LETTERED"
	Succeeded    Type = "SUCCEEDED"
)

// Event is one entry of a history.
type Event struct {
	// Seq numbers the events of one execution from 1, without gaps, in
	// commit order (assigned when the history is read).
	Seq  int
	Type Type
	// At is the commit time of the row version the event came from.
	At        time.Time
	StepIndex int
	StepName  string
	Attempt   int
	// Status is the execution's status after the event.
	Status store.Status
	// Error is the step's failure (STEP_FAILED, DEAD_LETTERED).
	Error *store.Failure
	// RetryAt is when a failed step runs again (STEP_FAILED with a retry).
	RetryAt time.Time
	// WakeAt is when a sleep step's execution wakes up and its next step
	// runs (SLEEPING).
	WakeAt time.Time
	// Worker is the lease owner: the worker that started the attempt
	// (STEP_STARTED, LEASE_TAKEN_OVER) or ran it (STEP_SUCCEEDED,
	// STEP_FAILED, AWAITING, OUTCOME_UNKNOWN; empty when the attempt ended
	// unleased, as an await's timeout does).
	Worker string
	// Reason is the operator's reason (REDRIVEN, CANCEL_REQUESTED,
	// CANCELLED), the reason of an outcome (OUTCOME_UNKNOWN: the error
	// message), or a note on the event in plain words (LEASE_TAKEN_OVER:
	// whose lease lapsed; AWAITING and AWAIT_COMPLETED: the await, its
	// timeout, a late completion).
	Reason string
	// Version is the row version the event came from; events of one
	// version keep the order Derive gave them.
	Version int64
	// Index is the event's position among the events Derive gave for its
	// version (from 0): (Version, Index) identifies an event of one
	// execution, so that a consumer that sees a row version twice (a
	// stream record delivered again) can drop the repeat (Number).
	Index int
}

// Reader reads an execution's history. Providers implement it; a key of
// another tenant, or of no execution, returns store.ErrNotFound.
type Reader interface {
	History(ctx context.Context, key store.Key) ([]Event, error)
}

// MaxPage is the most events a page of history holds (PageOf): about
// 270 KB of JSON for ordinary events (the API's byte budget cuts a page of
// unusually large ones shorter), far below API Gateway's 6 MB and 10 MB
// limits.
const MaxPage = 1000

// ErrCursor is returned (wrapped) by PageAfter for a cursor that names no
// event of the history it is read against: a cursor of another execution
// or incarnation, or one nobody gave.
var ErrCursor = errors.New("history: the cursor names no event of this history")

// Cursor marks where a page of history ended: its last event's Version,
// Index and Seq. The zero Cursor is the start.
type Cursor struct {
	Version int64
	Index   int
	Seq     int
}

// Cursor returns the cursor of a page that ends with e: reading after it
// gives the events that follow e.
func (e Event) Cursor() Cursor {
	return Cursor{Version: e.Version, Index: e.Index, Seq: e.Seq}
}

// cursorPrefix starts every encoded cursor (its format's version).
const cursorPrefix = "h1."

// String encodes the cursor for an API: "h1.<version>.<index>.<seq>";
// the zero cursor is "".
func (c Cursor) String() string {
	if c == (Cursor{}) {
		return ""
	}
	return fmt.Sprintf("%s%d.%d.%d", cursorPrefix, c.Version, c.Index, c.Seq)
}

// ParseCursor decodes Cursor.String's form ("" is the start).
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	var c Cursor
	rest, ok := strings.CutPrefix(s, cursorPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return Cursor{}, fmt.Errorf("history: cursor %q is not one this API gave", s)
	}
	var err error
	if c.Version, err = strconv.ParseInt(parts[0], 10, 64); err == nil {
		if c.Index, err = strconv.Atoi(parts[1]); err == nil {
			c.Seq, err = strconv.Atoi(parts[2])
		}
	}
	if err != nil || c.Version < 0 || c.Index < 0 || c.Seq < 0 {
		return Cursor{}, fmt.Errorf("history: cursor %q is not one this API gave", s)
	}
	return c, nil
}

// Page is part of a history: events numbered on from the cursor it was
// read after, Next, the cursor of the page after it (nil at the end), and
// End, where it ends.
type Page struct {
	Events []Event
	Next   *Cursor
	// End is the cursor of the page's last event, or the cursor the page
	// was read after when it has none: read after End later, a poller
	// gets only the events that joined the history since. Unlike Next it
	// is set on the last page too.
	End Cursor
}

// Head returns the page cut to its first n events, Next and End then
// the cursor of the nth: how an API shortens a page to a byte budget.
// An n below 1 is taken as 1 (a page moves on by at least an event); n
// at or above the page's length returns the page as it is.
func (p Page) Head(n int) Page {
	if n >= len(p.Events) {
		return p
	}
	n = max(n, 1)
	end := p.Events[n-1].Cursor()
	return Page{Events: p.Events[:n], Next: &end, End: end}
}

// PageOf returns the page of up to limit events (at most MaxPage; 0
// means MaxPage) that follows after in the history made of events (as a
// provider gives them: any order, repeats allowed, as Number takes them).
// Its events are numbered on from after.Seq. A history read page by page
// while it grows gives each event once, with the Seq it gets in the
// whole history, since events only ever join at its end.
func PageOf(events []Event, after Cursor, limit int) Page {
	p, _ := page(Number(events), after, limit)
	return p
}

// PageAfter is PageOf for a cursor from outside (an API's caller): it
// also checks that after names an event of this history, with the Seq
// that event has in it, and returns an error wrapping ErrCursor when it
// does not. Every cursor a page of this history gave passes (events only
// join at a history's end); a cursor of another execution or incarnation
// fails unless that history has an event at the same version, index and
// seq (a cursor carries no execution id), and then it means the same
// position.
func PageAfter(events []Event, after Cursor, limit int) (Page, error) {
	p, ok := page(Number(events), after, limit)
	if !ok {
		return Page{}, fmt.Errorf("%w: %s", ErrCursor, after)
	}
	return p, nil
}

// page is PageOf of a numbered history; ok says whether after is the
// start or names one of its events.
func page(all []Event, after Cursor, limit int) (Page, bool) {
	if limit <= 0 || limit > MaxPage {
		limit = MaxPage
	}
	start := sort.Search(len(all), func(i int) bool {
		return cmp.Or(cmp.Compare(all[i].Version, after.Version), cmp.Compare(all[i].Index, after.Index)) > 0
	})
	ok := after == (Cursor{}) || (start > 0 && all[start-1].Cursor() == after)
	rest := all[start:]
	p := Page{Events: rest[:min(limit, len(rest))], End: after}
	for i := range p.Events {
		p.Events[i].Seq = after.Seq + i + 1
	}
	if len(p.Events) > 0 {
		p.End = p.Events[len(p.Events)-1].Cursor()
	}
	if len(rest) > limit {
		next := p.End
		p.Next = &next
	}
	return p, ok
}
