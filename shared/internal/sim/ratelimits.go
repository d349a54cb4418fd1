package sim

// Rate limits in the simulation: a pipeline whose middle step calls a
// partner at most once every 10 seconds per customer, two at once after a
// quiet while (pipeline.RateLimit), submitted in crowds by two tenants
// that share customer names (their buckets must not interfere), under
// every fault the run draws. The simulator keeps its own record of the
// limited step's starts (the step's code began: the partner is called),
// taken in true virtual time, never from the store's buckets: in every
// window of w the starts of one bucket are at most
//
//	burst + floor((w + wait + 2·skew) / interval)
//
// where wait is the runtime's bound on using a reserved start late (a
// step runs on a reservation only from its start to a wait after it, by
// the worker's clock) and skew the largest clock offset of a worker (a
// reservation's start is in the reserving worker's clock, the step runs
// by the running worker's clock: each may be off by skew). The GCRA
// reservations themselves are spaced exactly: the slack is the clocks'
// and the wait's, stated here rather than hidden.

import (
	"context"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// The rate-limited pipeline: r1, call (limited), r2.
const (
	pipeRate      = "sim.rate"
	rateLimitName = "partner"
	rateInterval  = 10 * time.Second // one call per 10s per customer
	rateBurst     = 2
)

// invRateLimit: the limited step's starts of one bucket never exceed the
// rate (see the file comment for the bound).
const invRateLimit = "a rate limit is never exceeded"

// rateBook is the simulator's own record of the limited step's starts.
type rateBook struct {
	// starts maps a bucket (tenant and customer) to its starts, in true
	// time order.
	starts map[string][]time.Time
	// bursts are the instants rate-limited submissions crowd around.
	bursts []time.Time
}

// ratedPipelines are the rate-limited pipelines a process serves.
func (p *proc) ratedPipelines() []pipeline.Pipeline {
	call := pipeline.NewStep("call", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		p.w.rateStarted(info, in)
		return p.plain(ctx, info, in, "call")
	})
	return []pipeline.Pipeline{{ID: pipeRate, Steps: []pipeline.Step{p.plainStep("r1"), call, p.plainStep("r2")},
		RateLimit: pipeline.RateLimitKey(rateLimitName, 1, rateInterval, rateBurst, func(d doc) string { return d.Customer }, "call")}}
}

// drawRated turns about a quarter of the fresh submissions that are not
// keyed into rate-limited ones: a tenant, one of two customers (mostly
// the first), most of them crowded into bursts of a few seconds so that
// a bucket's steps queue up for their turns.
func (w *world) drawRated(s *submission) {
	if keyLimitOf(s.pipeline) > 0 || !w.chance(0.25) {
		return
	}
	s.pipeline = pipeRate
	s.tenant = keyTenants[w.intn(len(keyTenants))]
	s.body.Customer = "cust0"
	if w.chance(0.2) {
		s.body.Customer = "cust1"
	}
	w.mu.Lock()
	if w.rates.bursts == nil {
		span := time.Duration(w.o.VirtualDays) * day
		for range 1 + w.o.VirtualDays/10 {
			w.draws++
			w.rates.bursts = append(w.rates.bursts, w.start.Add(time.Duration(w.rng.Int64N(int64(span*9/10)))+time.Minute))
		}
	}
	bursts := w.rates.bursts
	w.mu.Unlock()
	if w.chance(0.8) {
		s.at = bursts[w.intn(len(bursts))].Add(w.between(0, 3*time.Second))
	}
}

// rateSlack is the bound's allowance for the clocks and the late use of
// a reservation: the runtime's wait bound and twice the largest skew.
func (w *world) rateSlack() time.Duration {
	cfg := w.cfg.engineConfig("")
	wait := min(max(cfg.RateLimitWait, cfg.ClockSkewTolerance), cfg.Lease/3)
	return wait + 2*w.cfg.rates.skew
}

// rateStarted notes a start of the limited step and checks every window
// that ends with it.
func (w *world) rateStarted(info pipeline.StepInfo, in doc) {
	now, scope := time.Now(), info.TenantID+"|"+in.Customer
	slack := w.rateSlack()
	w.mu.Lock()
	if w.rates.starts == nil {
		w.rates.starts = map[string][]time.Time{}
	}
	starts := append(w.rates.starts[scope], now)
	w.rates.starts[scope] = starts
	w.report.Checks[invRateLimit]++
	w.report.Outcomes["rate_limited_starts"]++
	w.mu.Unlock()
	n := len(starts)
	for i := n - 1; i >= 0; i-- {
		win := now.Sub(starts[i])
		allowed := rateBurst + int((win+slack)/rateInterval)
		if n-i > allowed {
			w.violate(invRateLimit, info.ExecutionID, "bucket %s: %d starts of %s within %s (allowed %d: burst %d, one per %s, slack %s)",
				scope, n-i, info.StepName, win, allowed, rateBurst, rateInterval, slack)
			return
		}
		if win > rateInterval*time.Duration(n) {
			break // an older start leaves room enough
		}
	}
}

// The gated store keeps the buckets of the store it wraps, behind the
// process's fault gate like any I/O.
var _ store.RateStore = (*gatedStore)(nil)

// Reserve implements store.RateStore behind the gate. Under
// Options.skipRateReservation (the broken variant that proves the
// invariant can fail) it grants every start at once, writing nothing.
func (g *gatedStore) Reserve(ctx context.Context, s store.RateScope, interval time.Duration, burst int, horizon time.Duration, now time.Time) (at time.Time, ok bool, err error) {
	if g.p.w.o.skipRateReservation {
		return now, true, nil
	}
	err = g.p.do("rate_reserve", ioWrite, "", func() error {
		at, ok, err = g.s.(store.RateStore).Reserve(ctx, s, interval, burst, horizon, now)
		return err
	})
	return at, ok, err
}
