//go:build unix

package embedded

import (
	"io/fs"
	"os"
	"syscall"
)

// modesGuard reports that file modes decide which users reach the data
// directory and its control socket (on unix they do).
const modesGuard = true

// ownedByMe reports whether fi's owner is this process's effective user.
func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
