package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
)

// DeadLetters is the embedded dead-letter recorder (deadletter.Recorder,
// deadletter.Lister) and publisher (deadletter.Publisher: a published
// envelope is recorded at once, in the store, where the operator plane
// lists it). Records are sealed JSON values of bucket dead keyed by id;
// execution records with a tenant also get an entry of bucket deadidx
// (tenant, recorded time, id), which lists a tenant's newest first.
type DeadLetters struct {
	db    *DB
	clock clock.Clock
}

var (
	_ deadletter.Recorder  = (*DeadLetters)(nil)
	_ deadletter.Lister    = (*DeadLetters)(nil)
	_ deadletter.Publisher = (*DeadLetters)(nil)
)

// DeadLetters returns the dead-letter recorder, lister and publisher,
// judging expiry by c (nil: the store's clock).
func (db *DB) DeadLetters(c clock.Clock) *DeadLetters {
	if c == nil {
		c = db.clock
	}
	return &DeadLetters{db: db, clock: c}
}

func deadIdxKey(r *deadletter.Record) []byte {
	return append(append(tenantKey(r.TenantID), be64(ms(r.RecordedAt))...), r.ID...)
}

func (d *DeadLetters) live(tx *bolt.Tx, id string) (deadletter.Record, bool, error) {
	v := tx.Bucket(bDead).Get([]byte(id))
	if v == nil {
		return deadletter.Record{}, false, nil
	}
	var r deadletter.Record
	if err := openJSON(v, &r, "dead-letter record "+id); err != nil {
		return deadletter.Record{}, false, err
	}
	r.RecordedAt, r.ExpiresAt = fromMs(ms(r.RecordedAt)), fromMs(ms(r.ExpiresAt))
	if expired(r.ExpiresAt, d.clock.Now()) {
		return r, false, nil
	}
	return r, true, nil
}

// Put implements deadletter.Recorder.
func (d *DeadLetters) Put(ctx context.Context, r deadletter.Record) (bool, error) {
	if r.ID == "" {
		return false, errors.New("embedded: a dead-letter record needs an id")
	}
	r.RecordedAt, r.ExpiresAt = fromMs(ms(r.RecordedAt)), fromMs(ms(r.ExpiresAt))
	if r.Envelope != nil {
		env := *r.Envelope
		env.FailedAt = fromMs(ms(env.FailedAt))
		r.Envelope = &env
	}
	var created bool
	err := d.db.update(ctx, func(t *txn) error {
		created = false
		old, ok, err := d.live(t.tx, r.ID)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if old.ID != "" && old.Listed() {
			if err := t.bucket(bDeadIdx).Delete(deadIdxKey(&old)); err != nil { // an expired record, replaced
				return err
			}
		}
		v, err := sealJSON(r)
		if err != nil {
			return err
		}
		if err := t.bucket(bDead).Put([]byte(r.ID), v); err != nil {
			return err
		}
		if r.Listed() {
			if err := t.bucket(bDeadIdx).Put(deadIdxKey(&r), []byte(r.Envelope.PipelineID)); err != nil {
				return err
			}
		}
		created = true
		return nil
	})
	return created, err
}

// Get implements deadletter.Recorder.
func (d *DeadLetters) Get(ctx context.Context, id string) (deadletter.Record, error) {
	var r deadletter.Record
	var ok bool
	err := d.db.view(ctx, func(tx *bolt.Tx) (err error) {
		r, ok, err = d.live(tx, id)
		return err
	})
	if err != nil {
		return deadletter.Record{}, err
	}
	if !ok {
		return deadletter.Record{}, fmt.Errorf("embedded: dead letter %s: %w", id, deadletter.ErrNotFound)
	}
	return r, nil
}

// Publish implements deadletter.Publisher: the envelope is recorded as
// the dead-letter consumer records it (deadletter.ExecutionRecord:
// idempotently, keyed by its transition key, kept
// deadletter.RecordRetention); a nil error means it is on disk.
func (d *DeadLetters) Publish(ctx context.Context, env deadletter.Envelope) error {
	_, err := d.Put(ctx, deadletter.ExecutionRecord(env, d.clock.Now()))
	return err
}

// List implements deadletter.Lister with the rules of package deadletter
// (ListQuery.Validate, Fingerprint, Matches, PageSize): the tenant's
// listed records, newest first (recorded time, then id, descending),
// optionally of one pipeline, read from the tenant index backwards from
// the cursor's position. A cursor of another query is
// deadletter.ErrInvalidCursor.
func (d *DeadLetters) List(ctx context.Context, q deadletter.ListQuery) (deadletter.ListPage, error) {
	if err := q.Validate(); err != nil {
		return deadletter.ListPage{}, err
	}
	fp := q.Fingerprint()
	tk := tenantKey(q.TenantID)
	start := append(slices.Clone(tk), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	if q.Cursor != "" {
		pos, err := decodeListCursor(q.Cursor, fp)
		if err != nil {
			return deadletter.ListPage{}, fmt.Errorf("embedded: %w: not a cursor of this dead-letter query", deadletter.ErrInvalidCursor)
		}
		start = append(append(slices.Clone(tk), be64(pos.At)...), pos.ID...)
	}
	limit := q.PageSize()
	var page deadletter.ListPage
	err := d.db.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bDeadIdx).Cursor()
		k, v := c.Seek(start)
		if k == nil {
			k, v = c.Last()
		}
		for k != nil && bytes.Compare(k, start) >= 0 {
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, tk) && len(k) >= len(tk)+8; k, v = c.Prev() {
			if q.PipelineID != "" && string(v) != q.PipelineID {
				continue // the index holds the pipeline: no need to read the record
			}
			r, ok, err := d.live(tx, string(k[len(tk)+8:]))
			if err != nil {
				return err
			}
			if !ok || !q.Matches(r) {
				continue
			}
			if len(page.Records) == limit {
				last := page.Records[limit-1]
				page.Cursor = encodeListCursor(fp, listPos{At: ms(last.RecordedAt), ID: last.ID})
				return nil
			}
			page.Records = append(page.Records, r)
		}
		return nil
	})
	return page, err
}
