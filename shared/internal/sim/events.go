package sim

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

// The lifecycle events join the simulation: every store records the
// terminal event types (the memory and embedded stores in their outbox,
// in the transition's write; on DynamoDB the stream feed derives them
// from the row images after the history), and they reach an in-memory
// sink standing for EventBridge. Faults: the sink refuses a delivery now
// and then (throttled: sent again), and on the stores with an outbox the
// delete after an acknowledged send is lost now and then (the drainer
// died between the two: the event is sent again, with the same id); a
// crash between a commit and its publish is every process crash, since
// the drain runs apart from the processes. At the end, every terminal
// execution's event must have reached the sink, with its id.

// invEvents: every terminal execution's lifecycle event reached the sink
// at least once, with the id its commit gives it.
const invEvents = "no lifecycle event lost"

// simEventTypes are the types the simulation publishes: the terminal ones.
var simEventTypes = func() outbox.Types {
	t := outbox.Types{}
	for _, typ := range outbox.Terminal {
		t[typ] = true
	}
	return t
}()

// Fault rates of the lifecycle events while the faults are on.
const (
	eventSinkErrorRate = 0.1
	eventAckLostRate   = 0.05
)

// eventSink is the world's lifecycle event sink (made on first use).
func (w *world) eventSink() *outbox.MemorySink {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sink == nil {
		w.sink = &outbox.MemorySink{Fail: func(outbox.Event) error {
			if w.settling || !w.chance(eventSinkErrorRate) {
				return nil
			}
			w.fault("lifecycle_sink_throttled")
			return errors.New("sim: EventBridge: ThrottlingException")
		}}
	}
	return w.sink
}

// ackLoss is an outbox whose deletes are lost now and then.
type ackLoss struct {
	outbox.Source
	w *world
}

func (a ackLoss) Ack(ctx context.Context, seqs []uint64) error {
	if !a.w.settling && a.w.chance(eventAckLostRate) {
		a.w.fault("lifecycle_ack_lost")
		return errors.New("sim: the drainer died after the sink took the events")
	}
	return a.Source.Ack(ctx, seqs)
}

// drainOutbox drains the outbox src returns every 10 s of virtual time,
// as qasync serve's lifecycle_outbox loop does.
func (w *world) drainOutbox(src func() outbox.Source) {
	w.every(10*time.Second, "lifecycle_drain", time.Time{}, func() {
		d := outbox.NewDrainer(ackLoss{src(), w}, w.eventSink(), outbox.DrainOptions{Logger: slog.New(slog.DiscardHandler)})
		w.async(func() { _, _, _ = d.Drain(context.Background()) })
	})
}

// drainAll empties the outbox (the end of a run, faults off).
func drainAll(src outbox.Source, sink outbox.Sink) {
	d := outbox.NewDrainer(src, sink, outbox.DrainOptions{Logger: slog.New(slog.DiscardHandler)})
	for range 10000 {
		if n, _, err := d.Drain(context.Background()); err != nil || n == 0 {
			return
		}
	}
}

// expectedEvent is the lifecycle event type a settled execution in e's
// state must have published ("" for none).
func expectedEvent(e store.Execution) history.Type {
	switch e.Status {
	case store.Succeeded:
		return history.Succeeded
	case store.DLQ:
		return history.DeadLettered
	case store.Cancelled:
		return history.Cancelled
	case store.RemoteOutcomeUnknown:
		return history.OutcomeUnknown
	case store.Failed:
		if e.Error != nil && e.Error.TerminalReason == store.ReasonRejected {
			return outbox.Rejected
		}
	}
	return ""
}

// checkEvents holds every settled execution against the sink's
// deliveries: its terminal event delivered at least once, each delivery
// with the id of its (execution, version, type); it counts the
// deliveries and the duplicates among them.
func (w *world) checkEvents(incs []*incarnation) {
	type key struct {
		tenant, exec string
		typ          history.Type
	}
	got := map[key]int{}
	seen := map[string]int{}
	for _, ev := range w.eventSink().Sent() {
		var d outbox.Detail
		w.check(invEvents)
		if err := json.Unmarshal(ev.Detail, &d); err != nil || ev.ID != outbox.ID(d.TenantID, d.ExecutionID, d.Version, ev.Type) || d.EventID != ev.ID {
			w.violate(invEvents, d.ExecutionID, "event %s (%s) does not carry the id of its commit (detail %s)", ev.ID, ev.Type, ev.Detail)
			continue
		}
		got[key{d.TenantID, d.ExecutionID, ev.Type}]++
		seen[ev.ID]++
	}
	w.mu.Lock()
	w.report.Outcomes["lifecycle_events_delivered"] += len(w.sink.Sent())
	for _, n := range seen {
		w.report.Outcomes["lifecycle_events_duplicated"] += n - 1
	}
	w.mu.Unlock()
	for _, inc := range incs {
		w.mu.Lock()
		gone, last := inc.gone, inc.last
		w.mu.Unlock()
		typ := expectedEvent(last)
		if gone || typ == "" {
			continue
		}
		w.check(invEvents)
		if got[key{last.TenantID, last.ExecutionID, typ}] == 0 {
			w.violate(invEvents, inc.exec, "ended %s, and no %s event reached the sink", last.Status, typ)
		}
	}
}

// systemClock is the true time of the stores' own views.
var systemClock clock.Clock = clock.System{}
