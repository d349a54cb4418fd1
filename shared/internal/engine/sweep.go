package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/store"
)

// SweepResult counts what one sweep did.
type SweepResult struct {
	// Due is how many rows the sweep index returned (each looked at once).
	Due int `json:"due"`
	// Redispatched counts work items sent again.
	Redispatched int `json:"redispatched"`
	// DeadLettersPublished counts pending dead letters now published.
	DeadLettersPublished int `json:"deadLettersPublished"`
	// AwaitsTimedOut counts parked awaits whose timeout the sweep enforced.
	AwaitsTimedOut int `json:"awaitsTimedOut"`
	// Cancelled counts cancelled executions whose worker had died, ended
	// CANCELLED by the sweep.
	Cancelled int `json:"cancelled"`
	// Rescheduled counts healthy rows whose next look was pushed forward.
	Rescheduled int `json:"rescheduled"`
	// Failed counts rows the sweep could not handle this time.
	Failed int `json:"failed"`
	// More reports that the sweep index holds more rows due now: call
	// Sweep again with the same pass to continue.
	More bool `json:"more"`
}

// maxSweepSpacing caps the spacing of the sweeper's repeated looks at a
// row it re-dispatched (or whose dead letter it could not publish).
const maxSweepSpacing = 15 * time.Minute

// SweepOnce is one sweep with a fresh pass: see Sweep.
func (r *Runtime) SweepOnce(ctx context.Context) (SweepResult, error) {
	return r.Sweep(ctx, &SweepPass{})
}

// SweepPass carries a sweeper invocation's position in the sweep index
// from one Sweep call to the next, so that an invocation reads each due
// row at most once. The zero value starts a pass (at the time of its first
// Sweep).
type SweepPass struct {
	by     time.Time
	cursor string
	seen   map[store.Key]bool
}

// Sweep looks at up to the sweep limit of rows whose SweepAt has come
// (the sweep index), continuing pass, and does what each needs:
//
//   - QUEUED or WAIT_RETRY due by more than the grace, or RUNNING with a
//     lease lapsed by more than the clock-skew tolerance and the grace: its work item
//     was lost, so it is dispatched again and its next look pushed out by
//     grace x 2^n (n re-dispatches so far, at most 15 minutes), so that a
//     row waiting in a queue backlog is not re-sent at every sweep;
//   - FAILED with its dead letter pending: the envelope is published, or
//     its next try pushed out likewise;
//   - WAITING_EXTERNAL at its await's timeout: the await step fails with
//     AWAIT_TIMEOUT;
//   - RUNNING with a cancel requested and its lease lapsed by more than
//     the clock-skew tolerance (its worker died before it saw the
//     cancel): it ends CANCELLED;
//   - a healthy row (running under a live lease, queued within its grace,
//     waiting for its timeout): its next look is pushed to when it could
//     need one;
//   - a row that needs no look (finished, parked without a timeout): it
//     leaves the sweep index.
//
// Every row handled is moved out of the range the pass reads (or
// remembered), so repeated calls page through a large due set; terminal
// rows cost nothing, whatever their number.
func (r *Runtime) Sweep(ctx context.Context, pass *SweepPass) (SweepResult, error) {
	if pass == nil {
		pass = &SweepPass{}
	}
	if pass.by.IsZero() {
		pass.by, pass.seen = r.deps.Clock.Now(), map[store.Key]bool{}
	}
	page, err := r.deps.Store.Due(ctx, store.DueQuery{By: pass.by, Limit: r.cfg.SweepLimit, Cursor: pass.cursor})
	if err != nil {
		return SweepResult{}, err
	}
	pass.cursor = page.Cursor
	keys := make([]store.Key, 0, len(page.Refs))
	for _, ref := range page.Refs {
		if !pass.seen[ref.Key] {
			pass.seen[ref.Key] = true
			keys = append(keys, ref.Key)
		}
	}
	res := SweepResult{Due: len(keys), More: page.Cursor != ""}
	rows, err := r.deps.Store.GetBatch(ctx, keys)
	if err != nil {
		return res, err
	}
	var msgs []dispatch.Message
	var redispatched []store.Execution
	for _, e := range rows {
		switch act, at := r.sweepPlan(&e, r.deps.Clock.Now()); act {
		case sweepRedispatch:
			msgs = append(msgs, dispatch.Message{Item: dispatch.ItemOf(&e)})
			redispatched = append(redispatched, e)
		case sweepPublish:
			if r.deadLetter(ctx, e) {
				res.DeadLettersPublished++
			} else {
				res.Failed++
				r.reschedule(ctx, &e, r.backoffLook(&e), e.Sweeps+1)
			}
		case sweepAwaitTimeout:
			if done, err := r.awaitTimeout(ctx, e); err != nil {
				res.Failed++
				r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "await_timeout_failed", slog.String("event", "await_timeout_failed"),
					slog.String("execution_id", e.ExecutionID), slog.String("tenant", e.TenantID), slog.String("error", err.Error()))
			} else if done {
				res.AwaitsTimedOut++
			}
		case sweepCancel:
			if _, err := r.finishCancel(ctx, e, "sweeper"); err == nil {
				res.Cancelled++
			} else if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, store.ErrNotFound) {
				res.Failed++
			}
		case sweepChildren:
			look := r.lookAtChildren(ctx, e)
			if r.renewMap(ctx, e, look) || r.reschedule(ctx, &e, look, 0) {
				res.Rescheduled++
			}
		case sweepKeyWait:
			if look := r.lookAtKeyWait(ctx, e); !look.IsZero() && (r.renewWaiter(ctx, e, look) || r.reschedule(ctx, &e, look, 0)) {
				res.Rescheduled++
			}
		case sweepReschedule:
			if r.reschedule(ctx, &e, at, e.Sweeps) {
				res.Rescheduled++
			}
		case sweepForget:
			r.reschedule(ctx, &e, time.Time{}, 0)
		}
	}
	if len(msgs) > 0 {
		spans := r.redispatchSpans(ctx, msgs, redispatched)
		err := r.deps.Dispatcher.Dispatch(ctx, msgs...)
		endSpans(spans, err)
		if err != nil {
			res.Failed += len(msgs)
			r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "dispatch_failed", slog.String("event", "dispatch_failed"),
				slog.Int("items", len(msgs)), slog.String("error", err.Error()))
		} else {
			res.Redispatched = len(msgs)
		}
		// Sent or not, space the next look: a failed send is tried again
		// then, and a row waiting in a backlog is not re-sent every sweep.
		for i := range redispatched {
			e := &redispatched[i]
			r.reschedule(ctx, e, r.backoffLook(e), e.Sweeps+1)
		}
	}
	level := slog.LevelDebug
	if res.Due > 0 {
		level = slog.LevelInfo
	}
	r.deps.Logger.LogAttrs(ctx, level, "sweep_completed", slog.String("event", "sweep_completed"),
		slog.Int("due", res.Due), slog.Int("redispatched", res.Redispatched), slog.Int("rescheduled", res.Rescheduled),
		slog.Int("dead_letters_published", res.DeadLettersPublished), slog.Int("awaits_timed_out", res.AwaitsTimedOut),
		slog.Int("cancelled", res.Cancelled), slog.Int("failed", res.Failed), slog.Bool("more", res.More))
	r.notify(ctx, EventSweepCompleted, store.Execution{}, res)
	return res, nil
}

// sweepAction is what the sweeper does with a row it looks at.
type sweepAction int

const (
	sweepNothing      sweepAction = iota // left the index meanwhile
	sweepRedispatch                      // its work item was lost: send it again
	sweepPublish                         // publish its pending dead letter
	sweepAwaitTimeout                    // fail its await step: the timeout passed
	sweepReschedule                      // healthy: look again at the returned time
	sweepForget                          // needs no look: leave the index
	sweepCancel                          // cancelled, its worker gone: end it CANCELLED
	sweepChildren                        // a parent waiting for its children: repair, carry a cancel on
	sweepKeyWait                         // waiting for a slot of its key: repair a lost wake-up, evict stale slots
)

// sweepPlan decides, from the row alone, what the sweeper does with it at
// now, and for sweepReschedule when to look again. It is pure.
func (r *Runtime) sweepPlan(e *store.Execution, now time.Time) (sweepAction, time.Time) {
	grace, tol := r.cfg.SweepGrace, r.cfg.ClockSkewTolerance
	switch {
	case e.SweepAt.IsZero():
		return sweepNothing, time.Time{}
	case e.Status == store.Failed && e.DLQPending:
		return sweepPublish, time.Time{}
	case e.Status == store.WaitingExternal && e.Await != nil && e.Await.Status == store.AwaitWaiting && !e.Await.TimeoutAt.IsZero():
		if !e.Await.TimeoutAt.After(now) {
			return sweepAwaitTimeout, time.Time{}
		}
		return sweepReschedule, e.Await.TimeoutAt
	case e.Status == store.WaitingChildren:
		return sweepChildren, time.Time{}
	case e.Status == store.WaitingKey:
		return sweepKeyWait, time.Time{}
	case cancelPending(e):
		// Cancelled while running: its worker ends it, unless it died; no
		// grace, since no work item has to come back for it.
		if lapsed := e.LeaseExpiresAt.Add(tol); lapsed.After(now) {
			return sweepReschedule, lapsed
		}
		return sweepCancel, time.Time{}
	case e.Status == store.Running:
		// A lapsed lease gets the grace too: the dead worker's own work item
		// comes back when its visibility ends.
		if lapsed := e.LeaseExpiresAt.Add(tol + grace); lapsed.After(now) {
			return sweepReschedule, lapsed
		}
		return sweepRedispatch, time.Time{}
	case e.Status == store.Queued || e.Status == store.WaitRetry:
		if overdue := e.NextDueAt.Add(grace); overdue.After(now) {
			return sweepReschedule, overdue
		}
		return sweepRedispatch, time.Time{}
	}
	return sweepForget, time.Time{} // terminal, or parked without a timeout
}

// backoffLook is when the sweeper looks again at a row it just acted on
// without seeing it progress: grace x 2^Sweeps from now (at least 1s x
// 2^Sweeps), at most maxSweepSpacing.
func (r *Runtime) backoffLook(e *store.Execution) time.Time {
	base := max(r.cfg.SweepGrace, time.Second)
	d := base
	for i := 0; i < e.Sweeps && d < maxSweepSpacing; i++ {
		d *= 2
	}
	return r.deps.Clock.Now().Add(min(d, maxSweepSpacing))
}

// reschedule moves the row's next look (Store.Reschedule). A conflict
// means the row moved on meanwhile (a commit set its own look), which is
// fine; other failures are logged and the row is seen again next sweep.
func (r *Runtime) reschedule(ctx context.Context, e *store.Execution, at time.Time, sweeps int) bool {
	err := r.deps.Store.Reschedule(ctx, e.Key(), e.SweepAt, at, sweeps)
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return err == nil
	}
	r.execLogger(e).LogAttrs(ctx, slog.LevelWarn, "sweep_reschedule_failed", slog.String("event", "sweep_reschedule_failed"),
		slog.String("error", err.Error()))
	return false
}

// RunSweeper calls SweepOnce every interval until ctx ends, continuing a
// pass while the sweep index holds more rows due.
func (r *Runtime) RunSweeper(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			pass := &SweepPass{}
			for {
				res, err := r.Sweep(ctx, pass)
				if err != nil && ctx.Err() == nil {
					r.deps.Logger.LogAttrs(ctx, slog.LevelWarn, "sweep_failed", slog.String("event", "sweep_failed"), slog.String("error", err.Error()))
				}
				if err != nil || !res.More || ctx.Err() != nil {
					break
				}
			}
		}
	}
}
