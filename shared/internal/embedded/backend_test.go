package embedded_test

import (
	"testing"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/embedded"
)

// TestBackendConformance: the embedded store as the runtime opens it
// (Backend, state-provider embedded) passes the suites of every seam it
// returns, each case in a data directory of its own.
func TestBackendConformance(t *testing.T) {
	backendtest.ExerciseBackend(t, embedded.Backend(), func(t *testing.T) config.Config {
		c := config.Default()
		c.EmbeddedDataDir = t.TempDir()
		return c
	})
}
