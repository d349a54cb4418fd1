package pipeline

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/payload"
)

// Bounds of a rate limit.
const (
	// MaxRatePerSecond is the fastest a rate limit may let one key's
	// steps start: a bucket is one record (on DynamoDB one item, written
	// at every reservation, and one item takes at most 1,000 write units
	// a second), so 500 a second leaves the item room for the writes
	// that miss the first guess.
	MaxRatePerSecond = 500
	// MaxRateBurst is the largest RateLimit.Burst.
	MaxRateBurst = 1000
)

// RateLimit limits how fast the steps of a pipeline that call a
// downstream start, per key taken from the execution's input (an
// account, a partner), shared by every worker: at most Burst starts at
// once, then N per Per. A step that would start too early waits for its
// turn: in the worker when the turn is near, otherwise released (QUEUED,
// due at its turn, no attempt counted) holding a reservation, so that
// waiting steps start one after the other at their own reserved times.
//
// A limit's bucket is named by the tenant, the limit's Name and the key:
// two pipelines of a tenant whose limits have the same Name share one
// bucket (one downstream, one budget), each step spending from it at the
// rate its own declaration states. The key is computed once, at submit,
// and stored with the execution.
//
// Build one with RateLimitKey, or NewRateLimit for one bucket for all
// executions.
type RateLimit struct {
	// Name names the limit (the downstream: "partner-api"): shown in
	// status documents and in the pipeline's description, and part of
	// the bucket's name.
	Name string
	// N steps may start per Per (N 20, Per a second: 20 a second), at
	// most MaxRatePerSecond a second.
	N   int
	Per time.Duration
	// Burst is how many steps may start at once after a quiet while, 1
	// to MaxRateBurst (1: strictly spaced).
	Burst int
	// Key returns the key of an input ("" for none: every execution
	// whose input gives no key shares the "" bucket). Nil: one bucket for
	// all executions. An error refuses the submit as invalid input; its
	// message must not quote the input.
	Key func(in payload.Payload) (string, error)
	// Steps names the steps that call the downstream and take a token
	// before they run; empty: every step that runs code (sleeps and map
	// steps never take one).
	Steps []string
}

// NewRateLimit returns a RateLimit with one bucket for all the
// pipeline's executions: n steps per per, burst at once.
//
//	pipeline.Pipeline{ID: "mail", Steps: steps,
//		RateLimit: pipeline.NewRateLimit("smtp", 20, time.Second, 5, "send")}
func NewRateLimit(name string, n int, per time.Duration, burst int, steps ...string) *RateLimit {
	return &RateLimit{Name: name, N: n, Per: per, Burst: burst, Steps: steps}
}

// RateLimitKey returns the RateLimit of a pipeline whose first step takes
// an I (decoded from JSON, as NewStep decodes it), with one bucket per key
// (key returns the key of an input, such as its account id): n steps per
// per, burst at once, for the named steps (none: every step).
//
//	pipeline.Pipeline{ID: "orders", Steps: steps,
//		RateLimit: pipeline.RateLimitKey("partner-api", 20, time.Second, 5,
//			func(o Order) string { return o.Partner }, "charge")}
func RateLimitKey[I any](name string, n int, per time.Duration, burst int, key func(in I) string, steps ...string) *RateLimit {
	return &RateLimit{Name: name, N: n, Per: per, Burst: burst, Steps: steps, Key: func(raw payload.Payload) (string, error) {
		var in I
		if p, ok := any(&in).(*payload.Payload); ok {
			*p = raw
		} else if err := raw.DecodeJSON(&in); err != nil {
			return "", fmt.Errorf("rate limit %s: decode input: %w", name, err)
		}
		return key(in), nil
	}}
}

// Interval is the time between two starts at the limit's rate (Per / N).
func (l *RateLimit) Interval() time.Duration { return l.Per / time.Duration(l.N) }

// Limits reports whether the step named step takes a token of the limit.
func (l *RateLimit) Limits(step string) bool {
	return l != nil && (len(l.Steps) == 0 || slices.Contains(l.Steps, step))
}

// String describes the limit ("20 per 1s, burst 5").
func (l *RateLimit) String() string {
	return fmt.Sprintf("%d per %s, burst %d", l.N, l.Per, l.Burst)
}

// RateKeyOf returns the rate limit key of an input: "" when the pipeline
// has no RateLimit, its limit has no Key, or the input gives none; an
// error (invalid input) when Key fails or the key is longer than
// MaxConcurrencyKeyBytes or not UTF-8.
func (p *Pipeline) RateKeyOf(in payload.Payload) (string, error) {
	if p.RateLimit == nil || p.RateLimit.Key == nil {
		return "", nil
	}
	k, err := p.RateLimit.Key(in)
	if err != nil {
		return "", err
	}
	if len(k) > MaxConcurrencyKeyBytes || !utf8.ValidString(k) {
		return "", fmt.Errorf("rate limit %s: the key is %d bytes or not UTF-8 (at most %d bytes of UTF-8)",
			p.RateLimit.Name, len(k), MaxConcurrencyKeyBytes)
	}
	return k, nil
}

func (l *RateLimit) validate(steps []Step) error {
	switch {
	case l.Name == "":
		return fmt.Errorf("pipeline: rate limit: no name")
	case l.N < 1 || l.Per <= 0:
		return fmt.Errorf("pipeline: rate limit %s: rate %d per %s: want at least 1 per a positive duration", l.Name, l.N, l.Per)
	case l.Interval() < time.Second/MaxRatePerSecond:
		return fmt.Errorf("pipeline: rate limit %s: rate %d per %s is more than %d a second (one bucket is one record)", l.Name, l.N, l.Per, MaxRatePerSecond)
	case l.Burst < 1 || l.Burst > MaxRateBurst:
		return fmt.Errorf("pipeline: rate limit %s: burst %d outside 1..%d", l.Name, l.Burst, MaxRateBurst)
	}
	for _, s := range l.Steps {
		if !slices.ContainsFunc(steps, func(st Step) bool { return st.Name == s }) {
			return fmt.Errorf("pipeline: rate limit %s: no step %s", l.Name, s)
		}
	}
	return nil
}
