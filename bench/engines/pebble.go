package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// pebbleEngine: an LSM tree; a batch is appended to the write-ahead log
// and fsynced (pebble.Sync), memtables flush in the background.
type pebbleEngine struct {
	db    *pebble.DB
	locks [256]sync.Mutex
}

func (p *pebbleEngine) open(dir string, rows int) error {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return err
	}
	p.db = db
	b := db.NewBatch()
	for i := range rows {
		if err := b.Set(rowKey(i), rowValue(1), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// apply adds o to b after checking its version (the caller excludes
// concurrent writers of o's row).
func (p *pebbleEngine) apply(b *pebble.Batch, o *op) error {
	k := rowKey(o.row)
	cur, closer, err := p.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		o.err = errVersion
		return nil
	}
	if err != nil {
		return err
	}
	v := binary.BigEndian.Uint64(cur)
	closer.Close()
	if v != o.version {
		o.err = errVersion
		return nil
	}
	if err := b.Set(k, rowValue(o.version+1), nil); err != nil {
		return err
	}
	if err := b.Delete(o.dequeue, nil); err != nil {
		return err
	}
	return b.Set(o.enqueue, k, nil)
}

func (p *pebbleEngine) commit(ops []*op) error {
	b := p.db.NewBatch()
	defer b.Close()
	for _, o := range ops {
		if err := p.apply(b, o); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// commitOne commits o in its own synced batch, concurrently with other
// writers (pebble groups their WAL syncs), under the row's lock.
func (p *pebbleEngine) commitOne(o *op) error {
	l := &p.locks[o.row%len(p.locks)]
	l.Lock()
	defer l.Unlock()
	b := p.db.NewBatch()
	defer b.Close()
	if err := p.apply(b, o); err != nil {
		return err
	}
	if o.err != nil {
		return o.err
	}
	return b.Commit(pebble.Sync)
}

func (p *pebbleEngine) version(row int) (uint64, error) {
	cur, closer, err := p.db.Get(rowKey(row))
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(cur), nil
}

func (p *pebbleEngine) close() error { return p.db.Close() }

// quietLogger drops pebble's informational lines (they would mix with the table).
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)      {}
func (quietLogger) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...) }
func (quietLogger) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...)
	os.Exit(1)
}
