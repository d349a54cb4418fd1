package memory

import (
	"context"
	"slices"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

// The lifecycle events' outbox of the memory store: with EnableOutbox,
// every write that commits a row version appends the lifecycle events of
// the opted-in types it yields, under the same lock as the row, and an
// outbox.Drainer takes them out (Pending, Ack) once a sink acknowledged
// them. It lives as long as the store (in the simulator, across the
// crashes of the processes that share it).

var _ outbox.Source = (*StateStore)(nil)

// memOutbox is the outbox: records in commit order, numbered from 1.
type memOutbox struct {
	types   outbox.Types
	records []outbox.Event
	seq     uint64
}

// add appends the events of types among evs, the history events of the
// write that made row. Callers hold the store's lock.
func (b *memOutbox) add(row *store.Execution, evs []history.Event) {
	for _, ev := range outbox.Of(row, evs, b.types) {
		b.seq++
		ev.Seq = b.seq
		b.records = append(b.records, ev)
	}
}

// EnableOutbox makes every later write record the lifecycle events of
// types in the outbox (an empty set: none, the default).
func (s *StateStore) EnableOutbox(types outbox.Types) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.box.types = types
}

// Pending implements outbox.Source.
func (s *StateStore) Pending(ctx context.Context, limit int) ([]outbox.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.box.records[:min(limit, len(s.box.records))]), nil
}

// Ack implements outbox.Source.
func (s *StateStore) Ack(ctx context.Context, seqs []uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	acked := make(map[uint64]bool, len(seqs))
	for _, q := range seqs {
		acked[q] = true
	}
	s.box.records = slices.DeleteFunc(s.box.records, func(ev outbox.Event) bool { return acked[ev.Seq] })
	return nil
}
