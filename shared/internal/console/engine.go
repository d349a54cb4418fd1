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
// history reader answers HistoryPage with ErrNotSupported, so the timeline
// says it is not available on this deployment instead of failing.
func Engine(rt *engine.Runtime) Backend {
	if rt == nil {
		panic("console: Engine: nil runtime")
	}
	return engineBackend{rt}
}

// engineBackend adapts an *engine.Runtime (see Engine).
type engineBackend struct{ *engine.Runtime }

// HistoryPage implements Backend.
func (b engineBackend) HistoryPage(ctx context.Context, key store.Key, after history.Cursor, limit int) (history.Page, error) {
	p, err := b.Runtime.HistoryPage(ctx, key, after, limit)
	if errors.Is(err, engine.ErrHistoryUnavailable) {
		return history.Page{}, ErrNotSupported
	}
	return p, err
}
