// Package crashtest runs real `qasync serve` processes against the local
// AWS stack and breaks them: it holds the HA gate (tests that SIGKILL
// workers mid-step, lose work items, exhaust retries, poison the work
// queue) and the chaos runner (RunChaos: many executions, K workers, a
// killer, dispatch and DynamoDB fault injection, and an invariant checker
// over the store, the queues and every process's log).
//
// The harness is exported for other process-level tests
// (cmd/qasync's end-to-end tests use it): Binary builds qasync once per
// test binary (or takes QASYNC_BIN), NewStack provisions fresh tables and
// queues, Stack.Env is a serve environment on them, Start and StartServer
// run a process whose stdout and stderr go to a log file that outlives it
// (a SIGKILLed process loses at most the line it was writing), and
// Submit, GetStatus and GetResult speak the HTTP API.
//
// Every test skips without the local stack (awstest.Require) unless
// QASYNC_REQUIRE_STACK=1, which `make test` sets.
package crashtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary builds qasync once per test binary (or uses QASYNC_BIN).
var binary = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("QASYNC_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "qasync-crashtest")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "qasync")
	b, err := exec.Command("go", "build", "-o", out, "github.com/qasync/qasync/cmd/qasync").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("crashtest: go build qasync: %v: %s", err, b)
	}
	return out, nil
})

// Binary returns the path of the qasync binary: $QASYNC_BIN when set
// (make test sets it), otherwise one built once per test binary into a
// temporary directory.
func Binary() (string, error) { return binary() }

// FreeAddr returns a free loopback address (host:port).
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Server is one `qasync serve` process.
type Server struct {
	// Name labels the process in logs and reports.
	Name string
	// Addr is its HTTP address (host:port).
	Addr string
	// LogPath is the file receiving its stdout and stderr.
	LogPath string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	waitErr error
}

// StartupTimeout bounds how long StartServer waits for /healthz.
const StartupTimeout = 30 * time.Second

// StartServer starts `qasync serve --addr <free port>` with env, its
// stdout and stderr appended to dir/<name>.log, and waits until /healthz
// answers. The process is not tied to any test: the caller kills it.
func StartServer(env []string, dir, name string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, Addr: addr, LogPath: path, logFile: f, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "serve", "--addr", addr)
	s.cmd.Env = env
	// An *os.File is handed to the child as is: its lines land in the file
	// with no copying goroutine in between, so a kill loses nothing
	// already written.
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		f.Close()
		close(s.done)
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(StartupTimeout)
	for {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("crashtest: qasync serve %s exited during startup: %v\n%s", name, s.waitErr, s.Tail(30))
		default:
		}
		if time.Now().After(deadline) {
			_ = s.Kill()
			return nil, fmt.Errorf("crashtest: qasync serve %s did not answer /healthz within %s\n%s", name, StartupTimeout, s.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Start is StartServer for a test: the log goes to a fresh temporary
// directory, a failure fails the test, and the process is killed when the
// test ends (its last log lines are printed if the test failed).
func Start(t testing.TB, env []string, name string) *Server {
	t.Helper()
	s, err := StartServer(env, t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Kill()
		if t.Failed() {
			t.Logf("last lines of %s (%s):\n%s", s.Name, s.LogPath, s.Tail(40))
		}
	})
	return s
}

// Done is closed once the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Exited reports whether the process has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// ExitCode is the process's exit status once it has exited: -1 while it
// runs or when a signal ended it.
func (s *Server) ExitCode() int {
	if !s.Exited() {
		return -1
	}
	return s.cmd.ProcessState.ExitCode()
}

// PID is the process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Kill sends SIGKILL (a crash: no drain, no lease release) and waits for
// the process to be gone. Killing an exited process is not an error.
func (s *Server) Kill() error {
	if s.Exited() {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("crashtest: %s still running 10 s after SIGKILL", s.Name)
	}
}

// Stop sends SIGTERM (a graceful shutdown: in-flight steps finish and
// commit) and waits up to timeout; it returns an error unless the process
// exited cleanly.
func (s *Server) Stop(timeout time.Duration) error {
	if !s.Exited() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
		if s.waitErr != nil {
			return fmt.Errorf("crashtest: %s exited with %v after SIGTERM", s.Name, s.waitErr)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("crashtest: %s did not stop within %s of SIGTERM", s.Name, timeout)
	}
}

// Log returns everything the process has logged so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.LogPath)
	return string(b)
}

// Tail returns the last n lines of the log.
func (s *Server) Tail(n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(s.Log())))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Events parses the process's JSON log lines.
func (s *Server) Events() ([]Event, error) { return ReadEvents(s.LogPath) }
