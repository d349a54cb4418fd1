// The retry policy: data with documented defaults and pure functions of
// the attempt number. It reads no clock.

package pipeline

import (
	"fmt"
	"math"
	"time"
)

// RetryPolicy says how often and how late a failed step is retried.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt, so a
	// step runs at most MaxRetries+1 times. DefaultRetry 3.
	MaxRetries int
	// Delay is the wait before the first retry. DefaultRetry 1s.
	Delay time.Duration
	// Multiplier grows the delay per retry: Delay * Multiplier^(n-1) before
	// retry n. DefaultRetry 2.
	Multiplier float64
	// MaxDelay caps the delay. DefaultRetry 5m.
	MaxDelay time.Duration
}

// DefaultRetry is the policy used when configuration says nothing.
var DefaultRetry = RetryPolicy{MaxRetries: 3, Delay: time.Second, Multiplier: 2, MaxDelay: 5 * time.Minute}

// Validate reports a policy that cannot be applied.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxRetries < 0:
		return fmt.Errorf("pipeline: retry policy: MaxRetries must be >= 0, got %d", p.MaxRetries)
	case p.Delay <= 0:
		return fmt.Errorf("pipeline: retry policy: Delay must be positive, got %s", p.Delay)
	case p.Multiplier < 1:
		return fmt.Errorf("pipeline: retry policy: Multiplier must be >= 1, got %g", p.Multiplier)
	case p.MaxDelay < p.Delay:
		return fmt.Errorf("pipeline: retry policy: MaxDelay %s is below Delay %s", p.MaxDelay, p.Delay)
	}
	return nil
}

// MaxAttempts is the highest attempt number the policy allows.
func (p RetryPolicy) MaxAttempts() int { return p.MaxRetries + 1 }

// Exhausted reports whether a failure of attempt (from 1) ends the step.
func (p RetryPolicy) Exhausted(attempt int) bool { return attempt >= p.MaxAttempts() }

// Backoff returns the delay before retry n (n >= 1, i.e. before attempt
// n+1): Delay * Multiplier^(n-1), capped by MaxDelay.
func (p RetryPolicy) Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(p.Delay) * math.Pow(p.Multiplier, float64(n-1))
	if d >= float64(p.MaxDelay) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxDelay
	}
	return time.Duration(d)
}
