package memory

import (
	"context"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/internal/outbox"
)

// Backend is the memory provider as a backend.Backend (state-provider
// memory): state, payloads, effects and dead-letter records in this
// process's memory, the state store recording each execution's history.
// It leaves the dispatcher, the dead-letter publisher and the reject sink
// to the runtime's defaults (the in-process pool, the log that records
// with the recorder, the sink pipeline.item-reject.provider names).
func Backend() backend.Backend { return backend.Func(openBackend) }

func openBackend(_ context.Context, env backend.Env) (*backend.Seams, error) {
	state := NewStateStore(env.Clock)
	state.EnableOutbox(outbox.Configured(env.Config))
	return &backend.Seams{
		State:    state,
		Payloads: NewPayloadStore(env.Clock),
		Effects:  NewEffects(env.Clock),
		Recorder: NewDeadLetters(env.Clock),
		History:  state,
	}, nil
}
