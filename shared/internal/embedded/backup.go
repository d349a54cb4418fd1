package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Backups. bbolt writes a consistent copy of the file from one read
// transaction (tx.WriteTo) while writers go on. A running server holds the
// directory's lock, so the backup command asks it over a unix socket in
// the data directory (controlSocket); with no server running, it opens the
// file read-only itself.
//
// The socket hands out the whole store, so only the directory's owner may
// reach it, from the moment it exists: it lives in a private directory
// (controlDir, mode 0700, owned by this user) that is set up before the
// socket is bound, and it is bound under a temporary name there, set to
// mode 0600 and only then renamed into place. A socket is created with
// the mode the umask leaves (0777 under umask 000); a chmod after
// net.Listen would leave a moment in which any local user can connect, and
// changing the process-wide umask around Listen would race with every
// other goroutine creating files. The rename also replaces the socket of
// a previous process that was killed (this one holds the lock).
//
// The server never holds a read transaction for as long as a client takes
// to read the copy: bbolt remaps its file when it grows, and the remap
// waits for every open read transaction, so one stalled reader (a hung
// disk under the backup command, a client that stops reading) would hold
// up every read and write of the store. The server writes the copy to a
// temporary file in the data directory first (local disk: the transaction
// is held only for that), ends the transaction, then streams the file to
// the client. The temporary copy is unlinked as soon as it is created, so
// it lives only as long as the server holds it open and no path (an error,
// a client gone, a crash) leaves it behind; but it takes as much disk as
// the store while the client reads it (each backup in progress has its
// own). A client that takes nothing of the copy for backupIdleTimeout is
// dropped (event embedded_backup_stalled), which frees its copy.
//
// The backup command with no server running holds a read transaction on a
// read-only handle of its own for as long as its destination takes the
// copy. No store is served then; a qasync serve started meanwhile finds
// the file locked (shared by the backup) and fails at once with ErrLocked
// instead of waiting for it.

// controlDir is the private directory, inside the data directory, that
// holds the control socket.
const controlDir = "control"

// controlSocket is the server's control socket, relative to the data
// directory.
const controlSocket = controlDir + string(filepath.Separator) + "sock"

// controlBind is the temporary name the socket is bound under, inside
// controlDir, until its mode is set.
const controlBind = "bind"

// legacySocket is where versions before controlDir put the socket,
// directly in the data directory; a stale one is removed at start.
const legacySocket = "control.sock"

// backupTempPattern names the temporary copies of the backups a server
// writes in its data directory (os.CreateTemp's pattern).
const backupTempPattern = ".backup-*.tmp"

// backupIdleTimeout is how long the server waits for a backup's client to
// take the next chunk of the copy before it drops the client. A variable
// so that a test can shorten it.
var backupIdleTimeout = 2 * time.Minute

// backupChunk is the size of the writes that stream a copy: a client
// taking less than this per backupIdleTimeout counts as stalled.
const backupChunk = 32 << 10

type controlServer struct {
	db   *DB
	ln   net.Listener
	wg   sync.WaitGroup
	path string

	mu    sync.Mutex
	conns map[net.Conn]struct{} // the clients being served, closed by stop
}

// startControl listens on the data directory's control socket (nil when
// it cannot: the backup command then reports that it cannot reach the
// server).
func startControl(db *DB) *controlServer {
	ln, path, err := listenControl(db.dir)
	if err != nil {
		db.log.LogAttrs(context.Background(), slog.LevelWarn, "embedded_control_unavailable", slog.String("event", "embedded_control_unavailable"),
			slog.String("path", filepath.Join(db.dir, controlSocket)), slog.String("error", err.Error()))
		return nil
	}
	c := &controlServer{db: db, ln: ln, path: path, conns: map[net.Conn]struct{}{}}
	c.wg.Add(1)
	go c.serve()
	return c
}

// listenControl binds the control socket of the data directory dir so
// that no other user can reach it at any moment (see Backups above) and
// returns the listener and the socket's path.
func listenControl(dir string) (*net.UnixListener, string, error) {
	if fi, err := os.Lstat(filepath.Join(dir, legacySocket)); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(filepath.Join(dir, legacySocket)) // an older version's, left by a killed process
	}
	private := filepath.Join(dir, controlDir)
	if err := privateDir(private); err != nil {
		return nil, "", err
	}
	bind, path := filepath.Join(private, controlBind), filepath.Join(dir, controlSocket)
	_ = os.Remove(bind) // a previous process's, killed between its bind and its rename
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bind, Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	ln.SetUnlinkOnClose(false) // the socket is renamed; stop removes it by its final name
	if err = os.Chmod(bind, 0o600); err == nil {
		err = os.Rename(bind, path)
	}
	if err != nil {
		_ = ln.Close()
		_ = os.Remove(bind)
		return nil, "", err
	}
	return ln, path, nil
}

// privateDir makes path a directory that only this user can enter:
// created with mode 0700, or an existing directory of this user set to
// 0700. Anything else at that name (a file, a symbolic link, another
// user's directory) is refused.
func privateDir(path string) error {
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() || !ownedByMe(fi) {
		return fmt.Errorf("%s is not a directory of this user (%v): remove it", path, fi.Mode())
	}
	return os.Chmod(path, 0o700) // exactly 0700, whatever the umask left or someone set since
}

// stop closes the socket and the connections of the clients being served
// (a stalled backup client does not delay Close), and waits for their
// handlers.
func (c *controlServer) stop() {
	_ = c.ln.Close()
	c.mu.Lock()
	for conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
	c.mu.Unlock()
	c.wg.Wait()
	_ = os.Remove(c.path)
	_ = os.Remove(filepath.Dir(c.path)) // the private directory, when nothing else is in it
}

func (c *controlServer) serve() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.conns == nil { // stopping
			c.mu.Unlock()
			_ = conn.Close()
			return
		}
		c.conns[conn] = struct{}{}
		c.wg.Add(1)
		c.mu.Unlock()
		go func() {
			defer c.wg.Done()
			c.handle(conn)
			c.mu.Lock()
			delete(c.conns, conn)
			c.mu.Unlock()
			_ = conn.Close()
		}()
	}
}

// handle answers one client's command.
func (c *controlServer) handle(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(conn, 64)).ReadString('\n')
	if err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	w := idleWriter{conn: conn, idle: backupIdleTimeout}
	switch strings.TrimSpace(line) {
	case "backup":
		size, sent, err := c.db.writeBackup(w)
		attrs := []slog.Attr{slog.Int64("bytes", size), slog.Int64("bytes_sent", sent)}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.db.log.LogAttrs(context.Background(), slog.LevelWarn, "embedded_backup_stalled", append(attrs, slog.String("event", "embedded_backup_stalled"),
				slog.Int64("idle_timeout_ms", backupIdleTimeout.Milliseconds()))...)
		case err != nil:
			c.db.log.LogAttrs(context.Background(), slog.LevelWarn, "embedded_backup_served", append(attrs, slog.String("event", "embedded_backup_served"),
				slog.Bool("ok", false), slog.String("error", err.Error()))...)
		default:
			c.db.log.LogAttrs(context.Background(), slog.LevelInfo, "embedded_backup_served", append(attrs, slog.String("event", "embedded_backup_served"),
				slog.Bool("ok", true))...)
		}
	default:
		_, _ = io.WriteString(w, "error unknown command\n")
	}
}

// WriteBackup writes the control socket's answer to a backup request to
// w, as the server gives it: "ok SIZE\n" and a consistent copy of the
// store of SIZE bytes, or "error ...\n" when the copy cannot be made. The
// simulator calls it with readers that stall.
func (db *DB) WriteBackup(w io.Writer) error {
	_, _, err := db.writeBackup(w)
	return err
}

// OpenReadTransactions counts the read transactions open on the store
// right now. A read transaction held open holds up the writes that must
// grow the file (bbolt remaps it only when no reader holds the old
// mapping): the simulator checks that no backup reader holds one while it
// stalls.
func (db *DB) OpenReadTransactions() int { return db.bolt.Stats().OpenTxN }

// writeBackup writes the store's consistent copy to a temporary file in
// the data directory, then sends it to w: "ok SIZE\n" and SIZE bytes, or
// "error ...\n" when the copy cannot be made. The temporary copy is gone
// when it returns (see Backups above).
func (db *DB) writeBackup(w io.Writer) (size, sent int64, err error) {
	f, size, err := db.snapshot()
	if err != nil {
		_, _ = fmt.Fprintf(w, "error %v\n", err)
		return 0, 0, err
	}
	defer f.close()
	if _, err := fmt.Fprintf(w, "ok %d\n", size); err != nil {
		return size, 0, err
	}
	sent, err = io.CopyBuffer(w, io.LimitReader(f, size), make([]byte, backupChunk))
	if err == nil && sent != size {
		err = fmt.Errorf("the temporary copy ended at %d of %d bytes", sent, size)
	}
	return size, sent, err
}

// tempCopy is a temporary copy of the store, open for reading from its
// start. Its name is unlinked already where the system allows it (an open
// file keeps its data), else when it is closed.
type tempCopy struct {
	*os.File
	name     string
	unlinked bool
}

func (t *tempCopy) close() {
	_ = t.File.Close()
	if !t.unlinked {
		_ = os.Remove(t.name)
	}
}

// snapshot writes a consistent copy of the store to a temporary file in
// its data directory, holding a read transaction only while it does, and
// returns the file (to close) and the copy's size.
func (db *DB) snapshot() (*tempCopy, int64, error) {
	f, err := os.CreateTemp(db.dir, backupTempPattern)
	if err != nil {
		return nil, 0, fmt.Errorf("embedded: the backup's temporary copy in %s: %w", db.dir, err)
	}
	t := &tempCopy{File: f, name: f.Name()}
	t.unlinked = os.Remove(t.name) == nil
	var size int64
	err = db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		size, err = tx.WriteTo(f)
		return err
	})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		t.close()
		return nil, 0, fmt.Errorf("embedded: the backup's temporary copy in %s (it needs free space for a whole copy of the store): %w", db.dir, err)
	}
	return t, size, nil
}

// idleWriter writes to a connection, each write bounded by the idle
// timeout: a client that takes nothing for that long fails the write
// (os.ErrDeadlineExceeded).
type idleWriter struct {
	conn net.Conn
	idle time.Duration
}

func (w idleWriter) Write(p []byte) (int, error) {
	if err := w.conn.SetWriteDeadline(time.Now().Add(w.idle)); err != nil {
		return 0, err
	}
	return w.conn.Write(p)
}

// BackupInfo describes a backup made by Backup.
type BackupInfo struct {
	// Bytes is the size of the copy.
	Bytes int64
	// Schema is its schema version.
	Schema int
	// Executions counts the execution rows it holds.
	Executions int
	// FromServer reports that the running server wrote it (otherwise the
	// file was read directly).
	FromServer bool
}

// Backup writes a consistent copy of the store in dir to the file to
// (through a temporary file in to's directory, fsync'd, then renamed), and
// checks the copy as Open would. With a server running on dir it asks the
// server for the copy over the control socket (the server needs room in
// dir for a temporary copy of the store while it sends it); otherwise it
// reads the file itself, with a read transaction on a read-only handle of
// its own (a server started meanwhile fails with ErrLocked).
func Backup(ctx context.Context, dir, to string) (BackupInfo, error) {
	var info BackupInfo
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".tmp-*")
	if err != nil {
		return info, fmt.Errorf("embedded: backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	info.FromServer, err = copyFrom(ctx, dir, tmp)
	if err != nil {
		return info, err
	}
	if err := tmp.Sync(); err != nil {
		return info, fmt.Errorf("embedded: backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return info, fmt.Errorf("embedded: backup: %w", err)
	}
	if err := checkCopy(tmp.Name(), &info); err != nil {
		return info, err
	}
	if err := os.Rename(tmp.Name(), to); err != nil {
		return info, fmt.Errorf("embedded: backup: %w", err)
	}
	if d, err := os.Open(filepath.Dir(to)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return info, nil
}

// copyFrom writes the store's copy to w: from the server when one answers
// on the control socket, else from the file.
func copyFrom(ctx context.Context, dir string, w io.Writer) (fromServer bool, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", filepath.Join(dir, controlSocket))
	if err == nil {
		defer conn.Close()
		if _, err := io.WriteString(conn, "backup\n"); err != nil {
			return true, fmt.Errorf("embedded: backup from the server: %w", err)
		}
		r := bufio.NewReader(conn)
		line, err := r.ReadString('\n')
		if err != nil {
			return true, fmt.Errorf("embedded: backup from the server: %w", err)
		}
		size, perr := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "ok "), 10, 64)
		if !strings.HasPrefix(line, "ok ") || perr != nil {
			return true, fmt.Errorf("embedded: backup from the server: %s", strings.TrimSpace(line))
		}
		n, err := io.Copy(w, r)
		if err != nil {
			return true, fmt.Errorf("embedded: backup from the server: %w", err)
		}
		if n != size {
			return true, fmt.Errorf("embedded: backup from the server: got %d of %d bytes", n, size)
		}
		return true, nil
	}
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return false, fmt.Errorf("embedded: backup: no store in %s: %w", dir, err)
	}
	if err := precheck(path); err != nil {
		return false, err
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if errors.Is(err, berrors.ErrTimeout) {
		return false, fmt.Errorf("%w: %s is locked by %s, which does not answer on %s", ErrLocked, dir, describeOwner(dir), controlSocket)
	}
	if err != nil {
		return false, fmt.Errorf("embedded: backup: open %s: %w", path, err)
	}
	defer bdb.Close()
	return false, bdb.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(w)
		return err
	})
}

// checkCopy opens the copy at path read-only and checks it as Open does.
func checkCopy(path string, info *BackupInfo) error {
	if err := precheck(path); err != nil {
		return fmt.Errorf("embedded: backup copy: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	info.Bytes = fi.Size()
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("embedded: backup copy: %w", err)
	}
	defer bdb.Close()
	return bdb.View(func(tx *bolt.Tx) error {
		var problem error
		for err := range tx.Check() {
			if problem == nil {
				problem = fmt.Errorf("%w: backup copy: %v", ErrDamaged, err)
			}
		}
		if problem != nil {
			return problem
		}
		meta := tx.Bucket(bMeta)
		if meta == nil || string(meta.Get([]byte("format"))) != formatName {
			return fmt.Errorf("%w: backup copy", ErrNotStore)
		}
		info.Schema, _ = strconv.Atoi(string(meta.Get([]byte("schema"))))
		info.Executions = tx.Bucket(bExec).Stats().KeyN
		return nil
	})
}
