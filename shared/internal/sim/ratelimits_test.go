package sim

import "testing"

// TestRateLimitInvariantCanFail proves the rate limit invariant can
// fail: with the reservations skipped (every start granted at once) the
// crowded submissions of a run break it; the same run with the runtime's
// reservations keeps it, having checked the same starts.
func TestRateLimitInvariantCanFail(t *testing.T) {
	o := Options{Seed: 7, Store: StoreMemory, Executions: 300, VirtualDays: 10}
	good := Run(t, o)
	o.skipRateReservation = true
	broken := Run(t, o)
	count := func(r Report) int {
		n := 0
		for _, v := range r.Violations {
			if v.Invariant == invRateLimit {
				n++
			}
		}
		return n
	}
	t.Logf("starts checked: %d (reservations), %d (skipped); violations: %d, %d", good.Checks[invRateLimit], broken.Checks[invRateLimit], count(good), count(broken))
	if good.Checks[invRateLimit] < 20 {
		t.Fatalf("the run checked %d starts; too few to tell", good.Checks[invRateLimit])
	}
	if n := count(good); n != 0 {
		t.Errorf("the runtime's reservations broke the rate limit %d times:\n%s", n, good.Table())
	}
	if n := count(broken); n == 0 {
		t.Errorf("with the reservations skipped the invariant held over %d starts: it checks nothing", broken.Checks[invRateLimit])
	}
}
