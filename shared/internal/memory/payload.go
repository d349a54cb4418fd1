package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/payload"
)

// PayloadStore is the in-memory payload.Store. It is safe for concurrent
// use, copies bytes in and out, and judges expiry by its clock: an expired
// part reads as payload.ErrNotFound and may be overwritten.
type PayloadStore struct {
	clock clock.Clock

	mu    sync.Mutex
	parts map[partKey]payload.Part
	reap  reaper
}

// partKey is a part's (payload_id, payload_part) primary key.
type partKey struct{ payloadID, name string }

// NewPayloadStore returns an empty PayloadStore reading time from c.
func NewPayloadStore(c clock.Clock) *PayloadStore {
	return &PayloadStore{clock: c, parts: make(map[partKey]payload.Part)}
}

// PutPart implements payload.Store. Re-putting identical bytes is accepted
// and keeps the stored expiry; different bytes return payload.ErrConflict
// unless the stored part has expired.
func (s *PayloadStore) PutPart(ctx context.Context, p payload.Part) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.PayloadID == "" || p.Name == "" {
		return errors.New("memory: a part needs a payload id and a name")
	}
	now := s.clock.Now()
	k := partKey{p.PayloadID, p.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.parts[k]; ok && !expired(old.ExpiresAt, now) {
		if bytes.Equal(old.Data, p.Data) {
			return nil
		}
		return fmt.Errorf("memory: put %s %s: %w", p.PayloadID, p.Name, payload.ErrConflict)
	}
	if s.reap.due() {
		maps.DeleteFunc(s.parts, func(_ partKey, q payload.Part) bool { return expired(q.ExpiresAt, now) })
	}
	p.Data = bytes.Clone(p.Data)
	s.parts[k] = p
	return nil
}

// GetPart implements payload.Store.
func (s *PayloadStore) GetPart(ctx context.Context, payloadID, name string) (payload.Part, error) {
	if err := ctx.Err(); err != nil {
		return payload.Part{}, err
	}
	now := s.clock.Now()
	k := partKey{payloadID, name}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.parts[k]
	if ok && expired(p.ExpiresAt, now) {
		delete(s.parts, k)
		ok = false
	}
	if !ok {
		return payload.Part{}, fmt.Errorf("memory: get %s %s: %w", payloadID, name, payload.ErrNotFound)
	}
	p.Data = bytes.Clone(p.Data)
	return p, nil
}

// ExtendPart implements payload.Store.
func (s *PayloadStore) ExtendPart(ctx context.Context, payloadID, name string, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := partKey{payloadID, name}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.parts[k]
	if !ok || expired(p.ExpiresAt, s.clock.Now()) {
		return fmt.Errorf("memory: extend %s %s: %w", payloadID, name, payload.ErrNotFound)
	}
	if !p.ExpiresAt.IsZero() && until.After(p.ExpiresAt) {
		p.ExpiresAt = until
		s.parts[k] = p
	}
	return nil
}

// DeletePart implements payload.Store.
func (s *PayloadStore) DeletePart(ctx context.Context, payloadID, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.parts, partKey{payloadID, name})
	return nil
}

// LiveParts counts the parts the store holds that have not expired by
// its clock (the simulator checks that a refused request stores nothing).
func (s *PayloadStore) LiveParts() int {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.parts {
		if !expired(p.ExpiresAt, now) {
			n++
		}
	}
	return n
}
