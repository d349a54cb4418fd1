package engine

// The dead-letter list as it is now: each record joined with its
// execution's current row (DeadLetterViews), and the records counted by
// error code (DeadLetterCounts).
//
// A record reports the failure of one transition, its envelope's
// TransitionKey (execution id with its incarnation, step index, attempt),
// which is the row's LastTransitionKey when the failure was committed.
// Every later transition of the execution records its own key, and a
// re-drive moves the row off DLQ and FAILED: so the record is still
// outstanding exactly when the row of that incarnation is DLQ or FAILED
// with that LastTransitionKey (deadLetterOutstanding). A re-drive that
// failed again leaves a newer record, the outstanding one; the older one
// is not.

import (
	"context"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/store"
)

// DeadLetterCountLimit bounds the records DeadLetterCounts reads: the
// newest 5,000 of the query.
const DeadLetterCountLimit = 5000

// deadLetterCountLimit is the bound DeadLetterCounts applies
// (DeadLetterCountLimit; tests lower it).
var deadLetterCountLimit = DeadLetterCountLimit

// deadLetterViewRounds bounds the list pages one DeadLetterViews call
// reads when OutstandingOnly drops records.
const deadLetterViewRounds = 4

// DeadLetterViews returns a page of one tenant's dead-letter records,
// newest first, each joined with its execution's current row (Current,
// nil once the row is gone) and whether the record is still outstanding:
// the row of the record's incarnation is DLQ or FAILED and its last
// transition is the record's (TransitionKey), so neither a re-drive nor a
// later failure has happened since.
//
// Reads: one page of the dead-letter list and one batch read of its
// executions' rows (store.Store.GetBatch: on DynamoDB one BatchGetItem
// per 100 rows, strongly consistent). With OutstandingOnly a call reads
// up to 4 such pages, each of the records still wanted, and stops there:
// a page may then hold fewer views than the limit and still have a
// cursor. Errors are the lister's (deadletter.ErrInvalidListQuery,
// deadletter.ErrInvalidCursor), ErrDeadLettersUnavailable without a
// lister, and the store's.
func (r *Runtime) DeadLetterViews(ctx context.Context, q DeadLetterViewQuery) (DeadLetterViewPage, error) {
	if r.deps.DeadLetters == nil {
		return DeadLetterViewPage{}, ErrDeadLettersUnavailable
	}
	limit := q.PageSize()
	lq := q.ListQuery
	var out DeadLetterViewPage
	for round := 0; round < deadLetterViewRounds; round++ {
		lq.Limit = limit - len(out.DeadLetters)
		page, err := r.deps.DeadLetters.List(ctx, lq)
		if err != nil {
			return DeadLetterViewPage{}, err
		}
		views, err := r.viewDeadLetters(ctx, page.Records)
		if err != nil {
			return DeadLetterViewPage{}, err
		}
		for _, v := range views {
			if v.Outstanding || !q.OutstandingOnly {
				out.DeadLetters = append(out.DeadLetters, v)
			}
		}
		out.Cursor, lq.Cursor = page.Cursor, page.Cursor
		if !q.OutstandingOnly || page.Cursor == "" || len(out.DeadLetters) >= limit {
			break
		}
	}
	return out, nil
}

// DeadLetterCounts counts one tenant's dead-letter records (of q's
// pipeline when it names one) by error code, and the outstanding ones
// (as DeadLetterViews judges them) by error code, over the newest
// DeadLetterCountLimit records at most: Scanned is how many were read,
// Complete whether that was all of them (false when the list may hold
// more). q's Limit and Cursor are not used: the count always starts at
// the newest record.
//
// Cost, at the bound: 10 pages of the dead-letter list (500 records
// each) and 5,000 row reads (store.Store.GetBatch; on DynamoDB 50
// BatchGetItem requests of 100 strongly consistent reads, each row at
// least one read unit). A tenant with fewer records costs
// proportionally less.
func (r *Runtime) DeadLetterCounts(ctx context.Context, q deadletter.ListQuery) (DeadLetterCounts, error) {
	if r.deps.DeadLetters == nil {
		return DeadLetterCounts{}, ErrDeadLettersUnavailable
	}
	out := DeadLetterCounts{ByCode: map[string]int{}, Outstanding: map[string]int{}}
	q.Cursor = ""
	for {
		q.Limit = min(deadletter.MaxListLimit, deadLetterCountLimit-out.Scanned)
		page, err := r.deps.DeadLetters.List(ctx, q)
		if err != nil {
			return DeadLetterCounts{}, err
		}
		views, err := r.viewDeadLetters(ctx, page.Records)
		if err != nil {
			return DeadLetterCounts{}, err
		}
		for _, v := range views {
			code := v.Envelope.ErrorCode
			out.ByCode[code]++
			if v.Outstanding {
				out.Outstanding[code]++
			}
		}
		out.Scanned += len(views)
		switch {
		case page.Cursor == "":
			out.Complete = true
			return out, nil
		case out.Scanned >= deadLetterCountLimit:
			return out, nil
		}
		q.Cursor = page.Cursor
	}
}

// viewDeadLetters joins records with their executions' rows, read in one
// batch. Records a lister should not have listed (without an envelope)
// are left out.
func (r *Runtime) viewDeadLetters(ctx context.Context, records []deadletter.Record) ([]DeadLetterView, error) {
	keys := make([]store.Key, 0, len(records))
	for _, rec := range records {
		if rec.Envelope != nil {
			keys = append(keys, store.Key{TenantID: rec.TenantID, ExecutionID: rec.ExecutionID})
		}
	}
	rows := map[store.Key]*store.Execution{}
	if len(keys) > 0 {
		got, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return nil, err
		}
		for i := range got {
			rows[got[i].Key()] = &got[i]
		}
	}
	views := make([]DeadLetterView, 0, len(keys))
	for _, rec := range records {
		if rec.Envelope == nil {
			continue
		}
		// The row of this very id: an id without an incarnation reads its
		// slot's live row, which may be another execution's.
		var cur *store.Execution
		if row, ok := rows[store.Key{TenantID: rec.TenantID, ExecutionID: rec.ExecutionID}]; ok {
			c := *row // each view its own copy: records of one execution share the row
			cur = &c
		}
		views = append(views, DeadLetterView{Record: rec, Current: cur, Outstanding: deadLetterOutstanding(rec.Envelope, cur)})
	}
	return views, nil
}

// deadLetterOutstanding reports whether row (nil: gone) still ends in
// env's failure: DLQ, or FAILED with its publish pending, at env's
// transition.
func deadLetterOutstanding(env *deadletter.Envelope, row *store.Execution) bool {
	return row != nil && (row.Status == store.DLQ || row.Status == store.Failed) && row.LastTransitionKey == env.TransitionKey
}
