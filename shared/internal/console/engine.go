package console

import (
	"context"
	"errors"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// Engine returns rt as the console's Backend: every call is the runtime's
// own operator-plane method. The one translation: a runtime without a
// history reader answers History with ErrNotSupported, so the timeline
// says it is not available on this deployment instead of failing.
func Engine(rt *engine.Runtime) Backend {
	if rt == nil {
		panic("console: Engine: nil runtime")
	}
	return engineBackend{rt}
}

// engineBackend adapts an *engine.Runtime (see Engine).
type engineBackend struct{ *engine.Runtime }

// History implements Backend.
func (b engineBackend) History(ctx context.Context, key store.Key) ([]history.Event, error) {
	events, err := b.Runtime.History(ctx, key)
	if errors.Is(err, engine.ErrHistoryUnavailable) {
		return nil, ErrNotSupported
	}
	return events, err
}
