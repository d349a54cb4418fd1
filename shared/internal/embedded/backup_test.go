package embedded_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/payload"
)

// hangGuard bounds a wait that only a hang could exhaust: on correct code
// the test passes by the order of its steps, and this fails it instead of
// letting it run until the test binary's timeout.
const hangGuard = 60 * time.Second

// findSockets returns the unix sockets under dir (at any depth), found by
// their file type rather than by name. Entries removed while it walks (a
// store closing) are skipped.
func findSockets(dir string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSocket != 0 {
			found = append(found, path)
		}
		return nil
	})
	return found, err
}

// controlSocketOf returns the control socket of the store serving dir.
func controlSocketOf(t *testing.T, dir string) string {
	t.Helper()
	found, err := findSockets(dir)
	if err != nil || len(found) != 1 {
		t.Fatalf("sockets under %s: %q (%v), want the one control socket", dir, found, err)
	}
	return found[0]
}

// strayFiles lists the regular files under dir other than the store's
// file and its owner note: the temporary copies of backups left behind.
func strayFiles(t *testing.T, dir string) []string {
	t.Helper()
	var stray []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && path != filepath.Join(dir, embedded.FileName) && path != filepath.Join(dir, "owner") {
			stray = append(stray, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return stray
}

// stalledBackup is a client of the control socket that asked for a
// backup, read the first line of the answer and then stopped reading.
type stalledBackup struct {
	conn net.Conn
	r    *bufio.Reader
	size int64
}

func startStalledBackup(t *testing.T, sock string) *stalledBackup {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("connect to the control socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() }) // frees the server on every path
	if _, err := io.WriteString(conn, "backup\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("the backup's first line: %v", err)
	}
	size, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "ok "), 10, 64)
	if !strings.HasPrefix(line, "ok ") || err != nil {
		t.Fatalf("the backup's first line: %q", line)
	}
	return &stalledBackup{conn: conn, r: r, size: size}
}

// resume reads the rest of the copy into dir/qasync.db and returns dir.
func (b *stalledBackup) resume(t *testing.T) string {
	t.Helper()
	restored := t.TempDir()
	data, err := io.ReadAll(b.r)
	if err != nil {
		t.Fatalf("read the rest of the backup: %v", err)
	}
	if int64(len(data)) != b.size {
		t.Fatalf("the backup sent %d bytes, announced %d", len(data), b.size)
	}
	if err := os.WriteFile(filepath.Join(restored, embedded.FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return restored
}

// part is the payload part number i: 256 KiB whose bytes name it.
func part(i int) payload.Part {
	data := bytes.Repeat(fmt.Appendf(nil, "part %06d ", i), 256<<10/12+1)[:256<<10]
	return payload.Part{PayloadID: fmt.Sprintf("p%04d", i), Name: "body", Data: data, ExpiresAt: epoch.Add(24 * time.Hour)}
}

// TestStalledBackupReaderDoesNotStallTheStore: two clients of the control
// socket ask for a backup, read the first line of the answer and stop
// reading. The store then grows several times over (bbolt remaps its
// file, which waits for every open read transaction) and its writes and
// reads complete while both readers stay stalled. Resumed, each reader
// gets a complete copy that opens and checks as a store, holding the parts
// written before the backup and none written after it; no temporary copy
// is left in the data directory.
func TestStalledBackupReaderDoesNotStallTheStore(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(epoch)
	db, err := embedded.Open(dir, embedded.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close() // deferred first: runs after the readers' connections are closed
	ctx := context.Background()
	parts := db.Payloads(nil)
	const before, after = 16, 96 // 4 MiB, more than a socket buffers; then 24 MiB more
	for i := range before {
		if err := parts.PutPart(ctx, part(i)); err != nil {
			t.Fatal(err)
		}
	}
	sock := controlSocketOf(t, dir)
	readers := []*stalledBackup{startStalledBackup(t, sock), startStalledBackup(t, sock)}
	defer func() {
		for _, r := range readers {
			_ = r.conn.Close()
		}
	}()
	grown := make(chan error, 1)
	go func() {
		for i := before; i < before+after; i++ {
			if err := parts.PutPart(ctx, part(i)); err != nil {
				grown <- err
				return
			}
			if _, err := parts.GetPart(ctx, part(i-before).PayloadID, "body"); err != nil {
				grown <- err
				return
			}
		}
		grown <- nil
	}()
	select {
	case err := <-grown:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatalf("%d writes of 256 KiB did not complete within %s while two backup readers were stalled: "+
			"a stalled backup holds up the serving store", after, hangGuard)
	}

	for n, r := range readers {
		restored := r.resume(t)
		copyDB, err := embedded.Open(restored, embedded.Options{Clock: clk, NoControl: true})
		if err != nil {
			t.Fatalf("reader %d: the copy does not open as a store: %v", n, err)
		}
		cp := copyDB.Payloads(nil)
		for i := range before {
			got, err := cp.GetPart(ctx, part(i).PayloadID, "body")
			if err != nil || !bytes.Equal(got.Data, part(i).Data) {
				_ = copyDB.Close()
				t.Fatalf("reader %d: part %d written before the backup: %v (%d bytes)", n, i, err, len(got.Data))
			}
		}
		if _, err := cp.GetPart(ctx, part(before).PayloadID, "body"); !errors.Is(err, payload.ErrNotFound) {
			_ = copyDB.Close()
			t.Fatalf("reader %d: part %d, written after the backup began, in the copy: %v", n, before, err)
		}
		if err := copyDB.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if stray := strayFiles(t, dir); len(stray) > 0 {
		t.Fatalf("temporary copies left after the backups ended: %q", stray)
	}
}
