package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// An execution's history is recorded in the same transaction as each
// write of its row: the events history.Derive(old, new) gives for the
// write, under the row's key, its new version and each event's position
// (Index), so that they read back in commit order and history.Number
// numbers them as every provider does. Nothing else writes them, and a
// renewal or a reschedule (which do not move the version) records nothing.

var _ history.Reader = (*State)(nil)

// eventRec is the stored form of an event (its Index is in its key, its
// Seq is given when read).
type eventRec struct {
	T  history.Type   `json:"t"`
	At int64          `json:"at"`
	SI int            `json:"si"`
	SN string         `json:"sn,omitempty"`
	A  int            `json:"a,omitempty"`
	S  store.Status   `json:"s,omitempty"`
	Er *store.Failure `json:"er,omitempty"`
	RA int64          `json:"ra,omitempty"`
	WA int64          `json:"wa,omitempty"`
	W  string         `json:"w,omitempty"`
	R  string         `json:"r,omitempty"`
	V  int64          `json:"v"`
}

// record writes the events of the write old -> next.
func (t *txn) record(k []byte, old, next *store.Execution) error {
	events := history.Derive(old, next)
	if len(events) == 0 {
		return nil
	}
	if err := t.outbox(next, events); err != nil {
		return err
	}
	b := t.bucket(bHist)
	for _, ev := range events {
		v, err := sealJSON(eventRec{T: ev.Type, At: ms(ev.At), SI: ev.StepIndex, SN: ev.StepName, A: ev.Attempt, S: ev.Status,
			Er: ev.Error, RA: ms(ev.RetryAt), WA: ms(ev.WakeAt), W: ev.Worker, R: ev.Reason, V: ev.Version})
		if err != nil {
			return err
		}
		if err := b.Put(histKey(k, ev.Version, ev.Index), v); err != nil {
			return err
		}
	}
	return nil
}

// dropHistory deletes every event of the execution at k.
func (t *txn) dropHistory(k []byte) error {
	c := t.bucket(bHist).Cursor()
	for hk, _ := c.Seek(k); hk != nil && bytes.HasPrefix(hk, k) && len(hk) == len(k)+10; hk, _ = c.Seek(k) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// History implements history.Reader: the execution's events in commit
// order (their keys' order: version, then index), numbered from 1 by
// history.Number. An unknown or expired execution (another
// tenant's id included: the key holds the tenant) is store.ErrNotFound.
func (s *State) History(ctx context.Context, key store.Key) ([]history.Event, error) {
	k := execKey(key)
	var out []history.Event
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		if _, ok, err := s.liveAs(tx, key, s.clock.Now(), true); err != nil {
			return err
		} else if !ok {
			return store.ErrNotFound
		}
		c := tx.Bucket(bHist).Cursor()
		for hk, v := c.Seek(k); hk != nil && bytes.HasPrefix(hk, k); hk, v = c.Next() {
			if len(hk) != len(k)+10 {
				continue // another execution whose key k prefixes (cannot happen: keys are length-prefixed)
			}
			var r eventRec
			if err := openJSON(v, &r, fmt.Sprintf("history event %x", hk)); err != nil {
				return err
			}
			out = append(out, history.Event{Type: r.T, At: fromMs(r.At), StepIndex: r.SI, StepName: r.SN,
				Attempt: r.A, Status: r.S, Error: r.Er, RetryAt: fromMs(r.RA), WakeAt: fromMs(r.WA), Worker: r.W, Reason: r.R, Version: r.V,
				Index: int(binary.BigEndian.Uint16(hk[len(k)+8:]))}) // the event's position, from its key
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return history.Number(out), nil
}
