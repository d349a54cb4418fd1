// Package retry holds the retry policy: data with documented defaults and
// pure functions of the attempt number. It reads no clock.
package retry

import (
	"fmt"
	"math"
	"time"
)

// Policy says how often and how late a failed step is retried.
type Policy struct {
	// MaxRetries is the number of retries after the first attempt, so a
	// step runs at most MaxRetries+1 times. Default 3.
	MaxRetries int
	// Delay is the wait before the first retry. Default 1s.
	Delay time.Duration
	// Multiplier grows the delay per retry: Delay * Multiplier^(n-1) before
	// retry n. Default 2.
	Multiplier float64
	// MaxDelay caps the delay. Default 5m.
	MaxDelay time.Duration
}

// Default is the policy used when configuration says nothing.
var Default = Policy{MaxRetries: 3, Delay: time.Second, Multiplier: 2, MaxDelay: 5 * time.Minute}

// Validate reports a policy that cannot be applied.
func (p Policy) Validate() error {
	switch {
	case p.MaxRetries < 0:
		return fmt.Errorf("retry: MaxRetries must be >= 0, got %d", p.MaxRetries)
	case p.Delay <= 0:
		return fmt.Errorf("retry: Delay must be positive, got %s", p.Delay)
	case p.Multiplier < 1:
		return fmt.Errorf("retry: Multiplier must be >= 1, got %g", p.Multiplier)
	case p.MaxDelay < p.Delay:
		return fmt.Errorf("retry: MaxDelay %s is below Delay %s", p.MaxDelay, p.Delay)
	}
	return nil
}

// MaxAttempts is the highest attempt number the policy allows.
func (p Policy) MaxAttempts() int { return p.MaxRetries + 1 }

// Exhausted reports whether a failure of attempt (from 1) ends the step.
func (p Policy) Exhausted(attempt int) bool { return attempt >= p.MaxAttempts() }

// Backoff returns the delay before retry n (n >= 1, i.e. before attempt
// n+1): Delay * Multiplier^(n-1), capped by MaxDelay.
func (p Policy) Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(p.Delay) * math.Pow(p.Multiplier, float64(n-1))
	if d >= float64(p.MaxDelay) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxDelay
	}
	return time.Duration(d)
}
