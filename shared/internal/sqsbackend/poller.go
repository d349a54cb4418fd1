package sqsbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/dispatch"
)

// PollerOptions tune a Poller. Zero values take the defaults.
type PollerOptions struct {
	// WaitTimeSeconds is the long-poll wait of each ReceiveMessage call,
	// 1 to 20. Default 20.
	WaitTimeSeconds int32
	// Concurrency is how many messages are handled at once. The poller
	// only receives messages it has a free slot for (at most 10 per call),
	// so no received message waits unhandled. Default 8.
	Concurrency int
	// VisibilityTimeout is requested on every receive (whatever the
	// queue's own setting) and renewed every VisibilityTimeout/2 while the
	// handler runs, so a long transition is not delivered again meanwhile.
	// Whole seconds, at least 2 s. Default 60 s.
	VisibilityTimeout time.Duration
	// RetryDelay is how soon a message whose handler failed is delivered
	// again: the poller sets its visibility to RetryDelay * 2^(n-1) for its
	// n-th receive, capped at VisibilityTimeout, rather than leaving it
	// invisible for the rest of the visibility timeout. Whole seconds
	// (rounded up). Default 1 s.
	RetryDelay time.Duration
	// DrainTimeout bounds the wait for in-flight handlers once Run's
	// context ends: their context is cancelled when it passes. Zero waits
	// for them without cancelling their context.
	DrainTimeout time.Duration
	// Logger receives the poller's events. Default: discarded.
	Logger *slog.Logger
	// UrgentURL is the urgent work queue (queue.urgent-url); empty: none,
	// every receive is a long poll of the work queue. With it the poller
	// receives from the urgent queue first, and from the work queue every
	// WorkEvery-th receive and whenever the urgent queue came back empty
	// (see lanes), so that urgent work does not wait behind a backlog and
	// normal work waits a bounded number of receives.
	UrgentURL string
}

// WorkEvery bounds how long normal work waits behind urgent work: with an
// urgent queue, at least every WorkEvery-th receive of a Poller is from
// the work queue.
const WorkEvery = 4

// Default poller settings.
const (
	DefaultWaitTimeSeconds   = 20
	DefaultConcurrency       = 8
	DefaultVisibilityTimeout = 60 * time.Second
	DefaultRetryDelay        = time.Second
)

// ackTimeout bounds each acknowledging call (delete, visibility change).
const ackTimeout = 10 * time.Second

// Poller receives work items from an SQS queue and calls a handler for
// each. A message whose handler returns nil is deleted (after the handler's
// slot is free again, several at once in a DeleteMessageBatch when
// handlers finish together: see Run); one whose handler
// defers it (dispatch.RetryAfter) is handed back without counting a
// receive (Deferral.HandBack: a fresh message, then the received one
// deleted); one whose handler fails or panics comes back after a short
// backoff; one whose body is not a work item is left alone. So only
// failures and malformed bodies count towards the queue's maxReceiveCount,
// after which its redrive policy moves the message to the poison queue.
//
// Logged events (snake_case keys, an "event" key naming each):
// poller_started, poller_stopped, poller_drain_timeout (warn),
// sqs_receive_failed (warn), work_item_malformed (error; never the body),
// work_item_deferred, work_item_requeue_failed (warn), handler_failed
// (warn), handler_panicked (error), visibility_extend_failed (warn),
// visibility_reset_failed (warn), delete_failed (warn).
type Poller struct {
	client   *sqs.Client
	queueURL string
	handler  dispatch.Handler
	requeue  map[string]*Dispatcher // by queue URL: hands deferred items back to their queue
	opts     PollerOptions
	log      *slog.Logger
}

// NewPoller returns a poller for the queue at queueURL calling h. It
// starts nothing: call Run.
func NewPoller(client *sqs.Client, queueURL string, h dispatch.Handler, opts PollerOptions) *Poller {
	if opts.WaitTimeSeconds <= 0 {
		opts.WaitTimeSeconds = DefaultWaitTimeSeconds
	}
	opts.WaitTimeSeconds = min(opts.WaitTimeSeconds, 20)
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = DefaultVisibilityTimeout
	}
	opts.VisibilityTimeout = min(max(opts.VisibilityTimeout.Round(time.Second), 2*time.Second), MaxVisibility)
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = DefaultRetryDelay
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	requeue := map[string]*Dispatcher{queueURL: NewDispatcher(client, queueURL)}
	if opts.UrgentURL != "" {
		requeue[opts.UrgentURL] = NewDispatcher(client, opts.UrgentURL)
	}
	return &Poller{client: client, queueURL: queueURL, handler: h, requeue: requeue, opts: opts,
		log: log.With(slog.String("queue_url", queueURL))}
}

// lanes chooses the queue of each receive of a Poller with an urgent
// queue, and its long-poll wait:
//   - while the urgent queue has messages, receives go to it, except
//     every WorkEvery-th, which goes to the work queue (so normal work's
//     wait is bounded by WorkEvery receives); both without a long-poll
//     wait, so that a receive of a lane that just ran dry does not hold
//     slots the other lane's backlog could use;
//   - once a receive of the urgent queue came back empty, receives go to
//     the work queue with the full long poll, and the urgent queue is
//     probed (no wait) again after a work receive that did not fill up
//     (the work queue has no backlog) or after WorkEvery-1 work receives.
//
// So an urgent message waits at most WorkEvery-1 receives behind a
// backlog of normal work, and one long poll (sqs.wait-seconds) on an
// idle poller; an idle poller sends a probe per long poll.
type lanes struct {
	work, urgent string
	wait         int32 // the long-poll wait
	urgentEmpty  bool  // the last urgent receive found nothing
	since        int   // receives since the other lane's last
	probe        bool  // urgentEmpty: the next receive probes the urgent queue
}

// next is the queue and wait of the next receive.
func (l *lanes) next() (string, int32) {
	switch {
	case l.urgent == "":
		return l.work, l.wait
	case !l.urgentEmpty && l.since < WorkEvery-1:
		l.since++
		return l.urgent, 0
	case !l.urgentEmpty:
		l.since = 0
		return l.work, 0
	case l.probe || l.since >= WorkEvery-1:
		l.probe, l.since = false, 0
		return l.urgent, 0
	default:
		l.since++
		return l.work, l.wait
	}
}

// got records what a receive of url asked for and brought.
func (l *lanes) got(url string, asked, n int) {
	switch {
	case l.urgent == "":
	case url == l.urgent:
		if empty := n == 0; empty != l.urgentEmpty {
			l.urgentEmpty, l.since, l.probe = empty, 0, false
		}
	case l.urgentEmpty && n < asked:
		l.probe = true
	}
}

// maxReceives bounds the ReceiveMessage calls a Poller keeps in flight
// (and its Concurrency bounds them too).
const maxReceives = 4

// received is the answer to one ReceiveMessage call that asked for asked
// messages.
type received struct {
	url   string
	msgs  []types.Message
	asked int
	err   error
}

// Run receives and handles messages until ctx ends. Then it stops
// receiving, waits for the handlers in flight (cancelling their context
// once DrainTimeout has passed, if set), settles their messages, and
// returns nil. Handlers get a context that carries ctx's values but is
// not cancelled with it. Run must not be called twice at once.
//
// Each receive asks for as many messages as there are free slots (at most
// 10), so no received message waits for a slot. One receive is in flight
// while the queue is idle (a long poll); while it has a backlog (the last
// receive came back with all it asked for), a slot freed while a receive
// is in flight starts another, up to maxReceives at once: under load,
// slots free one at a time, and a worker need not wait out another's
// round trip before its next message. A handler's slot is free as soon
// as it returns: its message is deleted afterwards, with those of the
// handlers that finished meanwhile in one DeleteMessageBatch (deleter).
func (p *Poller) Run(ctx context.Context) error {
	if p.handler == nil {
		return errors.New("sqsbackend: poller has no handler")
	}
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	p.log.LogAttrs(ctx, slog.LevelInfo, "poller_started", slog.String("event", "poller_started"),
		slog.Int("concurrency", p.opts.Concurrency), slog.Duration("visibility_timeout", p.opts.VisibilityTimeout))

	dels := map[string]*deleter{}
	for url := range p.requeue {
		dels[url] = newDeleter(p.client, url, p.opts.Concurrency)
	}
	lane := &lanes{work: p.queueURL, urgent: p.opts.UrgentURL, wait: p.opts.WaitTimeSeconds}
	var inflight sync.WaitGroup
	finished := make(chan struct{}, p.opts.Concurrency) // a handler's slot is free again
	limit := min(maxReceives, p.opts.Concurrency)
	results := make(chan received, limit)
	free, receiving, backlog, failures := p.opts.Concurrency, 0, false, 0
	var pause <-chan time.Time // after a failed receive: none until it fires
	stopped := ctx.Done()
	for {
		for ctx.Err() == nil && pause == nil && free > 0 && (receiving == 0 || backlog && receiving < limit) {
			n := min(free, 10)
			free -= n
			receiving++
			url, wait := lane.next()
			go func() {
				msgs, err := p.receive(ctx, url, wait, n)
				results <- received{url: url, msgs: msgs, asked: n, err: err}
			}()
		}
		if ctx.Err() != nil && receiving == 0 {
			break
		}
		select {
		case r := <-results:
			receiving--
			free += r.asked - len(r.msgs)
			if r.err != nil {
				backlog = false
				if ctx.Err() != nil {
					continue
				}
				failures++
				p.log.LogAttrs(ctx, slog.LevelWarn, "sqs_receive_failed", slog.String("event", "sqs_receive_failed"),
					slog.String("error", r.err.Error()), slog.Int("consecutive_failures", failures))
				pause = time.After(receiveBackoff(failures))
				continue
			}
			failures = 0
			lane.got(r.url, r.asked, len(r.msgs))
			backlog = len(r.msgs) == r.asked
			for _, m := range r.msgs {
				inflight.Add(1)
				go func() {
					defer func() { finished <- struct{}{}; inflight.Done() }()
					p.handle(hctx, r.url, m, dels[r.url])
				}()
			}
		case <-finished:
			free++
		case <-pause:
			pause = nil
		case <-stopped:
			stopped = nil // the receives in flight end with ctx
		}
	}

	done := make(chan struct{})
	go func() { inflight.Wait(); close(done) }()
	if p.opts.DrainTimeout > 0 {
		select {
		case <-done:
		case <-time.After(p.opts.DrainTimeout):
			p.log.LogAttrs(hctx, slog.LevelWarn, "poller_drain_timeout", slog.String("event", "poller_drain_timeout"),
				slog.Duration("drain_timeout", p.opts.DrainTimeout))
			hcancel()
		}
	}
	<-done
	for _, del := range dels {
		del.close() // the last deletes
	}
	p.log.LogAttrs(hctx, slog.LevelInfo, "poller_stopped", slog.String("event", "poller_stopped"))
	return nil
}

// receive asks the queue at url for up to n messages, long-polling wait
// seconds.
func (p *Poller) receive(ctx context.Context, url string, wait int32, n int) ([]types.Message, error) {
	out, err := p.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             wait,
		VisibilityTimeout:           seconds(p.opts.VisibilityTimeout),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		MessageAttributeNames:       []string{AttrTraceParent},
	})
	if err != nil {
		return nil, err
	}
	if len(out.Messages) > n { // never more than asked for; be safe anyway
		return out.Messages[:n], nil
	}
	return out.Messages, nil
}

// handle processes one message received from the queue at url. ctx is
// the handlers' context; del deletes the message once it is handled (or
// handed back).
func (p *Poller) handle(ctx context.Context, url string, m types.Message, del *deleter) {
	receives, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	log := p.log.With(slog.String("message_id", aws.ToString(m.MessageId)), slog.Int("receive_count", receives))
	if url != p.queueURL {
		log = log.With(slog.String("lane", "urgent"))
	}
	item, err := decode(aws.ToString(m.Body))
	item.TraceParent = traceParent(m.MessageAttributes)
	if err != nil {
		// Leave it: it becomes visible again when its visibility timeout
		// ends, and the redrive policy moves it to the poison queue.
		log.LogAttrs(ctx, slog.LevelError, "work_item_malformed", slog.String("event", "work_item_malformed"),
			slog.String("error", err.Error()), slog.Int("body_bytes", len(aws.ToString(m.Body))))
		return
	}
	log = log.With(slog.String("execution_id", item.ExecutionID), slog.String("tenant", item.TenantID))

	stop := make(chan struct{})
	extended := make(chan struct{})
	go func() {
		defer close(extended)
		p.extend(ctx, log, url, m.ReceiptHandle, stop)
	}()
	err = p.call(ctx, item)
	close(stop)
	<-extended

	// Settle even when ctx was cancelled by the drain timeout.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if ra, ok := dispatch.AsRetryAfter(err); ok {
		// Not due yet (or not for this worker): hand it back, not counting
		// a receive, instead of acknowledging it.
		d := Deferral{Item: item, Receives: receives, Wait: ra, Requeue: p.requeue[url],
			Hide: func(ctx context.Context, wait time.Duration) error {
				return Defer(ctx, p.client, url, aws.ToString(m.ReceiptHandle), wait)
			}}
		if d.HandBack(actx, log) {
			del.add(m.ReceiptHandle, log)
		}
		return
	}
	if err != nil {
		delay := retryDelay(p.opts.RetryDelay, receives, p.opts.VisibilityTimeout)
		log.LogAttrs(ctx, slog.LevelWarn, "handler_failed", slog.String("event", "handler_failed"),
			slog.String("error", err.Error()), slog.Duration("retry_in", delay))
		if err := Defer(actx, p.client, url, aws.ToString(m.ReceiptHandle), delay); err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "visibility_reset_failed", slog.String("event", "visibility_reset_failed"),
				slog.String("error", err.Error()))
		}
		return
	}
	del.add(m.ReceiptHandle, log)
}

// call runs the handler, turning a panic into an error.
func (p *Poller) call(ctx context.Context, item dispatch.WorkItem) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sqsbackend: handler panicked: %v", v)
			p.log.LogAttrs(ctx, slog.LevelError, "handler_panicked", slog.String("event", "handler_panicked"),
				slog.String("execution_id", item.ExecutionID), slog.String("tenant", item.TenantID), slog.Any("panic", v))
		}
	}()
	return p.handler(ctx, item)
}

// extend renews the message's visibility every VisibilityTimeout/2 until
// stop closes. A failed renewal is logged and tried again at the next
// tick; if the message is delivered again meanwhile, the duplicate is
// harmless.
func (p *Poller) extend(ctx context.Context, log *slog.Logger, url string, receipt *string, stop <-chan struct{}) {
	tick := time.NewTicker(p.opts.VisibilityTimeout / 2)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ackTimeout, p.opts.VisibilityTimeout/2))
		_, err := p.client.ChangeMessageVisibility(actx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: receipt, VisibilityTimeout: seconds(p.opts.VisibilityTimeout),
		})
		cancel()
		if err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "visibility_extend_failed", slog.String("event", "visibility_extend_failed"),
				slog.String("error", err.Error()))
		} else {
			log.LogAttrs(ctx, slog.LevelDebug, "visibility_extended", slog.String("event", "visibility_extended"))
		}
	}
}

// MaxVisibility is SQS's longest visibility timeout (12 hours): the
// furthest a received item can be deferred.
const MaxVisibility = 12 * time.Hour

// Defer makes a received message invisible for d (at least a second, at
// most MaxVisibility): how a consumer keeps a received message in the
// queue for a while instead of acknowledging it (a failed item's backoff,
// a deferred item kept by Deferral.HandBack). The message's next receive
// counts towards the queue's maxReceiveCount.
func Defer(ctx context.Context, client *sqs.Client, queueURL, receipt string, d time.Duration) error {
	_, err := client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(receipt),
		VisibilityTimeout: seconds(min(max(d, time.Second), MaxVisibility)),
	})
	return err
}

// retryDelay is base * 2^(receives-1), at most limit.
func retryDelay(base time.Duration, receives int, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < receives && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func receiveBackoff(failures int) time.Duration {
	return retryDelay(100*time.Millisecond, failures, 5*time.Second)
}

// seconds rounds d up to whole seconds for SQS.
func seconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32((d + time.Second - 1) / time.Second)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
