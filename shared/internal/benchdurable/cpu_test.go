package benchdurable

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestParseStatCPU reads utime + stime of a /proc stat line whose
// command name holds spaces and parentheses.
func TestParseStatCPU(t *testing.T) {
	line := "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 0 0"
	got, err := parseStatCPU(line)
	if err != nil || got != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s (300 ticks)", got, err)
	}
	if _, err := parseStatCPU("4242 (short) S 1"); err == nil {
		t.Error("a short line was accepted")
	}
}

// TestListenerPIDFindsThisProcess: a listener this test opens on
// loopback is found to be this process's, and its CPU time is read.
func TestListenerPIDFindsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := ListenerPID("http://" + ln.Addr().String())
	if err != nil || pid != os.Getpid() {
		t.Fatalf("ListenerPID = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
	if _, err := CPUTime(pid); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if pid, err := ListenerPID("http://" + ln.Addr().String()); err == nil {
		t.Errorf("a closed listener was found, in process %d", pid)
	}
}

// TestCPUWatchSumsByLabel: processes under one label are summed, and
// since is zero-based at mark.
func TestCPUWatchSumsByLabel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	var w cpuWatch
	w.add("a", os.Getpid())
	w.add("a", os.Getpid())
	w.add("b", os.Getpid())
	if w.since() != nil {
		t.Error("since before mark: want nil")
	}
	w.mark()
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); { // burn CPU
	}
	got := w.since()
	if got["a"] != 2*got["b"] {
		t.Errorf("since = %v: want label a twice label b (the same process twice)", got)
	}
}
