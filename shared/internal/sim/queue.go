package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/pipeline"
)

// sqsQueue models an SQS standard queue as the worker and dlq functions'
// event source mappings see it: a delay on send (whole seconds, at most
// 900), a visibility timeout on every receive, ApproximateReceiveCount,
// ChangeMessageVisibility by receipt handle, delete, and a redrive policy
// that moves a message to the poison queue when a receive would exceed
// maxReceiveCount. Messages are received one per batch (a batch of one is
// what keeps the worker handler's goroutines from racing each other).
type sqsQueue struct {
	w          *world
	name       string
	visibility time.Duration
	maxReceive int // 0: no redrive policy
	msgs       map[string]*message
	next       int
	// handle delivers a received message to a process's handler.
	handle func(p *proc, m *message, ev events.SQSEvent) (events.SQSEventResponse, error)
}

// message is one queued message.
type message struct {
	id   string
	body string
	exec string
	// traceParent is the String message attribute traceparent (as
	// sqsbackend.Dispatcher sends it; empty: none).
	traceParent string
	visibleAt   time.Time
	receives    int
	receipt     string
	epoch       int // grows with every visibility change: stale receive events see it moved
	// deferredAt is the receive during which the handler deferred it.
	deferredAt int
	// Why earlier receives ended: a crash or a failure makes a poison
	// move legitimate; deferrals do not.
	crashes, failures, deferrals int
}

func newQueue(w *world, name string, visibility time.Duration, maxReceive int) *sqsQueue {
	return &sqsQueue{w: w, name: name, visibility: visibility, maxReceive: maxReceive, msgs: map[string]*message{}}
}

// urgentAt is the simulated deployment's priority.urgent-at (its
// default): priority 1 takes the urgent lane.
const urgentAt = 1

// invUrgentLane: every work item of an urgent execution travels the
// urgent queue, whichever path dispatched it (submit, hand-over, retry,
// the sweeper, a resume, a re-drive, a hand-back), so that it never
// waits behind the work queue's backlog. The simulated queues deliver
// every visible message at once (no consumer capacity), so the check is
// on the lane each item takes, judged by the priority the execution was
// submitted with (not the one the item carries).
const invUrgentLane = "urgent work takes the urgent lane"

// newQueues creates the work queue, the urgent work queue (both
// redriving after the same receives) and the dead-letter queue, as the
// stack does.
func (w *world) newQueues() {
	w.work = newQueue(w, "work", w.cfg.visibility, w.cfg.poisonAfter)
	w.work.handle = deliverWork
	w.urgent = newQueue(w, "urgent", w.cfg.visibility, w.cfg.poisonAfter)
	w.urgent.handle = deliverWork
	w.dlq = newQueue(w, "dlq", 30*time.Second, 0)
	w.dlq.handle = deliverDLQ
}

// queueOf is the work queue a record came from, by its event source ARN
// (what the worker function's DeferFrom goes by).
func (w *world) queueOf(sourceARN string) *sqsQueue {
	if w.urgent != nil && strings.HasSuffix(sourceARN, ":"+w.urgent.name) {
		return w.urgent
	}
	return w.work
}

// urgentLocked reports whether exec was submitted urgent (priority at
// most urgentAt, the pipeline's default when none was asked for), as far
// as the simulator knows it. Callers hold w.mu.
func (w *world) urgentLocked(exec string) bool {
	inc := w.latest[exec]
	if inc == nil {
		return false
	}
	prio := inc.last.Priority
	if inc.sub != nil {
		prio = pipeline.PriorityOf(nil, inc.sub.priority)
	}
	return prio >= 1 && prio <= urgentAt
}

// sqsDelay is how SQS applies a requested delay: whole seconds, rounded
// up, at most 900 s (sqsbackend.Dispatcher does the same).
func sqsDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	s := (d + time.Second - 1) / time.Second * time.Second
	return min(s, 900*time.Second)
}

// send stores a message (the queue's answer to SendMessage), with a
// traceparent message attribute when traceParent is set.
func (q *sqsQueue) send(body, exec, traceParent string, delay time.Duration) {
	w := q.w
	w.mu.Lock()
	q.next++
	m := &message{id: fmt.Sprintf("%s-%d", q.name, q.next), body: body, exec: exec, traceParent: traceParent, visibleAt: time.Now().Add(sqsDelay(delay))}
	q.msgs[m.id] = m
	q.scheduleLocked(m)
	w.mu.Unlock()
}

// scheduleLocked plans the receive of m when it becomes visible (after a
// small polling latency). Callers hold w.mu.
func (q *sqsQueue) scheduleLocked(m *message) {
	m.epoch++
	epoch := m.epoch
	q.w.draws++
	at := m.visibleAt.Add(time.Duration(q.w.rng.Int64N(int64(200*time.Millisecond))) + time.Millisecond)
	q.w.atLocked(at, "receive "+q.name, func() { q.receive(m.id, epoch) })
}

// receive hands a visible message to a live process, or moves it to the
// poison queue when its receives are used up.
func (q *sqsQueue) receive(id string, epoch int) {
	w := q.w
	w.mu.Lock()
	m := q.msgs[id]
	if m == nil || m.epoch != epoch || m.visibleAt.After(time.Now()) {
		w.mu.Unlock()
		return
	}
	if q.maxReceive > 0 && m.receives >= q.maxReceive {
		delete(q.msgs, id)
		w.mu.Unlock()
		q.poisoned(m)
		return
	}
	p := w.liveProcLocked()
	if p == nil { // every process is restarting: poll again shortly
		m.visibleAt = time.Now().Add(time.Second)
		q.scheduleLocked(m)
		w.mu.Unlock()
		return
	}
	lane := q == w.work || q == w.urgent
	misrouted := q == w.work && w.urgentLocked(m.exec)
	m.receives++
	m.receipt = fmt.Sprintf("%s#%d", m.id, m.receives)
	m.visibleAt = time.Now().Add(q.visibility)
	q.scheduleLocked(m) // back when the visibility ends, unless deleted
	receipt, receives := m.receipt, m.receives
	ev := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: m.id, ReceiptHandle: receipt, Body: m.body, EventSource: "aws:sqs",
		EventSourceARN: "arn:aws:sqs:sim-1:000000000000:" + q.name, AWSRegion: "sim-1",
		Attributes: map[string]string{"ApproximateReceiveCount": strconv.Itoa(receives)},
	}}}
	if m.traceParent != "" {
		tp := m.traceParent
		ev.Records[0].MessageAttributes = map[string]events.SQSMessageAttribute{
			sqsbackend.AttrTraceParent: {StringValue: &tp, DataType: "String"}}
	}
	w.mu.Unlock()
	if lane {
		w.check(invUrgentLane)
	}
	if misrouted {
		w.violate(invUrgentLane, m.exec, "work item %s of an urgent execution was received from the work queue, not the urgent queue", m.id)
	}
	w.async(func() {
		resp, err := q.handle(p, m, ev)
		if p.isCrashed() {
			w.mu.Lock()
			m.crashes++
			w.mu.Unlock()
			return // a dead invocation answers nothing: the message comes back
		}
		failed := err != nil
		if resp.BatchItemFailures != nil && len(resp.BatchItemFailures) > 0 {
			failed = true
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !failed {
			if q.msgs[m.id] == m && m.receipt == receipt {
				delete(q.msgs, m.id)
			}
			return
		}
		if m.deferredAt == receives {
			m.deferrals++
		} else {
			m.failures++
		}
	})
}

// changeVisibility is ChangeMessageVisibility: by the latest receipt only.
func (q *sqsQueue) changeVisibility(receipt string, d time.Duration) error {
	w := q.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range q.msgs {
		if m.receipt == receipt {
			m.visibleAt = time.Now().Add(d)
			m.deferredAt = m.receives
			q.scheduleLocked(m)
			return nil
		}
	}
	return fmt.Errorf("sim: receipt handle %s is not current", receipt)
}

// poisoned checks a message the redrive policy moved to the poison queue:
// a worker must have crashed or failed on it, else it is a false poison
// alert.
func (q *sqsQueue) poisoned(m *message) {
	w := q.w
	w.fault("poisoned")
	w.tracef(m.exec, "work item %s moved to the poison queue after %d receives (crashes=%d failures=%d deferrals=%d)",
		m.id, m.receives, m.crashes, m.failures, m.deferrals)
	w.check(invNoFalsePoison)
	if m.crashes+m.failures == 0 {
		w.violate(invNoFalsePoison, m.exec, "work item %s reached the poison queue after %d receives, all of them deferrals (%d): no worker crashed or failed on it",
			m.id, m.receives, m.deferrals)
	}
}

// deliverWork is the work queue's handler: the real worker function's
// SQS batch handler on a process.
func deliverWork(p *proc, _ *message, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // the function's timeout
	defer cancel()
	return p.worker(ctx, ev)
}

// deliverDLQ is the dead-letter queue's handler: the real dlq function.
func deliverDLQ(p *proc, _ *message, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.dlq(ctx, ev)
}

// queueDispatcher is the runtime's work dispatcher on the modelled work
// queue: what sqsbackend.Dispatcher does, plus lost, duplicated and
// delayed items.
type queueDispatcher struct {
	w *world
	q *sqsQueue
}

func (d *queueDispatcher) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	w := d.w
	for _, m := range msgs {
		q := d.q
		if q == w.work && w.urgent != nil && !w.o.urgentToWork && sqsbackend.Urgent(m.Item, urgentAt) {
			q = w.urgent // the lane, as sqsbackend.Dispatcher routes it
		}
		tp := m.Item.TraceParent // a message attribute, not the body
		m.Item.TraceParent = ""
		body, _ := json.Marshal(m.Item) // cannot fail
		delay := m.Delay
		if !w.settling {
			switch {
			case w.chance(w.cfg.rates.drop):
				w.fault("work_item_lost")
				w.noteDrop(m.Item.ExecutionID)
				w.tracef(m.Item.ExecutionID, "work item lost")
				continue
			case w.chance(w.cfg.rates.duplicate):
				w.fault("work_item_duplicated")
				q.send(string(body), m.Item.ExecutionID, tp, delay+w.between(0, 30*time.Second))
			case w.chance(w.cfg.rates.delay):
				w.fault("work_item_delayed")
				delay += w.between(time.Second, 2*time.Minute)
			}
		}
		q.send(string(body), m.Item.ExecutionID, tp, delay)
	}
	return nil
}

// queuePublisher is the dead-letter publisher on the modelled
// dead-letter queue (sqsbackend's SQS publisher).
type queuePublisher struct{ q *sqsQueue }

func (d *queuePublisher) Publish(_ context.Context, env deadletter.Envelope) error {
	body, err := json.Marshal(env)
	if err != nil {
		return err
	}
	d.q.send(string(body), env.ExecutionID, "", 0)
	return nil
}
