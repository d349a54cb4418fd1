// The lifecycle events of the execution table's stream (EventPublisher):
// on DynamoDB the commit is the outbox. The stream carries every committed
// row image, in order per item, for 24 hours; the consumer that stores a
// batch's history (the history function, or qasync serve's stream feed)
// then derives the batch's lifecycle events from the same images and
// publishes them, and fails the batch (so that it is read again) until
// the sink acknowledged every one. No request is added to a step.

package dynamo

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

// EventPublisher publishes the lifecycle events of stream batches.
type EventPublisher struct {
	sink  outbox.Sink
	types outbox.Types
	log   *slog.Logger
}

// NewEventPublisher returns the publisher of the events of types to sink
// (log: the dead-lettered ones; nil: slog.Default()).
func NewEventPublisher(sink outbox.Sink, types outbox.Types, log *slog.Logger) *EventPublisher {
	if log == nil {
		log = slog.Default()
	}
	return &EventPublisher{sink: sink, types: types, log: log}
}

// Events returns the lifecycle events of types that a batch of stream
// records carries (outbox.Derive of each record's two images), and for
// each the index of its record. Records that are no execution row, or
// cannot be decoded, carry none (History.Apply logs them).
func Events(changes []Change, types outbox.Types) (evs []outbox.Event, at []int) {
	if len(types) == 0 {
		return nil, nil
	}
	for i, c := range changes {
		old, oldErr := decodeImage(c.Old)
		cur, newErr := decodeImage(c.New)
		if oldErr != nil || newErr != nil || cur == nil {
			continue
		}
		if old != nil && old.Key() != cur.Key() {
			old = nil // a new incarnation replaced an expired one
		}
		for _, ev := range outbox.Of(cur, history.Derive(old, cur), types) {
			evs = append(evs, ev)
			at = append(at, i)
		}
	}
	return evs, at
}

// Apply publishes the lifecycle events of a batch (it is a stream
// applier, run after History.Apply). Events the sink refused for good are
// dead-lettered (logged); when some are to be sent again it returns an
// *ApplyError whose First is the earliest record of any of them, wrapping
// store.ErrUnavailable (a transient failure: the stream feed retries it
// until it is applied, the history function's event source up to its
// retry limit). The batch read again publishes again the events that were
// acknowledged (at least once; their ids do not change).
func (p *EventPublisher) Apply(ctx context.Context, changes []Change) error {
	evs, at := Events(changes, p.types)
	retry, err := outbox.Publish(ctx, p.sink, p.log, evs)
	if len(retry) == 0 {
		return nil
	}
	first := at[retry[0]]
	for _, i := range retry {
		first = min(first, at[i])
	}
	return &ApplyError{First: first, Err: fmt.Errorf("%w: %d lifecycle events not acknowledged: %w", store.ErrUnavailable, len(retry), err)}
}

// Applier is what a stream batch is applied to: History and
// EventPublisher are.
type Applier interface {
	Apply(ctx context.Context, changes []Change) error
}

// Then returns the applier of first, then (when first applied the whole
// batch) of next: the history, then the lifecycle events. A nil next is
// first alone.
func Then(first, next Applier) Applier {
	if next == nil {
		return first
	}
	return then{first, next}
}

type then struct{ first, next Applier }

func (t then) Apply(ctx context.Context, changes []Change) error {
	if err := t.first.Apply(ctx, changes); err != nil {
		return err
	}
	return t.next.Apply(ctx, changes)
}
