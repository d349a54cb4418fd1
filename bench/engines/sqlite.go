package main

import (
	"context"
	"database/sql"
	"path/filepath"

	_ "modernc.org/sqlite"
)

// sqliteEngine: modernc.org/sqlite (SQLite translated to Go), WAL journal,
// synchronous=FULL (every commit fsyncs the WAL), one connection.
type sqliteEngine struct{ db *sql.DB }

func (s *sqliteEngine) open(dir string, rows int) error {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "store.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	s.db = db
	for _, q := range []string{
		`CREATE TABLE rows (k BLOB PRIMARY KEY, ver INTEGER NOT NULL, v BLOB NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE queue (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID`,
	} {
		if _, err := db.Exec(q); err != nil {
			return err
		}
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	for i := range rows {
		if _, err := tx.Exec(`INSERT INTO rows VALUES (?, 1, ?)`, rowKey(i), rowValue(1)); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

func (s *sqliteEngine) commit(ops []*op) error {
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, o := range ops {
		k := rowKey(o.row)
		res, err := tx.Exec(`UPDATE rows SET ver = ver + 1, v = ? WHERE k = ? AND ver = ?`, rowValue(o.version+1), k, o.version)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			o.err = errVersion
			continue
		}
		if _, err := tx.Exec(`DELETE FROM queue WHERE k = ?`, o.dequeue); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO queue VALUES (?, ?)`, o.enqueue, k); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (s *sqliteEngine) version(row int) (uint64, error) {
	var v uint64
	err := s.db.QueryRow(`SELECT ver FROM rows WHERE k = ?`, rowKey(row)).Scan(&v)
	return v, err
}

func (s *sqliteEngine) close() error { return s.db.Close() }
