package memory_test

import (
	"testing"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/memory"
)

// TestBackendConformance: the memory provider as the runtime opens it
// (Backend, state-provider memory) passes the suites of every seam it
// returns.
func TestBackendConformance(t *testing.T) {
	backendtest.ExerciseBackend(t, memory.Backend(), func(*testing.T) config.Config {
		c := config.Default()
		c.StateProvider = "memory"
		return c
	})
}
