package main

import (
	"encoding/binary"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// boltEngine: one file, a B+tree, one writer at a time; each Update
// writes its dirty pages and the meta page and fdatasyncs.
type boltEngine struct{ db *bolt.DB }

var boltRows, boltQueue = []byte("rows"), []byte("queue")

func (b *boltEngine) open(dir string, rows int) error {
	db, err := bolt.Open(filepath.Join(dir, "store.db"), 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	b.db = db
	return db.Update(func(tx *bolt.Tx) error {
		rb, err := tx.CreateBucketIfNotExists(boltRows)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(boltQueue); err != nil {
			return err
		}
		for i := range rows {
			if err := rb.Put(rowKey(i), rowValue(1)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltEngine) commit(ops []*op) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		rb, qb := tx.Bucket(boltRows), tx.Bucket(boltQueue)
		for _, o := range ops {
			k := rowKey(o.row)
			cur := rb.Get(k)
			if cur == nil || binary.BigEndian.Uint64(cur) != o.version {
				o.err = errVersion
				continue
			}
			if err := rb.Put(k, rowValue(o.version+1)); err != nil {
				return err
			}
			if err := qb.Delete(o.dequeue); err != nil {
				return err
			}
			if err := qb.Put(o.enqueue, k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltEngine) version(row int) (uint64, error) {
	var v uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		if cur := tx.Bucket(boltRows).Get(rowKey(row)); cur != nil {
			v = binary.BigEndian.Uint64(cur)
		}
		return nil
	})
	return v, err
}

func (b *boltEngine) close() error { return b.db.Close() }
