package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/execution"
	"github.com/qasync/qasync/shared/store"
)

// SweepResult counts what one sweep did.
type SweepResult struct {
	// Due is how many due rows the index returned.
	Due int `json:"due"`
	// Redispatched counts work items sent again.
	Redispatched int `json:"redispatched"`
	// DeadLettersPublished counts pending dead letters now published.
	DeadLettersPublished int `json:"deadLettersPublished"`
	// AwaitsTimedOut counts parked awaits whose timeout the sweep enforced.
	AwaitsTimedOut int `json:"awaitsTimedOut"`
	// Failed counts rows the sweep could not handle this time.
	Failed int `json:"failed"`
	// More reports that the limit was reached: more rows may be due.
	More bool `json:"more"`
}

// SweepOnce finds rows that are due by more than the sweep grace (their
// work item was lost, their lease lapsed, their retry time came, or their
// dead letter is still to be published) and re-dispatches or publishes
// them, at most the sweep limit. A WAITING_EXTERNAL row is due only at
// its await's timeout: the sweep fails its await step with AWAIT_TIMEOUT.
// Other parked rows and terminal rows are never in the due index.
func (r *Runtime) SweepOnce(ctx context.Context) (SweepResult, error) {
	return r.Sweep(ctx, nil)
}

// Sweep is SweepOnce for one pass of several sweeps: it skips the rows in
// seen (handled by the pass's earlier sweeps) and adds those it handles,
// so that repeated calls page through a large due set instead of handling
// its oldest rows again (and re-sending their work items) each time. A
// nil seen is a single sweep.
func (r *Runtime) Sweep(ctx context.Context, seen map[execution.Key]bool) (SweepResult, error) {
	now := r.Clock.Now()
	want := r.cfg.SweepLimit + len(seen)
	all, err := r.Store.Due(ctx, now.Add(-r.cfg.SweepGrace), want)
	if err != nil {
		return SweepResult{}, err
	}
	refs := make([]store.DueRef, 0, len(all))
	for _, ref := range all {
		if !seen[ref.Key] && len(refs) < r.cfg.SweepLimit {
			refs = append(refs, ref)
		}
	}
	if seen != nil {
		for _, ref := range refs {
			seen[ref.Key] = true
		}
	}
	res := SweepResult{Due: len(refs), More: len(all) >= want}
	var msgs []dispatch.Message
	for _, ref := range refs {
		switch {
		case ref.DLQPending && ref.Status == execution.Failed:
			e, err := r.Store.Get(ctx, ref.Key)
			if err == nil && e.Status == execution.Failed && e.DLQPending && r.deadLetter(ctx, e) {
				res.DeadLettersPublished++
			} else {
				res.Failed++
			}
		case ref.Status == execution.WaitingExternal:
			// A parked row is due only at its await's timeout.
			if done, err := r.awaitTimeout(ctx, ref.Key); err != nil {
				res.Failed++
				r.Logger.LogAttrs(ctx, slog.LevelWarn, "await_timeout_failed", slog.String("event", "await_timeout_failed"),
					slog.String("execution_id", ref.Key.ExecutionID), slog.String("tenant", ref.Key.TenantID), slog.String("error", err.Error()))
			} else if done {
				res.AwaitsTimedOut++
			}
		case ref.Status.Claimable():
			msgs = append(msgs, dispatch.Message{Item: dispatch.WorkItem{TenantID: ref.Key.TenantID, ExecutionID: ref.Key.ExecutionID, PipelineID: ref.PipelineID}})
		}
	}
	if len(msgs) > 0 {
		if err := r.Dispatcher.Dispatch(ctx, msgs...); err != nil {
			res.Failed += len(msgs)
			r.Logger.LogAttrs(ctx, slog.LevelWarn, "dispatch_failed", slog.String("event", "dispatch_failed"),
				slog.Int("items", len(msgs)), slog.String("error", err.Error()))
		} else {
			res.Redispatched = len(msgs)
		}
	}
	level := slog.LevelDebug
	if res.Due > 0 {
		level = slog.LevelInfo
	}
	r.Logger.LogAttrs(ctx, level, "sweep_completed", slog.String("event", "sweep_completed"),
		slog.Int("due", res.Due), slog.Int("redispatched", res.Redispatched),
		slog.Int("dead_letters_published", res.DeadLettersPublished), slog.Int("failed", res.Failed), slog.Bool("more", res.More))
	r.notify(ctx, EventSweepCompleted, execution.Execution{}, res)
	return res, nil
}

// RunSweeper calls SweepOnce every interval until ctx ends.
func (r *Runtime) RunSweeper(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := r.SweepOnce(ctx); err != nil && ctx.Err() == nil {
				r.Logger.LogAttrs(ctx, slog.LevelWarn, "sweep_failed", slog.String("event", "sweep_failed"), slog.String("error", err.Error()))
			}
		}
	}
}
