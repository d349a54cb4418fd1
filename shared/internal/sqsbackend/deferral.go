// Handing a deferred work item back to the work queue (Deferral).

package sqsbackend

import (
	"context"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
)

// Deferral is a received work item that its handler deferred
// (dispatch.RetryAfter), with the means to hand it back to the work
// queue: both consumers of the work queue, the Lambda worker handler and
// Poller, keep such an item with HandBack.
//
// Every receive of a message counts towards the work queue's
// maxReceiveCount (schema.PoisonAfter), after which its redrive policy
// moves the message to the poison queue. A deferral is no failure, so it
// must not count: were it a visibility change of the received message,
// each one would be a receive more, and a worker answering
// pipeline_version_unavailable through a rolling deploy (every second at
// first) would have an item that never failed moved to the poison queue
// within seconds, a false poison alert. Instead the consumer sends a
// fresh message with the same work item and tenant attribute, delivered
// after the deferral (SQS DelaySeconds), and then acknowledges the
// received one: the fresh message starts again at receive 1.
//
// Cost per deferral: one SendMessage and one DeleteMessage (for the
// Lambda worker, a share of its event source mapping's DeleteMessageBatch)
// where a visibility change took one ChangeMessageVisibility; either way
// the item is received once more when it is due.
//
// A deferral longer than SQS's delay limit (MaxDelay, 900 s: a retry time
// hours away, a clock far behind) keeps the received message instead,
// invisible for up to MaxVisibility (12 h), when this is its first
// receive: one ChangeMessageVisibility and one receive for the whole
// wait, where fresh messages would cost a send, a delete, a receive and a
// handler run every 15 minutes (48 of each for 12 h). When the message
// already has a receive behind it (it is back from such a wait, or from a
// failure), the item goes back as a fresh message delivered in 900 s,
// which the next long deferral again keeps invisible. So a deferral adds
// at most one receive to a message's count, and waiting alone, however
// long, never reaches the poison queue; its cost is one
// ChangeMessageVisibility plus one SendMessage, one DeleteMessage and one
// more receive per 12 h 15 min.
//
// When the send fails the received message is kept, invisible for the
// deferral (the former behaviour, which counts a receive), so nothing is
// lost; work_item_requeue_failed names the cause.
type Deferral struct {
	// Item is the received work item.
	Item dispatch.WorkItem
	// Receives is the received message's ApproximateReceiveCount (0 when
	// unknown, taken as a first receive).
	Receives int
	// Wait is the handler's answer: how long until the item may run, and
	// why.
	Wait *dispatch.RetryAfterError
	// Requeue sends the fresh message (a Dispatcher on the work queue).
	// Nil keeps the received message, as a failed send does.
	Requeue dispatch.Dispatcher
	// Hide makes the received message invisible for a while (Defer with
	// its receipt handle). Nil leaves a kept message to come back when its
	// visibility timeout ends.
	Hide func(ctx context.Context, d time.Duration) error
}

// How a deferred item went back (the handed_back attribute of
// work_item_deferred).
const (
	handedFresh  = "fresh_message"      // a new message carries it
	handedHidden = "visibility"         // the received message, invisible until due
	handedLeft   = "visibility_timeout" // the received message, back when its visibility timeout ends
)

// HandBack hands the item back to the work queue as the package comment
// describes and reports whether the received message is to be
// acknowledged (deleted): true when a fresh message now carries the item,
// false when the received one stays in the queue. It logs
// work_item_deferred (info: reason, retry_in, handed_back, deliver_in) and,
// at warn level, work_item_requeue_failed or visibility_reset_failed when
// a call fails. log should name the message and the execution. ctx bounds
// its calls.
func (d Deferral) HandBack(ctx context.Context, log *slog.Logger) (ack bool) {
	// A deferral is a lower bound: whole seconds, rounded up, at least one.
	wait := wholeSeconds(min(max(d.Wait.Delay, time.Second), MaxVisibility))
	if d.Requeue != nil && (wait <= MaxDelay || d.Receives > 1) {
		delay := min(wait, MaxDelay)
		err := d.Requeue.Dispatch(ctx, dispatch.Message{Item: d.Item, Delay: delay})
		if err == nil {
			d.logDeferred(ctx, log, handedFresh, delay)
			return true
		}
		log.LogAttrs(ctx, slog.LevelWarn, "work_item_requeue_failed", slog.String("event", "work_item_requeue_failed"),
			slog.String("error", err.Error()))
	}
	// Keep the received message, invisible for the whole wait.
	how := handedLeft
	if d.Hide != nil {
		if err := d.Hide(ctx, wait); err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "visibility_reset_failed", slog.String("event", "visibility_reset_failed"),
				slog.String("error", err.Error()))
		} else {
			how = handedHidden
		}
	}
	d.logDeferred(ctx, log, how, wait)
	return false
}

func (d Deferral) logDeferred(ctx context.Context, log *slog.Logger, how string, delay time.Duration) {
	attrs := []slog.Attr{slog.String("event", "work_item_deferred"), slog.String("reason", d.Wait.Reason),
		slog.Duration("retry_in", d.Wait.Delay), slog.String("handed_back", how)}
	if how != handedLeft {
		attrs = append(attrs, slog.Duration("deliver_in", delay))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "work_item_deferred", attrs...)
}

// wholeSeconds rounds d up to whole seconds (a deferral is a lower bound).
func wholeSeconds(d time.Duration) time.Duration { return time.Duration(seconds(d)) * time.Second }
