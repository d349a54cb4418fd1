// Rate limits: the token buckets of pipelines' rate limits (RateStore).

package store

import (
	"context"
	"time"
)

// RateScope names one rate limit bucket: a tenant's limit (its name) and
// key. Two pipelines of a tenant whose limits have the same name share
// its buckets.
type RateScope struct {
	TenantID string
	Limit    string
	Key      string
}

// ID is the scope as one string, each part length-prefixed so that no two
// scopes collide however their parts are spelled.
func (s RateScope) ID() string { return KeyID(s.TenantID, KeyID(s.Limit, s.Key)) }

// RateScope is the scope of the execution's rate limit (zero when it has
// none).
func (e *Execution) RateScope() RateScope {
	if e.RateLimit == "" {
		return RateScope{}
	}
	return RateScope{TenantID: e.TenantID, Limit: e.RateLimit, Key: e.RateKey}
}

// RateStore keeps the buckets of rate limits beside the executions: one
// record per bucket holding one number, its theoretical arrival time (the
// generic cell rate algorithm, GCRA), moved by one conditional write per
// reservation. Every state store of this repository keeps them (the
// conformance suite's rate limit file checks the contract).
type RateStore interface {
	// Reserve reserves the next start of the bucket: steps start one every
	// interval, burst at once after a quiet while. With tau the burst's
	// allowance ((burst-1) intervals) and tat the bucket's theoretical
	// arrival time (now when the bucket is unused or behind now), the
	// reservation's time is at = max(now, tat-tau). When at is after
	// now+horizon nothing is written and ok is false (at still says when
	// a start would be free); otherwise the bucket's tat moves by one
	// interval and ok is true: the caller owns the start at at (at == now:
	// it may start at once). The record expires (TTL) a while after its
	// tat; now is the caller's clock.
	Reserve(ctx context.Context, s RateScope, interval time.Duration, burst int, horizon time.Duration, now time.Time) (at time.Time, ok bool, err error)
}

// RateRecordTTL is how long after its theoretical arrival time a bucket's
// record is kept: long enough that an idle bucket is gone and a live one
// is never lost to its TTL (a bucket whose tat is behind now holds
// nothing: it reads as unused).
const RateRecordTTL = time.Hour

// Reserve computes a GCRA reservation on a bucket whose theoretical
// arrival time is tat (zero: unused): the reservation's time, whether it
// is within the horizon, and the bucket's next tat. Backends that hold the
// bucket under a lock (memory, embedded) apply it as is; DynamoDB's
// conditional writes implement the same arithmetic.
func Reserve(tat time.Time, interval time.Duration, burst int, horizon time.Duration, now time.Time) (at time.Time, ok bool, next time.Time) {
	if tat.Before(now) {
		tat = now
	}
	at = tat.Add(-time.Duration(burst-1) * interval)
	if at.Before(now) {
		at = now
	}
	if at.After(now.Add(horizon)) {
		return at, false, time.Time{}
	}
	return at, true, tat.Add(interval)
}
