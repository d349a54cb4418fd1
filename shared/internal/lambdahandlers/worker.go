package lambdahandlers

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
)

// MaxWorkerConcurrency bounds the records of one batch processed at
// once: 10, the largest SQS batch without a batching window, so a batch
// of up to 10 runs entirely in parallel.
const MaxWorkerConcurrency = 10

// maxReleaseReserve bounds the time the worker keeps, before the
// invocation's deadline, for handing unfinished steps back.
const maxReleaseReserve = 2 * time.Second

// Worker is the worker function's handler for batches (up to 10) of the
// SQS work queue. Each record is one work item: one transition,
// Runtime.Process, with the records of a batch processed concurrently (at
// most MaxWorkerConcurrency at once).
//
// The response lists as batch item failures (the event source mapping
// must have ReportBatchItemFailures on) exactly the records to deliver
// again:
//
//   - a body that is not a work item (event "work_item_malformed", logged
//     without the body): the queue's redrive policy moves it to the
//     poison queue after its maximum receives;
//   - a record not started because, as it was about to start, the
//     invocation's deadline left less than margin (the lease) (event
//     "worker_time_exhausted");
//   - a record whose Process returned an error (a backend failed before
//     the outcome was recorded; event "work_item_failed") or panicked;
//   - a record whose Process deferred it (dispatch.RetryAfter: not due
//     yet, a clock behind, a pipeline version this worker does not serve;
//     event "work_item_deferred") that was not handed back as a fresh
//     message: with WithDeferrer its visibility is first set to when it
//     will be due.
//
// A deferred record is no failure and must not count towards the poison
// queue: with WithRequeue the worker sends a fresh message with the same
// work item, delivered when it is due, and acknowledges the record (see
// sqsbackend.Deferral for the rule, the wait beyond SQS's 15-minute delay
// limit, and the fallback when the send fails).
//
// Process returning nil (committed, duplicate, lost claim, finished
// execution) is success. The handler never fails the whole batch: its
// error is always nil. Steps run under a context that ends a little
// before the invocation's deadline (at most 2s, a quarter of margin), so
// that a step still running then is handed back (its attempt not used
// up) instead of being frozen with its lease held.
func Worker(rt *engine.Runtime, margin time.Duration, log *slog.Logger, opts ...WorkerOption) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	if log == nil {
		log = slog.Default()
	}
	var o workerOptions
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		start := time.Now()
		workCtx, cancel := workContext(ctx, margin)
		defer cancel()
		outcomes := make([]outcome, len(ev.Records))
		var wg sync.WaitGroup
		slots := make(chan struct{}, MaxWorkerConcurrency)
		for i := range ev.Records {
			m := &ev.Records[i]
			slots <- struct{}{}
			if left, ok := timeLeft(ctx); ok && left < margin {
				<-slots
				outcomes[i] = outcomeSkipped
				log.LogAttrs(ctx, slog.LevelWarn, "worker_time_exhausted", slog.String("event", "worker_time_exhausted"),
					slog.String("message_id", m.MessageId), slog.Int64("time_left_ms", left.Milliseconds()),
					slog.Int64("margin_ms", margin.Milliseconds()))
				continue
			}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				outcomes[i] = processRecord(workCtx, rt, m, log, o)
			}()
		}
		wg.Wait()

		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		counts := map[outcome]int{}
		for i, o := range outcomes {
			counts[o]++
			if o != outcomeDone && o != outcomeRequeued {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
			}
		}
		level := slog.LevelInfo
		if len(resp.BatchItemFailures) > 0 {
			level = slog.LevelWarn
		}
		log.LogAttrs(ctx, level, "worker_batch_completed", slog.String("event", "worker_batch_completed"),
			slog.Int("records", len(ev.Records)), slog.Int("done", counts[outcomeDone]),
			slog.Int("failed", counts[outcomeFailed]), slog.Int("malformed", counts[outcomeMalformed]),
			slog.Int("skipped", counts[outcomeSkipped]), slog.Int("deferred", counts[outcomeDeferred]),
			slog.Int("requeued", counts[outcomeRequeued]),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
		return resp, nil
	}
}

// outcome is what became of one record.
type outcome int

const (
	outcomeDone      outcome = iota // processed: acknowledge
	outcomeFailed                   // Process error or panic: deliver again
	outcomeMalformed                // not a work item: deliver again (towards the poison queue)
	outcomeSkipped                  // not started for lack of time: deliver again
	outcomeDeferred                 // not due yet: deliver again when it is
	outcomeRequeued                 // not due yet, a fresh message sent: acknowledge
)

// WorkerOption adjusts Worker.
type WorkerOption func(*workerOptions)

type workerOptions struct {
	deferrer Deferrer
	requeue  dispatch.Dispatcher
}

// Deferrer makes a received work queue message invisible for d (SQS
// ChangeMessageVisibility with its receipt handle, on the queue whose
// ARN is sourceARN, the record's eventSourceARN: the work queue or the
// urgent one).
type Deferrer func(ctx context.Context, sourceARN, receiptHandle string, d time.Duration) error

// WithDeferrer lets the worker keep a deferred record (a
// dispatch.RetryAfterError) in the queue, invisible until it is due,
// when it is not handed back as a fresh message (no WithRequeue, a failed
// send, a long wait on a first receive), instead of having it come back
// at the queue's visibility timeout. The worker function sets it.
func WithDeferrer(d Deferrer) WorkerOption { return func(o *workerOptions) { o.deferrer = d } }

// WithRequeue makes the worker hand a deferred record back as a fresh
// message sent through d (the work queue's dispatcher), delivered when it
// is due, and acknowledge the record, so that a deferral does not count
// towards the queue's maxReceiveCount (sqsbackend.Deferral).
// The worker function sets it.
func WithRequeue(d dispatch.Dispatcher) WorkerOption { return func(o *workerOptions) { o.requeue = d } }

// deferTimeout bounds handing a deferred record back (a send, and a
// visibility change if the send fails).
const deferTimeout = 10 * time.Second

// processRecord runs one record's transition.
func processRecord(ctx context.Context, rt *engine.Runtime, m *events.SQSMessage, log *slog.Logger, o workerOptions) (out outcome) {
	receives, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	rlog := log.With(slog.String("message_id", m.MessageId), slog.Int("receive_count", receives))
	item, err := sqsbackend.Decode(m.Body)
	item.TraceParent = sqsbackend.EventTraceParent(*m)
	if err != nil {
		rlog.LogAttrs(ctx, slog.LevelError, "work_item_malformed", slog.String("event", "work_item_malformed"),
			slog.String("error", err.Error()), slog.Int("body_bytes", len(m.Body)))
		return outcomeMalformed
	}
	rlog = rlog.With(slog.String("execution_id", item.ExecutionID), slog.String("tenant", item.TenantID))
	defer func() {
		if v := recover(); v != nil {
			rlog.LogAttrs(ctx, slog.LevelError, "work_item_panicked", slog.String("event", "work_item_panicked"),
				slog.String("panic", fmt.Sprint(v)))
			out = outcomeFailed
		}
	}()
	err = rt.Process(ctx, item)
	if ra, ok := dispatch.AsRetryAfter(err); ok {
		d := sqsbackend.Deferral{Item: item, Receives: receives, Wait: ra, Requeue: o.requeue}
		if o.deferrer != nil {
			d.Hide = func(ctx context.Context, wait time.Duration) error {
				return o.deferrer(ctx, m.EventSourceARN, m.ReceiptHandle, wait)
			}
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deferTimeout)
		defer cancel()
		if d.HandBack(dctx, rlog) {
			return outcomeRequeued
		}
		return outcomeDeferred
	}
	if err != nil {
		rlog.LogAttrs(ctx, slog.LevelWarn, "work_item_failed", slog.String("event", "work_item_failed"),
			slog.String("error", err.Error()))
		return outcomeFailed
	}
	return outcomeDone
}

// timeLeft is the time until ctx's deadline, if it has one.
func timeLeft(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(d), true
}

// workContext is ctx ending a reserve before its deadline: a quarter of
// margin, at most maxReleaseReserve.
func workContext(ctx context.Context, margin time.Duration) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d.Add(-min(maxReleaseReserve, max(margin/4, 0))))
}
