package main

// River on Postgres (riverpgxv5 over pgx/v5). The parent finds a Postgres:
// BENCH_POSTGRES_URL, or a throwaway cluster it starts itself from
// initdb/pg_ctl (postgres.go); each System migrates River into a schema of
// its own and drops it at Close, so an existing database is left as found.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Environment variables the parent hands to the Postgres child.
const (
	envPostgresURL = "BENCH_POSTGRES_URL"
	// envPostgresPID is the postmaster's pid, when the server runs on this
	// machine: its CPU (and its backends') is added to River's.
	envPostgresPID = "BENCH_POSTGRES_PID"
)

func init() {
	register(Spec{
		Key:   "river-postgres",
		Label: "River v0.51.2, Postgres",
		Settings: "riverpgxv5 + pgx/v5 pool of workers+8 conns, fsync=on, synchronous_commit=on; " +
			"FetchCooldown 1ms, FetchPollInterval 50ms, LISTEN/NOTIFY",
		Order:   20,
		Prepare: preparePostgres,
		New: func() (System, error) {
			url := os.Getenv(envPostgresURL)
			if url == "" {
				return nil, fmt.Errorf("%s is not set", envPostgresURL)
			}
			pid, _ := strconv.Atoi(os.Getenv(envPostgresPID))
			return &riverPostgres{
				riverSystem: riverSystem[*riverpgxv5.Driver, pgx.Tx]{backend: &pgBackend{url: url}},
				pid:         pid,
			}, nil
		},
	})
}

// riverPostgres is River on Postgres, with the server's CPU when known.
type riverPostgres struct {
	riverSystem[*riverpgxv5.Driver, pgx.Tx]
	pid int
}

// ServerCPU implements ServerCPU: the postmaster's and its backends' CPU.
func (r *riverPostgres) ServerCPU() (time.Duration, bool) {
	if r.pid <= 0 {
		return 0, false
	}
	d, err := processTreeCPU(r.pid)
	return d, err == nil
}

var pgSchemaSeq atomic.Int64

// pgBackend is a pool on the server and a fresh schema for River.
type pgBackend struct {
	url        string
	pool       *pgxpool.Pool
	schemaName string
}

func (b *pgBackend) open(ctx context.Context, env Env) (riverdriver.Driver[pgx.Tx], error) {
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envPostgresURL, err)
	}
	// Each running step holds a connection for its transaction; River's
	// producer, completer and notifier need theirs besides.
	cfg.MaxConns = int32(env.Workers + 8)
	b.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := b.pool.Ping(ctx); err != nil {
		b.pool.Close()
		b.pool = nil
		return nil, fmt.Errorf("postgres: %w", err)
	}
	b.schemaName = fmt.Sprintf("qasync_bench_%d_%d", os.Getpid(), pgSchemaSeq.Add(1))
	if _, err := b.pool.Exec(ctx, "CREATE SCHEMA "+b.schemaName); err != nil {
		b.pool.Close()
		b.pool = nil
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return riverpgxv5.New(b.pool), nil
}

func (b *pgBackend) schema() string { return b.schemaName }

func (b *pgBackend) begin(ctx context.Context) (pgx.Tx, error) { return b.pool.Begin(ctx) }

func (b *pgBackend) commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

func (b *pgBackend) rollback(ctx context.Context, tx pgx.Tx) { _ = tx.Rollback(ctx) }

func (b *pgBackend) close(ctx context.Context) error {
	if b.pool == nil {
		return nil
	}
	defer b.pool.Close()
	_, err := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+b.schemaName+" CASCADE")
	return err
}
