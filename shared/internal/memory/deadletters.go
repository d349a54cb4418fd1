package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
)

// DeadLetters is the in-memory deadletter.Recorder. It is safe for
// concurrent use, copies records in and out (the envelope included), and
// judges expiry by its clock: an expired record reads as
// deadletter.ErrNotFound and may be recorded again.
type DeadLetters struct {
	clock clock.Clock

	mu      sync.Mutex
	records map[string]deadletter.Record
	reap    reaper
}

var _ deadletter.Recorder = (*DeadLetters)(nil)

// NewDeadLetters returns an empty DeadLetters reading time from c (nil:
// the system clock).
func NewDeadLetters(c clock.Clock) *DeadLetters {
	if c == nil {
		c = clock.System{}
	}
	return &DeadLetters{clock: c, records: make(map[string]deadletter.Record)}
}

// Put implements deadletter.Recorder: it stores r unless a live record
// with r.ID exists, and reports whether it did.
func (d *DeadLetters) Put(ctx context.Context, r deadletter.Record) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if r.ID == "" {
		return false, errors.New("memory: a dead-letter record needs an id")
	}
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.records[r.ID]; ok && !expired(old.ExpiresAt, now) {
		return false, nil
	}
	if d.reap.due() {
		maps.DeleteFunc(d.records, func(_ string, q deadletter.Record) bool { return expired(q.ExpiresAt, now) })
	}
	d.records[r.ID] = copyRecord(r)
	return true, nil
}

// Get implements deadletter.Recorder.
func (d *DeadLetters) Get(ctx context.Context, id string) (deadletter.Record, error) {
	if err := ctx.Err(); err != nil {
		return deadletter.Record{}, err
	}
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.records[id]
	if ok && expired(r.ExpiresAt, now) {
		delete(d.records, id)
		ok = false
	}
	if !ok {
		return deadletter.Record{}, fmt.Errorf("memory: dead letter %s: %w", id, deadletter.ErrNotFound)
	}
	return copyRecord(r), nil
}

// copyRecord returns r with its own copy of the envelope.
func copyRecord(r deadletter.Record) deadletter.Record {
	if r.Envelope != nil {
		env := *r.Envelope
		r.Envelope = &env
	}
	return r
}

var _ deadletter.Lister = (*DeadLetters)(nil)

// List implements deadletter.Lister: the tenant's live execution records,
// newest first (RecordedAt to the millisecond, then ID, descending).
func (d *DeadLetters) List(ctx context.Context, q deadletter.ListQuery) (deadletter.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return deadletter.ListPage{}, err
	}
	if err := q.Validate(); err != nil {
		return deadletter.ListPage{}, err
	}
	var after *listPos
	if q.Cursor != "" {
		var err error
		if after, err = decodeListCursor(q.Cursor, q.Fingerprint()); err != nil {
			return deadletter.ListPage{}, fmt.Errorf("memory: %w", deadletter.ErrInvalidCursor)
		}
	}
	now := d.clock.Now()
	d.mu.Lock()
	var out []deadletter.Record
	for id, r := range d.records {
		if expired(r.ExpiresAt, now) {
			delete(d.records, id)
			continue
		}
		if q.Matches(r) && (after == nil || listLess(*after, listPos{r.RecordedAt.UnixMilli(), r.ID})) {
			out = append(out, copyRecord(r))
		}
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return listLess(listPos{out[i].RecordedAt.UnixMilli(), out[i].ID}, listPos{out[j].RecordedAt.UnixMilli(), out[j].ID})
	})
	limit := q.PageSize()
	if len(out) <= limit {
		return deadletter.ListPage{Records: out}, nil
	}
	out = out[:limit]
	last := out[len(out)-1]
	return deadletter.ListPage{Records: out, Cursor: encodeListCursor(q.Fingerprint(), listPos{last.RecordedAt.UnixMilli(), last.ID})}, nil
}
