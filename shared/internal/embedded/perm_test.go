//go:build unix

package embedded_test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/qasync/qasync/shared/internal/embedded"
)

// exposedSocket returns why a socket under dir can be reached by users
// other than the directory's owner, or "": a socket whose directory
// others may enter, or the published socket (the one the backup client
// dials) with a mode wider than 0600. It judges by modes, not by trying
// to connect: a test running as root connects whatever the modes say.
func exposedSocket(dir, published string) string {
	socks, err := findSockets(dir)
	if err != nil {
		return ""
	}
	for _, s := range socks {
		fi, err := os.Lstat(s)
		if err != nil {
			continue // removed since (a store closing)
		}
		parent := filepath.Dir(s)
		di, err := os.Lstat(parent)
		if err != nil {
			continue
		}
		if di.Mode().Perm()&0o077 != 0 {
			return fmt.Sprintf("socket %s (mode %#o) lies in %s of mode %#o: other users who can enter that directory can reach it",
				s, fi.Mode().Perm(), parent, di.Mode().Perm())
		}
		if s == published && fi.Mode().Perm()&^0o600 != 0 {
			return fmt.Sprintf("socket %s has mode %#o, wider than 0600", s, fi.Mode().Perm())
		}
	}
	return ""
}

// TestControlSocketNeverReachableByOthers: the report's setup, a data
// directory made world-writable and then fixed to 0755 (world-readable),
// umask 000, the store started 50 times while another goroutine looks at
// every socket under the directory as fast as it can (and the test itself
// once after each start, so that every start is seen at least once): no
// observation finds a socket that users other than the owner could reach,
// by its own mode or by its directory's. The backup client still finds
// the socket.
func TestControlSocketNeverReachableByOthers(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0))
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("the world-writable directory: %v, %v", fi.Mode(), err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // chmod go-w: world-readable, no longer writable
		t.Fatal(err)
	}
	var db *embedded.DB
	defer func() {
		if db != nil {
			_ = db.Close()
		}
	}()
	open := func() {
		t.Helper()
		var err error
		if db, err = embedded.Open(dir, embedded.Options{}); err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	open()
	published := controlSocketOf(t, dir)

	var (
		mu           sync.Mutex
		exposed      []string
		observations int
	)
	note := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		observations++
		if why != "" {
			exposed = append(exposed, why)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				note(exposedSocket(dir, published))
			}
		}
	})
	stopObserver := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopObserver()

	const starts = 50
	for i := range starts {
		if i > 0 {
			open()
		}
		note(exposedSocket(dir, published))
		if i == starts-1 {
			info, err := embedded.Backup(context.Background(), dir, filepath.Join(t.TempDir(), "copy.db"))
			if err != nil || !info.FromServer {
				t.Fatalf("backup while serving: %+v, %v; want a copy from the server", info, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	stopObserver()
	if len(exposed) > 0 {
		t.Fatalf("%d of %d observations over %d starts found a socket other users could reach; the first: %s",
			len(exposed), observations, starts, exposed[0])
	}
	t.Logf("%d observations over %d starts", observations, starts)
}

// TestOpenRefusesADataDirOthersCanWrite: a data directory that users
// other than its owner can write (group or world, without the sticky bit)
// is refused with an error naming it, its mode, the fix and the key, and
// nothing is created in it; 0700, 0755 and a sticky world-writable
// directory open; a directory Open creates is 0700.
func TestOpenRefusesADataDirOthersCanWrite(t *testing.T) {
	for _, mode := range []fs.FileMode{0o777, 0o775, 0o757} {
		dir := t.TempDir()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		db, err := embedded.Open(dir, embedded.Options{})
		if err == nil {
			_ = db.Close()
			t.Fatalf("Open of a directory of mode %#o succeeded, want a refusal", mode)
		}
		for _, want := range []string{dir, fmt.Sprintf("%#o", mode), "chmod go-w", "pipeline.orchestrator.embedded.data-dir"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open of a directory of mode %#o: %q lacks %q", mode, err, want)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("the refused directory of mode %#o holds %v", mode, entries)
		}
	}
	for _, mode := range []fs.FileMode{0o700, 0o755, 0o777 | fs.ModeSticky} {
		dir := t.TempDir()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		db, err := embedded.Open(dir, embedded.Options{})
		if err != nil {
			t.Fatalf("Open of a directory of mode %v: %v", mode, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	db, err := embedded.Open(fresh, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory Open created: %v, %v; want mode 0700", fi.Mode(), err)
	}
}

// TestStaleControlSocketReplaced: sockets a previous process left behind
// (it was killed: nothing removed them), at the control socket's place and
// at the place versions before the private directory used, do not keep
// the next process from serving backups, and only its own socket remains.
func TestStaleControlSocketReplaced(t *testing.T) {
	dir := t.TempDir()
	db, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	published := controlSocketOf(t, dir)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []string{published, filepath.Join(dir, "control.sock")} {
		if _, err := os.Lstat(stale); err == nil {
			continue // the same place
		}
		if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
			t.Fatal(err)
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		_ = ln.Close()
	}
	db, err = embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := controlSocketOf(t, dir); got != published {
		t.Fatalf("the control socket is %s, want %s", got, published)
	}
	if info, err := embedded.Backup(context.Background(), dir, filepath.Join(t.TempDir(), "copy.db")); err != nil || !info.FromServer {
		t.Fatalf("backup after stale sockets: %+v, %v", info, err)
	}
}
