package sim

import "testing"

// TestRateLimitInvariantCanFail proves the rate limit invariant can
// fail: with the reservations skipped (every start granted at once) the
// crowded submissions of a run break it; the same run with the runtime's
// reservations keeps it, having checked at least 20 starts.
func TestRateLimitInvariantCanFail(t *testing.T) {
	brokenVariantFails(t, Options{Seed: 7, Store: StoreMemory, Executions: 300, VirtualDays: 10},
		invRateLimit, 20, "the reservations skipped", func(o *Options) { o.skipRateReservation = true })
}
