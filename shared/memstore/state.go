package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/execution"
	"github.com/qasync/qasync/shared/store"
)

// StateStore is the in-memory execution state store. It is safe for
// concurrent use and mirrors the DynamoDB layout: an execution map, a key
// map, and a sparse due set holding only rows with NextDueAt set.
type StateStore struct {
	clock clock.Clock

	mu   sync.Mutex
	rows map[execution.Key]*execution.Execution
	keys map[string]keyRow
	due  map[execution.Key]struct{}
}

type keyRow struct {
	key         execution.Key
	fingerprint string
	expiresAt   time.Time
}

var _ store.Store = (*StateStore)(nil)

// NewStateStore returns an empty store that reads TTL expiry from c.
func NewStateStore(c clock.Clock) *StateStore {
	return &StateStore{
		clock: c,
		rows:  map[execution.Key]*execution.Execution{},
		keys:  map[string]keyRow{},
		due:   map[execution.Key]struct{}{},
	}
}

// CreateOrGet implements store.Store.
func (s *StateStore) CreateOrGet(ctx context.Context, req store.CreateRequest) (execution.Execution, bool, error) {
	if err := ctx.Err(); err != nil {
		return execution.Execution{}, false, err
	}
	e := req.Execution
	if e.TenantID == "" || e.ExecutionID == "" || req.IdempotencyKey == "" {
		return execution.Execution{}, false, fmt.Errorf("memstore: create needs tenant, execution id and idempotency key")
	}
	now := s.clock.Now()
	kid := store.KeyID(e.TenantID, req.IdempotencyKey)
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[kid]; ok && !expired(k.expiresAt, now) {
		if k.fingerprint != req.Fingerprint {
			return execution.Execution{}, false, store.ErrKeyMismatch
		}
		if row := s.live(k.key, now); row != nil {
			return clone(*row), false, nil
		}
	}
	if row := s.live(e.Key(), now); row != nil {
		return execution.Execution{}, false, fmt.Errorf("memstore: execution %s exists: %w", e.Key(), store.ErrConflict)
	}
	row := clone(e)
	s.rows[e.Key()] = &row
	s.keys[kid] = keyRow{key: e.Key(), fingerprint: req.Fingerprint, expiresAt: e.ExpiresAt}
	s.index(&row)
	return clone(row), true, nil
}

// Get implements store.Store.
func (s *StateStore) Get(ctx context.Context, key execution.Key) (execution.Execution, error) {
	if err := ctx.Err(); err != nil {
		return execution.Execution{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.live(key, s.clock.Now())
	if row == nil {
		return execution.Execution{}, store.ErrNotFound
	}
	return clone(*row), nil
}

// Claim implements store.Store.
func (s *StateStore) Claim(ctx context.Context, req store.ClaimRequest) (execution.Execution, error) {
	if err := ctx.Err(); err != nil {
		return execution.Execution{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.live(req.Key, s.clock.Now())
	if row == nil {
		return execution.Execution{}, store.ErrNotFound
	}
	leased := row.LeaseOwner != "" && row.LeaseExpiresAt.After(req.Now)
	if row.Version != req.ExpectVersion || !row.Status.Claimable() || leased || !row.Due(req.Now) {
		return execution.Execution{}, store.ErrConflict
	}
	row.Status = execution.Running
	row.LeaseOwner = req.Owner
	row.LeaseExpiresAt = req.LeaseUntil
	row.NextDueAt = req.LeaseUntil
	row.Attempt = req.Attempt
	row.Version++
	row.UpdatedAt = req.Now
	s.index(row)
	return clone(*row), nil
}

// Renew implements store.Store.
func (s *StateStore) Renew(ctx context.Context, key execution.Key, owner string, version int64, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.live(key, s.clock.Now())
	if row == nil || row.Status != execution.Running || row.LeaseOwner != owner || row.Version != version {
		return store.ErrLeaseLost
	}
	row.LeaseExpiresAt = until
	row.NextDueAt = until
	s.index(row)
	return nil
}

// Update implements store.Store.
func (s *StateStore) Update(ctx context.Context, g store.Guard, next execution.Execution) (execution.Execution, error) {
	if err := ctx.Err(); err != nil {
		return execution.Execution{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.live(g.Key, s.clock.Now())
	if row == nil {
		return execution.Execution{}, store.ErrNotFound
	}
	if row.Version != g.Version || row.LeaseOwner != g.LeaseOwner {
		if g.LeaseOwner != "" {
			return execution.Execution{}, store.ErrLeaseLost
		}
		return execution.Execution{}, store.ErrConflict
	}
	updated := clone(next)
	updated.TenantID, updated.ExecutionID, updated.PipelineID = row.TenantID, row.ExecutionID, row.PipelineID
	updated.IdempotencyKey, updated.Input = row.IdempotencyKey, row.Input
	updated.CreatedAt, updated.ExpiresAt = row.CreatedAt, row.ExpiresAt
	updated.Version = g.Version + 1
	*row = updated
	s.index(row)
	return clone(*row), nil
}

// Due implements store.Store.
func (s *StateStore) Due(ctx context.Context, dueBy time.Time, limit int) ([]store.DueRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	var refs []store.DueRef
	for k := range s.due {
		row := s.live(k, now)
		if row == nil || !row.Due(dueBy) {
			continue
		}
		refs = append(refs, store.DueRef{Key: k, PipelineID: row.PipelineID, Status: row.Status, NextDueAt: row.NextDueAt, DLQPending: row.DLQPending})
	}
	s.mu.Unlock()
	sort.Slice(refs, func(i, j int) bool {
		if !refs[i].NextDueAt.Equal(refs[j].NextDueAt) {
			return refs[i].NextDueAt.Before(refs[j].NextDueAt)
		}
		return refs[i].Key.String() < refs[j].Key.String()
	})
	if limit >= 0 && len(refs) > limit {
		refs = refs[:limit]
	}
	return refs, nil
}

// live returns the unexpired row for key, dropping an expired one as
// DynamoDB's TTL sweeper eventually would. Callers hold s.mu.
func (s *StateStore) live(key execution.Key, now time.Time) *execution.Execution {
	row, ok := s.rows[key]
	if !ok {
		return nil
	}
	if row.Expired(now) {
		delete(s.rows, key)
		delete(s.due, key)
		return nil
	}
	return row
}

// index keeps the sparse due set in step with the row. Callers hold s.mu.
func (s *StateStore) index(row *execution.Execution) {
	if row.NextDueAt.IsZero() {
		delete(s.due, row.Key())
	} else {
		s.due[row.Key()] = struct{}{}
	}
}

// clone copies a row so that callers and the store never share memory.
func clone(e execution.Execution) execution.Execution {
	if e.Error != nil {
		f := *e.Error
		e.Error = &f
	}
	e.Input.Inline = cloneBytes(e.Input.Inline)
	e.Result.Inline = cloneBytes(e.Result.Inline)
	if e.Await != nil {
		a := *e.Await
		a.LatePayload.Inline = cloneBytes(a.LatePayload.Inline)
		e.Await = &a
	}
	return e
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func expired(at, now time.Time) bool { return !at.IsZero() && !now.Before(at) }
