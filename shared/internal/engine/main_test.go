package engine_test

import (
	"testing"

	"github.com/qasync/qasync/shared/internal/datadirtest"
)

// TestMain runs the tests under datadirtest.Main: their temporary data
// directories private whatever the shell's umask, and none left behind.
func TestMain(m *testing.M) { datadirtest.Main(m) }
