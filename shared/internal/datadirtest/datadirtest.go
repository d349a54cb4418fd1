// Package datadirtest keeps tests from leaving the embedded store's
// default data directory (.qasync, the default of embedded.data-dir) in
// their package directory: config.Default() picks the embedded store, so
// a test that serves or opens a runtime without saying where its data
// goes writes it there, and the next run (or another package's test in
// parallel) finds it, its idempotency keys and its lock. Packages whose
// tests run servers or runtimes call Main from their TestMain; a test
// then says what it means: a data directory of its own (t.TempDir()) or
// state-provider memory.
package datadirtest

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/qasync/qasync/shared/config"
)

// Main runs the package's tests (m.Run) under a umask of 022 and exits
// with their status, or with 1 when they left the default data directory
// behind (Check).
//
// The umask: t.TempDir makes its directories with mode 0777 less the
// umask, so under the 002 of user-private-group systems (Debian and Ubuntu
// desktops) they are group-writable, and the embedded store rightly
// refuses a data directory others can write. The tests' own directories
// are then made as CI makes them, whatever the developer's shell says;
// what the store refuses is tested on its own
// (TestOpenRefusesADataDirOthersCanWrite).
func Main(m *testing.M) {
	syscall.Umask(0o022)
	os.Exit(Check(m.Run, os.Stderr))
}

// Check runs run and returns its status, or 1 when the default data
// directory (relative to the working directory: the package directory)
// exists afterwards but did not before: it is then removed, and w is told
// which key to set.
func Check(run func() int, w io.Writer) int {
	dir := config.Default().EmbeddedDataDir
	_, err := os.Stat(dir)
	existed := err == nil
	code := run()
	if existed {
		return code
	}
	if _, err := os.Stat(dir); err == nil {
		_ = os.RemoveAll(dir)
		fmt.Fprintf(w, "datadirtest: a test left the embedded store's default data directory %s/ in the package directory (removed): "+
			"give it one of its own (config %s = t.TempDir()) or say %s memory\n",
			dir, config.FullKey("embedded.data-dir"), config.FullKey("state-provider"))
		return 1
	}
	return code
}
