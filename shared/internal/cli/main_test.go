package cli_test

import (
	"testing"

	"github.com/qasync/qasync/shared/internal/datadirtest"
)

// TestMain fails the package's run when a test left the embedded store's
// default data directory (.qasync) here.
func TestMain(m *testing.M) { datadirtest.Main(m) }
