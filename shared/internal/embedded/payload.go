package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/payload"
)

// Payloads is the embedded payload.Store: each part one value of bucket
// parts (key: payload id and part name, length-prefixed), holding its
// expiry (seconds) and its bytes, sealed.
type Payloads struct {
	db    *DB
	clock clock.Clock
}

var _ payload.Store = (*Payloads)(nil)

// Payloads returns the payload store, judging expiry by c (nil: the
// store's clock).
func (db *DB) Payloads(c clock.Clock) *Payloads {
	if c == nil {
		c = db.clock
	}
	return &Payloads{db: db, clock: c}
}

func partKey(id, name string) []byte { return appendStr(appendStr(nil, id), name) }

func encodePart(p payload.Part) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(secs(p.ExpiresAt)))
	return seal(append(b, p.Data...))
}

func decodePart(v []byte) (payload.Part, error) {
	body, err := unseal(v)
	if err != nil || len(body) < 8 {
		return payload.Part{}, fmt.Errorf("%w: payload part: %v", ErrDamaged, errors.Join(err, errChecksum))
	}
	return payload.Part{ExpiresAt: fromSecs(int64(binary.BigEndian.Uint64(body))), Data: bytes.Clone(body[8:])}, nil
}

// partExpiry reads a stored part's expiry only: the checksum is verified
// as by decodePart, but the bytes are not copied (the janitor's hourly
// scan and the counts read every part of the file).
func partExpiry(v []byte) (time.Time, error) {
	body, err := unseal(v)
	if err != nil || len(body) < 8 {
		return time.Time{}, fmt.Errorf("%w: payload part: %v", ErrDamaged, errors.Join(err, errChecksum))
	}
	return fromSecs(int64(binary.BigEndian.Uint64(body))), nil
}

// partExpiryUnchecked reads a stored part's expiry without verifying its
// checksum: the janitor's hourly scan and the counts would otherwise
// checksum every payload byte of the file. A part the scan finds expired
// is deleted only after partExpiry, checksum verified, agrees in the
// deleting transaction, so a damaged part is never deleted unseen.
func partExpiryUnchecked(v []byte) (time.Time, bool) {
	if len(v) < 12 {
		return time.Time{}, false
	}
	return fromSecs(int64(binary.BigEndian.Uint64(v[4:12]))), true
}

// PutPart implements payload.Store. Identical bytes again are accepted
// (the stored expiry is kept); other bytes are payload.ErrConflict unless
// the stored part expired.
func (s *Payloads) PutPart(ctx context.Context, p payload.Part) error {
	if p.PayloadID == "" || p.Name == "" {
		return errors.New("embedded: a part needs a payload id and a name")
	}
	k := partKey(p.PayloadID, p.Name)
	return s.db.update(ctx, func(t *txn) error {
		b := t.bucket(bParts)
		if v := b.Get(k); v != nil {
			old, err := decodePart(v)
			if err != nil {
				return err
			}
			if !expired(old.ExpiresAt, s.clock.Now()) {
				if bytes.Equal(old.Data, p.Data) {
					return nil
				}
				return refuse(fmt.Errorf("embedded: put %s %s: %w", p.PayloadID, p.Name, payload.ErrConflict))
			}
		}
		return b.Put(k, encodePart(p))
	})
}

// GetPart implements payload.Store.
func (s *Payloads) GetPart(ctx context.Context, payloadID, name string) (payload.Part, error) {
	var part payload.Part
	found := false
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bParts).Get(partKey(payloadID, name))
		if v == nil {
			return nil
		}
		p, err := decodePart(v)
		if err != nil {
			return err
		}
		if !expired(p.ExpiresAt, s.clock.Now()) {
			part, found = p, true
		}
		return nil
	})
	if err != nil {
		return payload.Part{}, err
	}
	if !found {
		return payload.Part{}, fmt.Errorf("embedded: get %s %s: %w", payloadID, name, payload.ErrNotFound)
	}
	part.PayloadID, part.Name = payloadID, name
	return part, nil
}

// ExtendPart implements payload.Store: the part is written again with
// the later expiry.
func (s *Payloads) ExtendPart(ctx context.Context, payloadID, name string, until time.Time) error {
	k := partKey(payloadID, name)
	return s.db.update(ctx, func(t *txn) error {
		b := t.bucket(bParts)
		v := b.Get(k)
		if v == nil {
			return refuse(fmt.Errorf("embedded: extend %s %s: %w", payloadID, name, payload.ErrNotFound))
		}
		p, err := decodePart(v)
		if err != nil {
			return err
		}
		switch {
		case expired(p.ExpiresAt, s.clock.Now()):
			return refuse(fmt.Errorf("embedded: extend %s %s: %w", payloadID, name, payload.ErrNotFound))
		case p.ExpiresAt.IsZero() || !until.After(p.ExpiresAt):
			return nil
		}
		p.ExpiresAt = until
		return b.Put(k, encodePart(p))
	})
}

// DeletePart implements payload.Store.
func (s *Payloads) DeletePart(ctx context.Context, payloadID, name string) error {
	return s.db.update(ctx, func(t *txn) error { return t.bucket(bParts).Delete(partKey(payloadID, name)) })
}

// LiveParts counts the payload parts the file holds that have not
// expired by the store's clock (the simulator checks that a refused
// request stores nothing).
func (db *DB) LiveParts() int {
	n, now := 0, db.clock.Now()
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bParts).ForEach(func(_, v []byte) error {
			if at, ok := partExpiryUnchecked(v); ok && !expired(at, now) {
				n++
			}
			return nil
		})
	})
	return n
}
