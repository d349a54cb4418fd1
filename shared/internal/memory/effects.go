package memory

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
)

// Effects is the in-memory effect.Log. It is safe for concurrent use,
// copies records in and out, and judges expiry by its clock: an expired
// record reads as effect.ErrNotFound and may be created again. Like the
// other memory providers it is not durable: a restart forgets every
// command, so a command step may dispatch again after one.
type Effects struct {
	clock clock.Clock

	mu      sync.Mutex
	records map[string]effect.Record
	reap    reaper
}

var _ effect.Log = (*Effects)(nil)

// NewEffects returns an empty log reading time from c (nil: the system
// clock).
func NewEffects(c clock.Clock) *Effects {
	if c == nil {
		c = clock.System{}
	}
	return &Effects{clock: c, records: make(map[string]effect.Record)}
}

// live returns the stored record with id unless it is missing or expired
// (an expired one is dropped). Call with mu held.
func (l *Effects) live(id string) (effect.Record, bool) {
	r, ok := l.records[id]
	if ok && expired(r.ExpiresAt, l.clock.Now()) {
		delete(l.records, id)
		ok = false
	}
	return r, ok
}

// CreateOrGet implements effect.Log.
func (l *Effects) CreateOrGet(ctx context.Context, r effect.Record) (effect.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return effect.Record{}, false, err
	}
	if err := r.Check(); err != nil {
		return effect.Record{}, false, fmt.Errorf("memory: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.live(r.CommandID); ok {
		if !old.ExpiresAt.IsZero() && r.ExpiresAt.After(old.ExpiresAt) {
			old.ExpiresAt = r.ExpiresAt
			l.records[old.CommandID] = old
		}
		return copyEffect(old), false, nil
	}
	if l.reap.due() {
		now := l.clock.Now()
		maps.DeleteFunc(l.records, func(_ string, q effect.Record) bool { return expired(q.ExpiresAt, now) })
	}
	r.Version = 1
	r = copyEffect(r)
	l.records[r.CommandID] = r
	return copyEffect(r), true, nil
}

// Get implements effect.Log.
func (l *Effects) Get(ctx context.Context, id string) (effect.Record, error) {
	if err := ctx.Err(); err != nil {
		return effect.Record{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.live(id)
	if !ok {
		return effect.Record{}, fmt.Errorf("memory: command %s: %w", id, effect.ErrNotFound)
	}
	return copyEffect(r), nil
}

// Transition implements effect.Log.
func (l *Effects) Transition(ctx context.Context, expect int64, next effect.Record) (effect.Record, error) {
	if err := ctx.Err(); err != nil {
		return effect.Record{}, err
	}
	if err := next.Check(); err != nil {
		return effect.Record{}, fmt.Errorf("memory: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, ok := l.live(next.CommandID)
	if !ok {
		return effect.Record{}, fmt.Errorf("memory: command %s: %w", next.CommandID, effect.ErrNotFound)
	}
	if cur.Version != expect {
		return copyEffect(cur), fmt.Errorf("memory: command %s at version %d, not %d: %w", next.CommandID, cur.Version, expect, effect.ErrConflict)
	}
	next.Version, next.CreatedAt, next.ExpiresAt = expect+1, cur.CreatedAt, cur.ExpiresAt
	next = copyEffect(next)
	l.records[next.CommandID] = next
	return copyEffect(next), nil
}

// copyEffect returns r with its own output bytes and error.
func copyEffect(r effect.Record) effect.Record {
	r.Output.Data = bytes.Clone(r.Output.Data)
	if r.Error != nil {
		f := *r.Error
		r.Error = &f
	}
	return r
}
