package embedded

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

// The lifecycle events' outbox: with Options.Events, every write that
// commits a row version puts one record per lifecycle event of those
// types it yields (outbox.Of) into the outbox bucket, in the same
// transaction as the row and its history (so in the same group commit and
// fsync: no write of its own), keyed by the bucket's sequence; an
// outbox.Drainer reads them in that order (Pending) and deletes each once
// the sink acknowledged it (Ack, one more write of the group commit per
// drained batch). The bucket is created by the first record, so a file
// without events, and the file's schema version, are as they were.

// bOutbox is the outbox bucket: sequence (8 bytes, big endian) -> event.
var bOutbox = []byte("outbox")

var _ outbox.Source = (*State)(nil)

// outbox puts the records of the events of types among evs, the history
// events of the write that made row.
func (t *txn) outbox(row *store.Execution, evs []history.Event) error {
	recs := outbox.Of(row, evs, t.db.events)
	if len(recs) == 0 {
		return nil
	}
	b, err := t.tx.CreateBucketIfNotExists(bOutbox)
	if err != nil {
		return err
	}
	for _, ev := range recs {
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		v, err := sealJSON(ev)
		if err != nil {
			return err
		}
		if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), v); err != nil {
			return err
		}
	}
	return nil
}

// Pending implements outbox.Source: the oldest records, up to limit.
func (s *State) Pending(ctx context.Context, limit int) ([]outbox.Event, error) {
	var out []outbox.Event
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bOutbox)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(out) < limit; k, v = c.Next() {
			var ev outbox.Event
			if err := openJSON(v, &ev, fmt.Sprintf("outbox record %x", k)); err != nil {
				return err
			}
			ev.Seq = binary.BigEndian.Uint64(k)
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}

// Ack implements outbox.Source: the records at seqs are deleted, in one
// write.
func (s *State) Ack(ctx context.Context, seqs []uint64) error {
	return s.db.update(ctx, func(t *txn) error {
		b := t.bucket(bOutbox)
		if b == nil {
			return nil
		}
		for _, q := range seqs {
			if err := b.Delete(binary.BigEndian.AppendUint64(nil, q)); err != nil {
				return err
			}
		}
		return nil
	})
}
