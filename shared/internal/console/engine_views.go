package console

// The runtime's Input, DeadLetterViews and DeadLetterCounts are written
// at the same time as the console's use of them (issue 22). Until
// *engine.Runtime has them these forward to its methods when it has them
// and answer ErrNotSupported otherwise; once it has them, this file can
// go (the runtime's own methods are then promoted to engineBackend).

import (
	"context"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// Input implements Backend with the runtime's Input.
func (b engineBackend) Input(ctx context.Context, key store.Key) (store.Execution, payload.Payload, error) {
	if rt, ok := any(b.Runtime).(interface {
		Input(context.Context, store.Key) (store.Execution, payload.Payload, error)
	}); ok {
		return rt.Input(ctx, key)
	}
	return store.Execution{}, payload.Payload{}, ErrNotSupported
}

// DeadLetterViews implements Backend with the runtime's DeadLetterViews.
func (b engineBackend) DeadLetterViews(ctx context.Context, q engine.DeadLetterViewQuery) (engine.DeadLetterViewPage, error) {
	if rt, ok := any(b.Runtime).(interface {
		DeadLetterViews(context.Context, engine.DeadLetterViewQuery) (engine.DeadLetterViewPage, error)
	}); ok {
		return rt.DeadLetterViews(ctx, q)
	}
	return engine.DeadLetterViewPage{}, ErrNotSupported
}

// DeadLetterCounts implements Backend with the runtime's DeadLetterCounts.
func (b engineBackend) DeadLetterCounts(ctx context.Context, q deadletter.ListQuery) (engine.DeadLetterCounts, error) {
	if rt, ok := any(b.Runtime).(interface {
		DeadLetterCounts(context.Context, deadletter.ListQuery) (engine.DeadLetterCounts, error)
	}); ok {
		return rt.DeadLetterCounts(ctx, q)
	}
	return engine.DeadLetterCounts{}, ErrNotSupported
}
