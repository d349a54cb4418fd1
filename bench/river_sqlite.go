package main

// River on SQLite (riversqlite over modernc.org/sqlite, pure Go): a file
// database in WAL mode, one connection (riversqlite's advice: SQLite runs
// one writer at a time and River's services would otherwise meet
// SQLITE_BUSY), with synchronous=FULL (every commit fsyncs the WAL: as
// durable as a commit gets) or NORMAL (the WAL is fsynced at checkpoints
// only: survives a process crash, may lose the last commits on power loss).

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

func init() {
	for i, sync := range []string{"FULL", "NORMAL"} {
		register(Spec{
			Key:   "river-sqlite-" + map[string]string{"FULL": "full", "NORMAL": "normal"}[sync],
			Label: "River v0.51.2, SQLite (synchronous=" + sync + ")",
			Settings: "riversqlite + modernc.org/sqlite, file db, journal_mode=WAL, synchronous=" + sync +
				", busy_timeout=10s, 1 connection; FetchCooldown 1ms, FetchPollInterval 50ms",
			Order: 10 + i,
			New: func() (System, error) {
				return &riverSystem[*riversqlite.Driver, *sql.Tx]{backend: &sqliteBackend{synchronous: sync}}, nil
			},
		})
	}
}

// sqliteBackend is River's SQLite database: a new file per System.
type sqliteBackend struct {
	synchronous string
	db          *sql.DB
}

func (b *sqliteBackend) open(ctx context.Context, env Env) (riverdriver.Driver[*sql.Tx], error) {
	dsn := fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=synchronous(%s)&_pragma=busy_timeout(10000)",
		filepath.Join(env.Dir, "river.sqlite"), b.synchronous)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var mode, syncMode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// PRAGMA synchronous answers 2 for FULL and 1 for NORMAL.
	if want := map[string]string{"FULL": "2", "NORMAL": "1"}[b.synchronous]; mode != "wal" || syncMode != want {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: journal_mode=%s synchronous=%s, want wal and %s", mode, syncMode, want)
	}
	b.db = db
	return riversqlite.New(db), nil
}

func (b *sqliteBackend) schema() string { return "" }

func (b *sqliteBackend) begin(ctx context.Context) (*sql.Tx, error) { return b.db.BeginTx(ctx, nil) }

func (b *sqliteBackend) commit(_ context.Context, tx *sql.Tx) error { return tx.Commit() }

func (b *sqliteBackend) rollback(_ context.Context, tx *sql.Tx) { _ = tx.Rollback() }

func (b *sqliteBackend) close(context.Context) error {
	if b.db == nil {
		return nil
	}
	return b.db.Close()
}
