//go:build linux

package localcloud

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts an emulator in its own process group (so a terminal's
// Ctrl-C reaches only the harness, which stops it) and has the kernel
// kill it if the harness dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killMarked SIGKILLs every process of this user whose environment holds
// the entry marker ("NAME=value") and returns how many it signalled.
func killMarked(marker string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := []byte("\x00" + marker + "\x00")
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
