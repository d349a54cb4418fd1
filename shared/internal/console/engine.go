package console

import (
	"context"
	"errors"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// Engine returns rt as the console's Backend. Status, Result and
// RedriveWith are the runtime's own; List, History, DeadLetters and Cancel
// are the runtime's when it has them (the operator-plane engine API), and
// otherwise answer ErrNotSupported, so the console serves what the
// runtime can do. Once *engine.Runtime has all four, it satisfies Backend
// itself and Engine can return rt.
func Engine(rt *engine.Runtime) Backend {
	if rt == nil {
		panic("console: Engine: nil runtime")
	}
	return engineBackend{rt}
}

// engineBackend adapts an *engine.Runtime (see Engine).
type engineBackend struct{ *engine.Runtime }

// The operator-plane methods, as the runtime declares them.
type (
	lister interface {
		List(context.Context, store.ListQuery) (store.ListPage, error)
	}
	historian interface {
		History(context.Context, store.Key) ([]history.Event, error)
	}
	deadLetterLister interface {
		DeadLetters(context.Context, deadletter.ListQuery) (deadletter.ListPage, error)
	}
	canceller interface {
		Cancel(context.Context, store.Key, string) (store.Execution, bool, error)
	}
)

// List implements Backend.
func (b engineBackend) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	if l, ok := any(b.Runtime).(lister); ok {
		return l.List(ctx, q)
	}
	return store.ListPage{}, ErrNotSupported
}

// History implements Backend.
func (b engineBackend) History(ctx context.Context, key store.Key) ([]history.Event, error) {
	if h, ok := any(b.Runtime).(historian); ok {
		events, err := h.History(ctx, key)
		if errors.Is(err, engine.ErrHistoryUnavailable) {
			return nil, ErrNotSupported // no history reader on this deployment
		}
		return events, err
	}
	return nil, ErrNotSupported
}

// DeadLetters implements Backend.
func (b engineBackend) DeadLetters(ctx context.Context, q deadletter.ListQuery) (deadletter.ListPage, error) {
	if l, ok := any(b.Runtime).(deadLetterLister); ok {
		return l.DeadLetters(ctx, q)
	}
	return deadletter.ListPage{}, ErrNotSupported
}

// Cancel implements Backend.
func (b engineBackend) Cancel(ctx context.Context, key store.Key, reason string) (store.Execution, bool, error) {
	if c, ok := any(b.Runtime).(canceller); ok {
		return c.Cancel(ctx, key, reason)
	}
	return store.Execution{}, false, ErrNotSupported
}
