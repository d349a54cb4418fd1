//go:build !race

package sim

const (
	raceDetector            = false
	deterministicExecutions = 60
)
