//go:build race

package sim

// Under the race detector, which slows a simulation tenfold, the budget
// does not run and the determinism check is small.
const (
	raceDetector            = true
	deterministicExecutions = 30
)
