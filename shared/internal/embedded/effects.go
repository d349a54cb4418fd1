package embedded

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
)

// Effects is the embedded effect.Log: one sealed JSON value per command
// id in bucket effects.
type Effects struct {
	db    *DB
	clock clock.Clock
}

var _ effect.Log = (*Effects)(nil)

// Effects returns the effect log, judging expiry by c (nil: the store's
// clock).
func (db *DB) Effects(c clock.Clock) *Effects {
	if c == nil {
		c = db.clock
	}
	return &Effects{db: db, clock: c}
}

// effectRec is the stored form of a record (times in ms, TTL in s).
type effectRec struct {
	ID  string            `json:"id"`
	S   effect.State      `json:"s"`
	V   int64             `json:"v"`
	D   effect.Dispatcher `json:"d"`
	N   int               `json:"n,omitempty"`
	O   payload.Payload   `json:"o"`
	OD  []byte            `json:"od,omitempty"`
	Er  *effect.Failure   `json:"er,omitempty"`
	C   int64             `json:"c"`
	U   int64             `json:"u"`
	X   int64             `json:"x,omitempty"`
	Nil bool              `json:"nil,omitempty"` // Output.Data was nil
}

func encodeEffect(r effect.Record) ([]byte, error) {
	return sealJSON(effectRec{ID: r.CommandID, S: r.State, V: r.Version, D: r.Dispatcher, N: r.Dispatches, O: r.Output,
		OD: r.Output.Data, Er: r.Error, C: ms(r.CreatedAt), U: ms(r.UpdatedAt), X: secs(r.ExpiresAt), Nil: r.Output.Data == nil})
}

func decodeEffect(v []byte) (effect.Record, error) {
	var e effectRec
	if err := openJSON(v, &e, "effect record"); err != nil {
		return effect.Record{}, err
	}
	out := effect.Record{CommandID: e.ID, State: e.S, Version: e.V, Dispatcher: e.D, Dispatches: e.N, Output: e.O,
		Error: e.Er, CreatedAt: fromMs(e.C), UpdatedAt: fromMs(e.U), ExpiresAt: fromSecs(e.X)}
	out.Output.Data = bytes.Clone(e.OD)
	if out.Output.Data == nil && !e.Nil {
		out.Output.Data = []byte{}
	}
	return out, nil
}

// live reads the unexpired record id in tx.
func (l *Effects) live(tx *bolt.Tx, id string) (effect.Record, bool, error) {
	v := tx.Bucket(bEffects).Get([]byte(id))
	if v == nil {
		return effect.Record{}, false, nil
	}
	r, err := decodeEffect(v)
	if err != nil {
		return effect.Record{}, false, err
	}
	if expired(r.ExpiresAt, l.clock.Now()) {
		return effect.Record{}, false, nil
	}
	return r, true, nil
}

// CreateOrGet implements effect.Log.
func (l *Effects) CreateOrGet(ctx context.Context, r effect.Record) (effect.Record, bool, error) {
	if err := r.Check(); err != nil {
		return effect.Record{}, false, fmt.Errorf("embedded: %w", err)
	}
	var got effect.Record
	var created bool
	err := l.db.update(ctx, func(t *txn) error {
		old, ok, err := l.live(t.tx, r.CommandID)
		if err != nil {
			return err
		}
		if ok {
			got, created = old, false
			if old.ExpiresAt.IsZero() || !r.ExpiresAt.After(old.ExpiresAt) {
				return nil
			}
			got.ExpiresAt = fromSecs(secs(r.ExpiresAt)) // kept as long as the execution may need it
			v, err := encodeEffect(got)
			if err != nil {
				return err
			}
			return t.bucket(bEffects).Put([]byte(r.CommandID), v)
		}
		r.Version = 1
		v, err := encodeEffect(r)
		if err != nil {
			return err
		}
		if err := t.bucket(bEffects).Put([]byte(r.CommandID), v); err != nil {
			return err
		}
		got, err = decodeEffect(v)
		created = true
		return err
	})
	return got, created, err
}

// Get implements effect.Log.
func (l *Effects) Get(ctx context.Context, id string) (effect.Record, error) {
	var r effect.Record
	var ok bool
	err := l.db.view(ctx, func(tx *bolt.Tx) (err error) {
		r, ok, err = l.live(tx, id)
		return err
	})
	if err != nil {
		return effect.Record{}, err
	}
	if !ok {
		return effect.Record{}, fmt.Errorf("embedded: command %s: %w", id, effect.ErrNotFound)
	}
	return r, nil
}

// Transition implements effect.Log.
func (l *Effects) Transition(ctx context.Context, expect int64, next effect.Record) (effect.Record, error) {
	if err := next.Check(); err != nil {
		return effect.Record{}, fmt.Errorf("embedded: %w", err)
	}
	var got effect.Record
	var conflict bool
	err := l.db.update(ctx, func(t *txn) error {
		conflict = false
		cur, ok, err := l.live(t.tx, next.CommandID)
		switch {
		case err != nil:
			return err
		case !ok:
			return refuse(fmt.Errorf("embedded: command %s: %w", next.CommandID, effect.ErrNotFound))
		case cur.Version != expect:
			got, conflict = cur, true
			return refuse(fmt.Errorf("embedded: command %s at version %d, not %d: %w", next.CommandID, cur.Version, expect, effect.ErrConflict))
		}
		n := next
		n.Version, n.CreatedAt, n.ExpiresAt = expect+1, cur.CreatedAt, cur.ExpiresAt
		v, err := encodeEffect(n)
		if err != nil {
			return err
		}
		if err := t.bucket(bEffects).Put([]byte(n.CommandID), v); err != nil {
			return err
		}
		got, err = decodeEffect(v)
		return err
	})
	if conflict {
		return got, err
	}
	if err != nil {
		return effect.Record{}, err
	}
	return got, nil
}
