package embedded

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/outbox"
)

// SchemaVersion is the version of the data layout this binary writes (the
// buckets, their keys and the encoding of their values). It is stored in
// the file; Open refuses a file with a newer one (ErrNewerSchema).
//
// Version 2 added the operator jobs' buckets (jobs, jobpages,
// jobsactive); version 3 the maps' count rows (maps); version 4 the
// concurrency keys' records and waiting index (slots, waitkey); version 5
// the rate limits' buckets (rates) and the rows' rate limit fields. Open
// upgrades an older file by creating the buckets it lacks.
const SchemaVersion = 5

// FileName is the store's file inside its data directory.
const FileName = "qasync.db"

// ownerFile names the process holding the directory (informational: the
// lock itself is the file lock on FileName).
const ownerFile = "owner"

// formatName marks a file as a qasync embedded store.
const formatName = "qasync-embedded"

// Errors of Open (test with errors.Is).
var (
	// ErrLocked: another process holds the data directory.
	ErrLocked = errors.New("embedded: data directory in use by another process")
	// ErrNewerSchema: the file was written by a newer qasync.
	ErrNewerSchema = errors.New("embedded: data written by a newer schema version")
	// ErrDamaged: the file is truncated, torn or otherwise fails its checks.
	ErrDamaged = errors.New("embedded: data file damaged")
	// ErrNotStore: the file is a bbolt file but not a qasync store.
	ErrNotStore = errors.New("embedded: not a qasync embedded store")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("embedded: store closed")
	// ErrUnsafeDir: users other than the data directory's owner can
	// write it (checkDataDir).
	ErrUnsafeDir = errors.New("embedded: data directory writable by other users")
)

// Buckets. Keys are length-prefixed where a bucket is scanned by prefix,
// so that no key is a prefix of another's.
var (
	bMeta    = []byte("meta")    // format, schema version
	bExec    = []byte("exec")    // execKey -> row
	bSweep   = []byte("sweep")   // sweepMs + execKey -> pipeline id (the sparse sweep index)
	bList    = []byte("list")    // tenantKey + createdMs + id -> pipeline id (written once at create)
	bQueue   = []byte("queue")   // execKey -> work-queue entry
	bHist    = []byte("history") // execKey + version + index -> event
	bParts   = []byte("parts")   // partKey -> payload part
	bEffects = []byte("effects") // command id -> effect record
	bDead    = []byte("dead")    // record id -> dead-letter record
	bDeadIdx = []byte("deadidx") // tenantKey + recordedMs + id -> pipeline id
	bRejects = []byte("rejects") // seq -> reject envelope
	// Since schema version 2:
	bJobs       = []byte("jobs")       // jobKey -> job record
	bJobPages   = []byte("jobpages")   // jobKey + page number -> ids
	bJobsActive = []byte("jobsactive") // jobKey -> nothing (the active jobs)
	bMaps       = []byte("maps")       // mapKey + group (or the finished set) -> indexes
	// Since schema version 4:
	bSlots   = []byte("slots")   // scope id -> a concurrency key's holders
	bWaitKey = []byte("waitkey") // scope id + createdMs + execKey -> nothing (the waiting rows)
	// Since schema version 5:
	bRates = []byte("rates") // rate scope id -> a rate limit bucket's theoretical arrival time

	allBuckets = [][]byte{bMeta, bExec, bSweep, bList, bQueue, bHist, bParts, bEffects, bDead, bDeadIdx, bRejects,
		bJobs, bJobPages, bJobsActive, bMaps, bSlots, bWaitKey, bRates}
)

// bucketSince is the schema version that added a bucket (absent: 1). A
// file of an older version lacks the bucket until Open upgrades it.
var bucketSince = map[string]int{string(bJobs): 2, string(bJobPages): 2, string(bJobsActive): 2, string(bMaps): 3,
	string(bSlots): 4, string(bWaitKey): 4, string(bRates): 5}

// Options tune Open.
type Options struct {
	// Clock is the time the store judges expiry by (and the dispatcher
	// its delays). Default: the system clock.
	Clock clock.Clock
	// Logger receives the store's events. Default: discard.
	Logger *slog.Logger
	// LockWait is how long Open waits for another process to release the
	// data directory before it fails with ErrLocked. Default 200ms.
	LockWait time.Duration
	// BreakLeases ends, at open, the leases of RUNNING rows: the lock
	// proves that no other process runs them, so the worker that held
	// them is dead. Their executions are queued for a takeover at once
	// instead of after their lease lapses. qasync serve sets it.
	BreakLeases bool
	// NoControl turns off the control socket (Backup while the server
	// runs). Tests that open many stores set it.
	NoControl bool
	// NoSync skips the fsync of every commit: an acknowledged write then
	// survives the process but not the machine. Never for a deployment:
	// it is for the simulator, whose crashes are of processes (the page
	// cache survives them) and which commits millions of times.
	NoSync bool
	// Events are the lifecycle event types whose outbox records every
	// write adds in its transaction (outbox.go); empty: none.
	Events outbox.Types
}

// DB is one data directory: every seam of the runtime in one bbolt file,
// written by one group-commit loop. It is safe for concurrent use. Open
// it with Open; Close releases the directory.
type DB struct {
	dir, path string
	bolt      *bolt.DB
	log       *slog.Logger
	clock     clock.Clock

	writes   chan *writeOp
	mu       sync.RWMutex // held shared by senders, exclusively by Close
	closed   bool
	loopDone chan struct{}

	queue   *queueMirror
	control *controlServer
	jan     *janitor
	stats   counters
	// events are the types of Options.Events.
	events outbox.Types
}

// Open opens (creating if needed, mode 0700) the store in dir. It refuses
// a directory other users can write (ErrUnsafeDir), a directory held by
// another process (ErrLocked), a file from a newer qasync
// (ErrNewerSchema), and a file that fails its checks (ErrDamaged): the
// file's size against its meta page (a truncated copy), bbolt's structural
// check of every page, and the checksum of every stored value.
func Open(dir string, opts Options) (*DB, error) {
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LockWait <= 0 {
		opts.LockWait = 200 * time.Millisecond
	}
	if err := checkDataDir(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: create data directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if err := precheck(path); err != nil {
		return nil, err
	}
	if err := prevalidate(dir, path, opts.LockWait); err != nil {
		return nil, err
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: opts.LockWait, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, NoSync: opts.NoSync,
		Logger: boltLogger{opts.Logger},
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is locked by %s: stop that process first, or give this one another data directory (%s)",
			ErrLocked, dir, describeOwner(dir), dataDirKey)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: both meta pages are invalid (%v)", ErrDamaged, path, err)
	case errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%w: %s: unknown bbolt file format (%v)", ErrDamaged, path, err)
	case err != nil:
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	db := &DB{dir: dir, path: path, bolt: bdb, log: opts.Logger, clock: opts.Clock,
		writes: make(chan *writeOp, 4096), loopDone: make(chan struct{}), queue: newQueueMirror(), events: opts.Events}
	running, err := db.init()
	if err != nil {
		_ = bdb.Close()
		return nil, err
	}
	go db.loop()
	if opts.BreakLeases && len(running) > 0 {
		if err := db.breakLeases(running); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	writeOwner(dir)
	if !opts.NoControl {
		db.control = startControl(db)
	}
	db.jan = startJanitor(db)
	db.log.LogAttrs(context.Background(), slog.LevelInfo, "embedded_store_opened", slog.String("event", "embedded_store_opened"),
		slog.String("path", path), slog.Int("schema_version", SchemaVersion), slog.Int("queued", db.queue.len()),
		slog.Int("leases_broken", len(running)*boolInt(opts.BreakLeases)))
	return db, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dataDirKey is the configuration key of the data directory, named in
// errors.
const dataDirKey = "pipeline.orchestrator.embedded.data-dir"

// checkDataDir refuses (ErrUnsafeDir) an existing data directory that
// users other than its owner can write: group- or world-writable without
// the sticky bit. Such a user could replace the store's file or the
// control socket's directory with their own, and be handed the data.
// With the sticky bit (a /tmp-like directory) others cannot remove or
// rename this user's entries. A directory that does not exist yet passes:
// Open creates it with mode 0700.
//
// The directories above it are not checked. One that others can write
// lets them move the data directory aside and put their own in its place,
// at any time after a check at open, so refusing at open would not
// protect; and group-writable parents are ordinary (a umask of 002 with a
// private group per user makes every directory so), where refusing would
// turn make run away for no gain.
func checkDataDir(dir string) error {
	if !modesGuard {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil // absent: created 0700 below; anything else: MkdirAll reports it
	}
	if m := fi.Mode(); m.Perm()&0o022 != 0 && m&fs.ModeSticky == 0 {
		return fmt.Errorf("%w: %s has mode %#o (%v): another user could replace the store's file or its control socket with their own; "+
			"run chmod go-w %s, or set %s to a directory only you can write", ErrUnsafeDir, dir, m.Perm(), m, dir, dataDirKey)
	}
	return nil
}

// Dir is the store's data directory.
func (db *DB) Dir() string { return db.dir }

// Path is the store's file.
func (db *DB) Path() string { return db.path }

// prevalidate reads an existing file read-only before bbolt opens it for
// writing: bbolt's writable open walks every page to rebuild its free
// list, in a goroutine of its own that crashes the process on a damaged
// page. Here the same pages are read by this goroutine, which turns a
// fault or a failed assertion into ErrDamaged: the format, the schema
// version, and every value of every bucket with its checksum.
func prevalidate(dir, path string, wait time.Duration) (err error) {
	if fi, statErr := os.Stat(path); statErr != nil || fi.Size() == 0 {
		return nil // new
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: wait})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%w: %s is locked by %s: stop that process first, or give this one another data directory (%s)",
			ErrLocked, dir, describeOwner(dir), dataDirKey)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum):
		return fmt.Errorf("%w: %s: both meta pages are invalid (%v)", ErrDamaged, path, err)
	case errors.Is(err, berrors.ErrVersionMismatch):
		return fmt.Errorf("%w: %s: unknown bbolt file format (%v)", ErrDamaged, path, err)
	case err != nil:
		return fmt.Errorf("embedded: open %s: %w", path, err)
	}
	defer bdb.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: a page fails to read (%v)", ErrDamaged, path, r)
		}
	}()
	return bdb.View(func(tx *bolt.Tx) error {
		version, err := checkMeta(tx, path)
		if err != nil {
			return err
		}
		for _, name := range allBuckets {
			b := tx.Bucket(name)
			if b == nil && bucketSince[string(name)] > version {
				continue // added by a later version: the upgrade creates it
			}
			if b == nil {
				return fmt.Errorf("%w: %s has no bucket %s", ErrDamaged, path, name)
			}
			if string(name) == string(bMeta) || isIndex(name) {
				if err := b.ForEach(func(k, v []byte) error { return nil }); err != nil {
					return err
				}
				continue
			}
			if err := b.ForEach(func(k, v []byte) error {
				if _, err := unseal(v); err != nil {
					return fmt.Errorf("%w: %s: bucket %s key %x: %v", ErrDamaged, path, name, k, err)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkMeta checks the format and schema version of an existing store
// and returns the version.
func checkMeta(tx *bolt.Tx, path string) (int, error) {
	meta := tx.Bucket(bMeta)
	if meta == nil {
		return 0, fmt.Errorf("%w: %s holds data of another program", ErrNotStore, path)
	}
	if f := string(meta.Get([]byte("format"))); f != formatName {
		return 0, fmt.Errorf("%w: %s: format %q", ErrNotStore, path, f)
	}
	v, err := strconv.Atoi(string(meta.Get([]byte("schema"))))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w: %s: unreadable schema version", ErrDamaged, path)
	}
	if v > SchemaVersion {
		return 0, fmt.Errorf("%w: %s holds schema version %d, this qasync reads up to %d: run a newer qasync, or restore a backup made by this one",
			ErrNewerSchema, path, v, SchemaVersion)
	}
	return v, nil
}

// init creates the buckets of a new file or checks those of an existing
// one (format, schema version), upgrades an older version, verifies every
// stored value, and loads the work queue. It returns the keys of RUNNING
// rows.
func (db *DB) init() ([][]byte, error) {
	fresh := false
	version := 0
	err := db.bolt.View(func(tx *bolt.Tx) (err error) {
		meta := tx.Bucket(bMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("%w: %s holds data of another program", ErrNotStore, db.path)
			}
			fresh = true
			return nil
		}
		version, err = checkMeta(tx, db.path)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !fresh && version < SchemaVersion {
		if err := db.upgrade(version); err != nil {
			return nil, err
		}
	}
	if fresh {
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			for _, b := range allBuckets {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			meta := tx.Bucket(bMeta)
			if err := meta.Put([]byte("format"), []byte(formatName)); err != nil {
				return err
			}
			if err := meta.Put([]byte("created"), []byte(db.clock.Now().UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
			return meta.Put([]byte("schema"), []byte(strconv.Itoa(SchemaVersion)))
		})
		if err != nil {
			return nil, fmt.Errorf("embedded: initialize %s: %w", db.path, err)
		}
	}
	return db.verify()
}

// upgrade brings a file of schema version from to SchemaVersion in one
// transaction: it creates the buckets added since (nothing else changed
// between versions) and records the new version.
func (db *DB) upgrade(from int) error {
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if bucketSince[string(b)] > from {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bMeta).Put([]byte("schema"), []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		return fmt.Errorf("embedded: upgrade %s from schema version %d to %d: %w", db.path, from, SchemaVersion, err)
	}
	db.log.LogAttrs(context.Background(), slog.LevelInfo, "embedded_store_upgraded", slog.String("event", "embedded_store_upgraded"),
		slog.String("path", db.path), slog.Int("from_schema_version", from), slog.Int("schema_version", SchemaVersion))
	return nil
}

// verify runs bbolt's structural check, then reads every value of every
// bucket and checks its checksum; it loads the work queue and returns the
// keys of RUNNING rows on the way.
func (db *DB) verify() ([][]byte, error) {
	var running [][]byte
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var problems []string
		for err := range tx.Check() {
			if len(problems) < 5 {
				problems = append(problems, err.Error())
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("%w: %s fails its structural check: %s", ErrDamaged, db.path, strings.Join(problems, "; "))
		}
		for _, name := range allBuckets {
			b := tx.Bucket(name)
			if b == nil {
				return fmt.Errorf("%w: %s has no bucket %s", ErrDamaged, db.path, name)
			}
			if string(name) == string(bMeta) || isIndex(name) {
				continue
			}
			err := b.ForEach(func(k, v []byte) error {
				body, err := unseal(v)
				if err != nil {
					return fmt.Errorf("%w: %s: bucket %s key %x: %v", ErrDamaged, db.path, name, k, err)
				}
				switch string(name) {
				case string(bQueue):
					e, err := decodeQueue(k, body)
					if err != nil {
						return fmt.Errorf("%w: %s: queue entry %x: %v", ErrDamaged, db.path, k, err)
					}
					db.queue.load(e)
				case string(bExec):
					row, err := decodeRow(body)
					if err != nil {
						return fmt.Errorf("%w: %s: row %x: %v", ErrDamaged, db.path, k, err)
					}
					if row.Status == "RUNNING" {
						running = append(running, append([]byte(nil), k...))
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return running, err
}

// isIndex reports whether bucket name holds index entries (keys whose
// values are short, unsealed hints).
func isIndex(name []byte) bool {
	switch string(name) {
	case string(bSweep), string(bList), string(bDeadIdx), string(bJobsActive), string(bWaitKey):
		return true
	}
	return false
}

// Close stops the store's writers and background work and releases the
// data directory. Writes after Close return ErrClosed.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	close(db.writes)
	db.mu.Unlock()
	<-db.loopDone
	if db.jan != nil {
		db.jan.stop()
	}
	if db.control != nil {
		db.control.stop()
	}
	db.queue.close()
	removeOwner(db.dir)
	return db.bolt.Close()
}

// writeOwner notes this process in the data directory, for the error a
// second process gets.
func writeOwner(dir string) {
	_ = os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "pid %d since %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339)), 0o600)
}

func removeOwner(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err == nil && strings.HasPrefix(string(b), fmt.Sprintf("pid %d ", os.Getpid())) {
		_ = os.Remove(filepath.Join(dir, ownerFile))
	}
}

func describeOwner(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return "another process"
	}
	return "another qasync process (" + strings.TrimSpace(string(b)) + ")"
}

// boltLogger sends bbolt's warnings and errors to the store's log.
type boltLogger struct{ log *slog.Logger }

func (l boltLogger) emit(level slog.Level, msg string) {
	l.log.LogAttrs(context.Background(), level, "embedded_engine", slog.String("event", "embedded_engine"), slog.String("message", msg))
}
func (boltLogger) Debug(...any)                  {}
func (boltLogger) Debugf(string, ...any)         {}
func (boltLogger) Info(...any)                   {}
func (boltLogger) Infof(string, ...any)          {}
func (l boltLogger) Error(v ...any)              { l.emit(slog.LevelError, fmt.Sprint(v...)) }
func (l boltLogger) Errorf(f string, v ...any)   { l.emit(slog.LevelError, fmt.Sprintf(f, v...)) }
func (l boltLogger) Warning(v ...any)            { l.emit(slog.LevelWarn, fmt.Sprint(v...)) }
func (l boltLogger) Warningf(f string, v ...any) { l.emit(slog.LevelWarn, fmt.Sprintf(f, v...)) }
func (l boltLogger) Fatal(v ...any)              { l.emit(slog.LevelError, fmt.Sprint(v...)) }
func (l boltLogger) Fatalf(f string, v ...any)   { l.emit(slog.LevelError, fmt.Sprintf(f, v...)) }
func (l boltLogger) Panic(v ...any)              { l.emit(slog.LevelError, fmt.Sprint(v...)) }
func (l boltLogger) Panicf(f string, v ...any)   { l.emit(slog.LevelError, fmt.Sprintf(f, v...)) }
