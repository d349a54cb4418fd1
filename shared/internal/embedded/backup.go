package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
// the data directory (controlSocket, mode 0600: only the directory's owner
// can connect); with no server running, it opens the file read-only
// itself.

// controlSocket is the server's control socket inside the data directory.
const controlSocket = "control.sock"

type controlServer struct {
	db   *DB
	ln   net.Listener
	wg   sync.WaitGroup
	path string
}

// startControl listens on the data directory's control socket (nil when
// it cannot: the backup command then reports that it cannot reach the
// server).
func startControl(db *DB) *controlServer {
	path := filepath.Join(db.dir, controlSocket)
	_ = os.Remove(path) // a previous process's (this one holds the lock)
	ln, err := net.Listen("unix", path)
	if err != nil {
		db.log.LogAttrs(context.Background(), slog.LevelWarn, "embedded_control_unavailable", slog.String("event", "embedded_control_unavailable"),
			slog.String("path", path), slog.String("error", err.Error()))
		return nil
	}
	_ = os.Chmod(path, 0o600)
	c := &controlServer{db: db, ln: ln, path: path}
	c.wg.Add(1)
	go c.serve()
	return c
}

func (c *controlServer) stop() {
	_ = c.ln.Close()
	c.wg.Wait()
	_ = os.Remove(c.path)
}

func (c *controlServer) serve() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(io.LimitReader(conn, 64)).ReadString('\n')
			if err != nil {
				return
			}
			_ = conn.SetReadDeadline(time.Time{})
			switch strings.TrimSpace(line) {
			case "backup":
				err := c.db.WriteBackup(conn)
				c.db.log.LogAttrs(context.Background(), slog.LevelInfo, "embedded_backup_served", slog.String("event", "embedded_backup_served"),
					slog.Bool("ok", err == nil))
			default:
				fmt.Fprintf(conn, "error unknown command\n")
			}
		}()
	}
}

// WriteBackup writes the control socket's answer to a backup request to
// w: the line "ok <size>" and then a consistent copy of the store of that
// many bytes.
func (db *DB) WriteBackup(w io.Writer) error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		if _, err := fmt.Fprintf(w, "ok %d\n", tx.Size()); err != nil {
			return err
		}
		_, err := tx.WriteTo(w)
		return err
	})
}

// OpenReadTransactions counts the read transactions open on the store
// right now. A read transaction held open holds up the writes that must
// grow the file (bbolt remaps it only when no reader holds the old
// mapping): the simulator checks that no backup reader can hold one
// while it stalls.
func (db *DB) OpenReadTransactions() int { return db.bolt.Stats().OpenTxN }

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
// server for the copy over the control socket; otherwise it reads the file
// itself.
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
