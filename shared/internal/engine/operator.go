package engine

import (
	"context"
	"errors"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/store"
)

// ErrDeadLettersUnavailable: the runtime has no dead-letter lister
// (Deps.DeadLetters).
var ErrDeadLettersUnavailable = errors.New("engine: dead-letter records are not available with these providers")

// List returns a page of one tenant's executions, newest first, filtered
// as q says (store.Lister; q.TenantID is required). It writes nothing: on
// DynamoDB it reads the list index, written once per execution at submit,
// and the rows it finds. A cursor of another query returns an error
// wrapping store.ErrInvalidCursor, an invalid query one wrapping
// store.ErrInvalidListQuery.
func (r *Runtime) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	return r.deps.Store.List(ctx, q)
}

// DeadLetters returns a page of one tenant's dead-letter records, newest
// first (deadletter.Lister; q.TenantID is required), or
// ErrDeadLettersUnavailable without a lister.
func (r *Runtime) DeadLetters(ctx context.Context, q deadletter.ListQuery) (deadletter.ListPage, error) {
	if r.deps.DeadLetters == nil {
		return deadletter.ListPage{}, ErrDeadLettersUnavailable
	}
	return r.deps.DeadLetters.List(ctx, q)
}
