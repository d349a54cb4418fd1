package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Sink delivers lifecycle events: EventBridge (lifecycle.Sink), the
// process log (LogSink), or memory (MemorySink, for tests).
type Sink interface {
	// Send delivers evs. It returns nil when every event was
	// acknowledged; a *SendError when some were not (the others were);
	// any other error when none was, every one to be tried again.
	Send(ctx context.Context, evs []Event) error
}

// Failure is one event a sink did not acknowledge.
type Failure struct {
	// Index is the event's position in the Send call's slice.
	Index int
	// Permanent: the sink will never take this event (a malformed entry);
	// sending it again cannot help. Otherwise it may take it later.
	Permanent bool
	// Err says why.
	Err error
}

// SendError is a Send that was partly acknowledged: every event not in
// Failures was.
type SendError struct {
	Failures []Failure
}

func (e *SendError) Error() string {
	if len(e.Failures) == 0 {
		return "outbox: send failed"
	}
	return fmt.Sprintf("outbox: %d of the events were not acknowledged (first: %v)", len(e.Failures), e.Failures[0].Err)
}

// Outcome sorts the events of a Send call by err, its answer: the
// indexes acknowledged, those to send again, and the permanent failures.
func Outcome(n int, err error) (acked, retry []int, dead []Failure) {
	if err == nil {
		for i := range n {
			acked = append(acked, i)
		}
		return acked, nil, nil
	}
	var se *SendError
	if !errors.As(err, &se) {
		for i := range n {
			retry = append(retry, i)
		}
		return nil, retry, nil
	}
	failed := make(map[int]Failure, len(se.Failures))
	for _, f := range se.Failures {
		failed[f.Index] = f
	}
	for i := range n {
		f, ok := failed[i]
		switch {
		case !ok:
			acked = append(acked, i)
		case f.Permanent:
			dead = append(dead, f)
		default:
			retry = append(retry, i)
		}
	}
	return acked, retry, dead
}

// LogDeadLettered is the log event of an event a sink refused for good,
// logged at error level and then dropped.
const LogDeadLettered = "lifecycle_event_dead_lettered"

// DeadLetter logs ev, refused for good with err, as LogDeadLettered.
func DeadLetter(ctx context.Context, log *slog.Logger, ev Event, err error) {
	log.LogAttrs(ctx, slog.LevelError, LogDeadLettered, slog.String("event", LogDeadLettered),
		slog.String("event_id", ev.ID), slog.String("event_type", string(ev.Type)), slog.String("error", err.Error()))
}

// MemorySink keeps what it is sent, for tests and the simulator: every
// delivery (redeliveries included) in order. Fail, when set, is asked
// before each event: a non-nil answer refuses that event (a transient
// failure unless it wraps ErrPermanent). Safe for concurrent use.
type MemorySink struct {
	// Fail refuses an event when it returns an error.
	Fail func(Event) error

	mu   sync.Mutex
	sent []Event
}

// ErrPermanent marks a refusal of MemorySink.Fail as permanent.
var ErrPermanent = errors.New("outbox: refused for good")

// Send implements Sink.
func (m *MemorySink) Send(ctx context.Context, evs []Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var se SendError
	for i, ev := range evs {
		if m.Fail != nil {
			if err := m.Fail(ev); err != nil {
				se.Failures = append(se.Failures, Failure{Index: i, Permanent: errors.Is(err, ErrPermanent), Err: err})
				continue
			}
		}
		m.sent = append(m.sent, ev)
	}
	if len(se.Failures) > 0 {
		return &se
	}
	return nil
}

// Sent returns every delivery so far, in order.
func (m *MemorySink) Sent() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Event(nil), m.sent...)
}

// LogSink is the local sink of qasync serve (events.sink log): each event
// is logged at info level as lifecycle_event, with its id, type and
// detail (which holds no payload bytes). Writing the log acknowledges it.
type LogSink struct {
	Logger *slog.Logger
}

// LogEvent is the log event of LogSink.
const LogEvent = "lifecycle_event"

// Send implements Sink.
func (l LogSink) Send(ctx context.Context, evs []Event) error {
	for _, ev := range evs {
		l.Logger.LogAttrs(ctx, slog.LevelInfo, LogEvent, slog.String("event", LogEvent),
			slog.String("event_id", ev.ID), slog.String("event_type", string(ev.Type)),
			slog.String("detail_type", DetailType(ev.Type)), slog.String("detail", string(ev.Detail)))
	}
	return nil
}

// Publish sends evs through sink once, as a stream consumer does with a
// batch's events: the events refused for good are logged as
// LogDeadLettered (and not sent again); it returns the indexes of the
// events to send again (none when every other one was acknowledged) and
// the sink's error.
func Publish(ctx context.Context, sink Sink, log *slog.Logger, evs []Event) (retry []int, err error) {
	if len(evs) == 0 {
		return nil, nil
	}
	err = sink.Send(ctx, evs)
	_, retry, dead := Outcome(len(evs), err)
	for _, f := range dead {
		DeadLetter(ctx, log, evs[f.Index], f.Err)
	}
	if len(retry) == 0 {
		return nil, nil
	}
	return retry, err
}
