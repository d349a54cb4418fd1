package engine

import "testing"

// SetDeadLetterCountLimit lowers DeadLetterCounts' bound to n until t
// ends, so that a test reaches it with a few records.
func SetDeadLetterCountLimit(t testing.TB, n int) {
	old := deadLetterCountLimit
	deadLetterCountLimit = n
	t.Cleanup(func() { deadLetterCountLimit = old })
}
