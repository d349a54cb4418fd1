// Package servetest runs an example service's local main under test:
// `serve` on a port the OS picks, every line of its output handed to the
// test, stopped with SIGTERM when the test ends, whichever way it ends.
package servetest

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// servingLine is the line serve prints once it listens.
var servingLine = regexp.MustCompile(`qasync serving on (http://\S+)`)

// Start starts cmd, a `serve` command whose Stdout and Stderr are unset,
// hands every line of its output (both streams) to line, and returns the
// base URL its "qasync serving on" line names, failing the test when it
// exits first or prints none within ready. When the test ends the process
// gets SIGTERM and must exit with status 0 within stop; otherwise it is
// killed and the test fails. logs says what the process printed, for the
// failure messages.
func Start(t testing.TB, cmd *exec.Cmd, line func(string), logs fmt.Stringer, ready, stop time.Duration) string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	var readers sync.WaitGroup
	scan := func(r io.Reader) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line(sc.Text())
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, r) // a line too long: drain the rest
	}
	readers.Add(2)
	go scan(stdout)
	go scan(stderr)
	exited := make(chan error, 1)
	go func() {
		readers.Wait() // the pipes must be read to their end before Wait
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve did not stop cleanly on SIGTERM: %v\n%s", err, logs)
			}
		case <-time.After(stop):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("serve did not stop within %s of SIGTERM; killed\n%s", stop, logs)
		}
	})
	select {
	case base := <-addr:
		return base
	case err := <-exited:
		t.Fatalf("serve exited before serving: %v\n%s", err, logs)
	case <-time.After(ready):
		t.Fatalf("serve printed no %q line within %s\n%s", "qasync serving on", ready, logs)
	}
	return ""
}
