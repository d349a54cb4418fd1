// Rate limits: the steps of a pipeline's rate limit (pipeline.RateLimit)
// take a token of their bucket (tenant, limit name, key) before they run,
// shared by every worker through the state store (store.RateStore).
//
// The design, and what each part costs on DynamoDB (docs/cost.md):
//
//   - Reserve: right before a limited step runs (after its claim, or after
//     the commit that claimed it as a chained step), one conditional write
//     of the bucket's record reserves the step's start (GCRA: the bucket
//     holds one time, its theoretical arrival time). A start that is now
//     runs at once; one within RateLimitWait (at least the clock-skew
//     tolerance, at most a third of the lease) is waited for in the
//     worker, holding its claim.
//   - Later: the row is handed back QUEUED, due at its reserved start, no
//     attempt and no release counted, recording the reservation
//     (RateReservedAt, RateReservedVersion): one row write and a delayed work
//     item. When it comes back the step runs on its reservation without
//     reserving again (no double spend), and every waiting step holds a
//     start of its own (no thundering herd when the bucket refills).
//   - Beyond the horizon (RateLimitHorizon): nothing is reserved; the row
//     is handed back to try again when its turn is within a horizon, with
//     jitter (a row write, a work item and a refused bucket write per
//     horizon waited).
//   - A reservation is used only by the worker that claimed the row straight
//     from the hand-back that recorded it (the row's version is the next
//     one), on time: a takeover after a crash, a row written in between (a
//     pause), or a row back more than the wait bound after its start (a
//     lost work item) reserves again (its old start is lost: the limit is
//     never exceeded, a start may be wasted).

package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// checkRates refuses a registry with a rate-limited pipeline on a state
// store that keeps no rate limits (a user's backend without
// store.RateStore): its limit would not hold.
func checkRates(s store.Store, reg *pipeline.Registry) error {
	_, kept := s.(store.RateStore)
	return refuseUnkept(reg, kept, "rate limit", "rate limits (store.RateStore)", func(p *pipeline.Pipeline) string {
		if p.RateLimit == nil {
			return ""
		}
		return p.RateLimit.Name
	})
}

// rateOf is the rate limit name and key a new execution of p with input
// in records ("" and "" when p has none).
func rateOf(p *pipeline.Pipeline, in payload.Payload) (limit, key string, err error) {
	if p.RateLimit == nil {
		return "", "", nil
	}
	key, err = p.RateKeyOf(in)
	return p.RateLimit.Name, key, err
}

// rateWait is the longest a worker waits for a reserved start holding its
// claim: RateLimitWait, at least the clock-skew tolerance (a row is
// claimed up to that much before it is due), at most a third of the lease.
func (r *Runtime) rateWait() time.Duration {
	return min(max(r.cfg.RateLimitWait, r.cfg.ClockSkewTolerance), r.cfg.Lease/3)
}

// ceilMilli rounds t up to the millisecond (rows keep milliseconds: a
// reserved start stored rounded down would be used early).
func ceilMilli(t time.Time) time.Time {
	if tr := t.Truncate(time.Millisecond); tr.Before(t) {
		return tr.Add(time.Millisecond)
	}
	return t
}

// rateToken gets the start of a step of the pipeline's rate limit: it
// reports true when the step may run now (a start reserved now, or held
// and due, or waited for), false when the row was handed back to wait for
// its turn (err is then what Process returns).
func (t *transition) rateToken(ctx context.Context, step pipeline.Step, takeover bool, policy pipeline.RetryPolicy) (bool, error) {
	r, row, rl := t.r, &t.row, t.p.RateLimit
	rs, _ := r.deps.Store.(store.RateStore)
	if !rl.Limits(step.Name) || rs == nil {
		return true, nil
	}
	now, wait := r.deps.Clock.Now(), r.rateWait()
	if held := row.RateReservedAt; !held.IsZero() && row.RateReservedVersion != 0 && row.Version == row.RateReservedVersion+1 && !takeover {
		switch d := held.Sub(now); {
		case d <= 0 && -d <= wait:
			return true, nil // its reserved start
		case d > 0 && d <= wait:
			return t.rateWaitFor(ctx, held)
		case d > 0:
			// Back early (claimed ahead of a clock's skew, redelivered):
			// wait for the same start again.
			return false, t.rateDefer(ctx, held, true, "early")
		}
		// Back too late for its start (a lost work item, a paused
		// execution): that start is gone, reserve another.
	}
	sc := store.RateScope{TenantID: row.TenantID, Limit: rl.Name, Key: row.RateKey}
	for tries := 1; ; tries++ {
		at, ok, err := rs.Reserve(ctx, sc, rl.Interval(), rl.Burst, r.cfg.RateLimitHorizon, now)
		if err != nil {
			return false, t.release(ctx, fmt.Errorf("engine: rate limit %s: %w", rl.Name, err), "", policy)
		}
		after := r.deps.Clock.Now()
		switch {
		case ok && after.Sub(at) > wait && tries < 3:
			// The answer came too late for its start (a stalled call): that
			// start is gone, reserve another.
			now = after
			continue
		case ok && after.Sub(at) > wait:
			return false, t.rateDefer(ctx, after, false, "late")
		case ok && !at.After(after):
			return true, nil
		case ok && at.Sub(after) <= wait:
			return t.rateWaitFor(ctx, at)
		case ok:
			return false, t.rateDefer(ctx, at, true, "reserved")
		}
		// Beyond the horizon: come back when the turn is within a horizon,
		// spread out so that the waiting steps do not all come back at once.
		due := maxTime(after, at.Add(-r.jitter(r.cfg.RateLimitHorizon)))
		return false, t.rateDefer(ctx, due, false, "beyond_horizon")
	}
}

// rateWaitFor waits in the worker until the reserved start at; a
// shutdown meanwhile hands the row back holding the reservation.
func (t *transition) rateWaitFor(ctx context.Context, at time.Time) (bool, error) {
	if d := at.Sub(t.r.deps.Clock.Now()); d > 0 {
		if err := sleepCtx(ctx, d); err != nil {
			return false, t.rateDefer(ctx, at, true, "shutdown")
		}
	}
	return true, nil
}

// rateDefer hands the claimed row back QUEUED, due at due, without
// counting an attempt or a release, recording the wait and, when
// reserved, that the step holds the start due (for the version this
// write makes), and dispatches it with that delay. A write that does not
// land (a lost lease, a cancel, a backend failure) leaves the row to its
// new owner or to the sweeper.
func (t *transition) rateDefer(ctx context.Context, due time.Time, reserved bool, reason string) error {
	r := t.r
	now := r.deps.Clock.Now()
	due = ceilMilli(due)
	next := t.row
	next.Status, next.LeaseOwner, next.LeaseExpiresAt = store.Queued, "", time.Time{}
	next.NextDueAt, next.UpdatedAt = due, now
	next.RateReservedAt, next.RateReservedVersion = due, 0
	if reserved {
		next.RateReservedVersion = t.row.Version + 1
	}
	next.SweepAt, next.Sweeps = r.firstLook(due), 0
	got, landed, _ := t.handBack(ctx, next, false)
	if !landed {
		return nil
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "rate_limited", slog.String("event", "rate_limited"),
		slog.String("rate_limit", t.p.RateLimit.Name), slog.String("reason", reason),
		slog.Bool("reserved", reserved), slog.Time("due_at", due), slog.Duration("wait", due.Sub(now)))
	r.handOver(ctx, &got, due.Sub(now))
	return nil
}

// RateLimitedUntil is when an execution waiting for its rate limit's turn
// is due (zero when it does not wait for one): a QUEUED row handed back
// until its reserved start, or until its turn comes within the horizon.
func RateLimitedUntil(e *store.Execution) time.Time {
	if e.Status != store.Queued || !e.RateReservedAt.After(e.UpdatedAt) {
		return time.Time{}
	}
	return e.RateReservedAt
}
