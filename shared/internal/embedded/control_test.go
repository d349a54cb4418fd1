package embedded

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// controlHangGuard bounds a wait that only a hang could exhaust (see
// hangGuard in backup_test.go).
const controlHangGuard = 60 * time.Second

// eventLog collects a store's JSON log lines and signals each one.
type eventLog struct {
	mu    sync.Mutex
	lines []map[string]any
	added chan struct{}
}

func newEventLog() *eventLog { return &eventLog{added: make(chan struct{}, 1)} }

func (l *eventLog) Write(p []byte) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return 0, fmt.Errorf("log line %q: %w", p, err)
	}
	l.mu.Lock()
	l.lines = append(l.lines, m)
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
	return len(p), nil
}

// wait returns the first line of event whose attributes satisfy match,
// failing the test if none is logged before the hang guard.
func (l *eventLog) wait(t *testing.T, event string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	guard := time.After(controlHangGuard)
	for {
		l.mu.Lock()
		for _, m := range l.lines {
			if m["event"] == event && match(m) {
				l.mu.Unlock()
				return m
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-guard:
			t.Fatalf("no %s event logged within %s", event, controlHangGuard)
		}
	}
}

// openTempCopies counts this process's open files that are temporary
// backup copies (Linux: /proc/self/fd names a deleted file by its former
// path).
func openTempCopies(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count open files: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.Contains(target, "/.backup-") {
			n++
		}
	}
	return n
}

// servedStore opens a store with its control socket in a new directory,
// holding about 4 MiB of payload parts (more than a socket buffers).
func servedStore(t *testing.T, log *eventLog) *DB {
	t.Helper()
	db, err := Open(t.TempDir(), Options{Logger: slog.New(slog.NewJSONHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for i := range 16 {
		p := payload.Part{PayloadID: fmt.Sprint("p", i), Name: "body", Data: bytes.Repeat([]byte{byte(i)}, 256<<10), ExpiresAt: time.Now().Add(time.Hour)}
		if err := db.Payloads(nil).PutPart(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// askBackup connects to db's control socket and asks for a backup,
// returning the connection and the first line of the answer.
func askBackup(t *testing.T, db *DB) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	conn, err := net.Dial("unix", db.control.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, "backup\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ok ") {
		t.Fatalf("the backup's first line: %q, %v", line, err)
	}
	return conn, r, strings.TrimSpace(line)
}

// TestStalledBackupClientDropped: a backup client that stops reading is
// dropped once it has taken nothing for the idle timeout (shortened here;
// the client never reads again, so the drop comes by order, not by
// speed): the server logs embedded_backup_stalled, frees its temporary
// copy and closes the connection, and the client gets less than the copy.
// A client that goes away mid-copy frees its copy too.
func TestStalledBackupClientDropped(t *testing.T) {
	idle := backupIdleTimeout
	t.Cleanup(func() { backupIdleTimeout = idle }) // registered first: runs after the store is closed
	backupIdleTimeout = 100 * time.Millisecond
	log := newEventLog()
	db := servedStore(t, log)

	conn, r, first := askBackup(t, db)
	m := log.wait(t, "embedded_backup_stalled", func(map[string]any) bool { return true })
	for _, k := range []string{"bytes", "bytes_sent", "idle_timeout_ms"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("embedded_backup_stalled without %s: %v", k, m)
		}
	}
	if n := openTempCopies(t); n != 0 {
		t.Fatalf("%d temporary copies still open after the stalled client was dropped", n)
	}
	rest, _ := io.ReadAll(r) // what the socket buffered, then the end: the server closed it
	var size int
	_, _ = fmt.Sscanf(first, "ok %d", &size)
	if len(rest) >= size {
		t.Fatalf("the dropped client got %d bytes of %d", len(rest), size)
	}
	_ = conn.Close()

	gone, _, _ := askBackup(t, db)
	_ = gone.Close()
	log.wait(t, "embedded_backup_served", func(map[string]any) bool { return true })
	if n := openTempCopies(t); n != 0 {
		t.Fatalf("%d temporary copies still open after the client went away", n)
	}
}

// TestCloseDoesNotWaitForAStalledBackupClient: Close ends the connection
// of a backup client that stopped reading instead of waiting for it (the
// idle timeout is left at its default, far beyond the hang guard).
func TestCloseDoesNotWaitForAStalledBackupClient(t *testing.T) {
	log := newEventLog()
	db := servedStore(t, log)
	askBackup(t, db)
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(controlHangGuard):
		t.Fatalf("Close did not return within %s while a backup client was stalled", controlHangGuard)
	}
}
