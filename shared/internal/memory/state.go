package memory

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// StateStore is the in-memory execution state store. It is safe for
// concurrent use and mirrors the DynamoDB layout: one row per slot (the
// execution id's slot: store.Slot), and a sparse sweep set holding only
// rows with SweepAt set. It is
// also the history reader of its executions: every write that commits a
// new row version records the events history.Derive gives for it, under
// the same lock, so a history is never behind its row.
type StateStore struct {
	clock clock.Clock

	mu   sync.Mutex
	rows map[store.Key]*store.Execution
	due  map[store.Key]struct{}
	hist map[store.Key][]history.Event
	jobs memJobs
	maps map[mapRecKey]*mapRec
	reap reaper
	// slots and wait are the concurrency keys' records and the set of
	// waiting rows (concurrency.go).
	slots map[string]*slotRec
	wait  map[store.Key]struct{}
	// rates are the rate limits' buckets: a bucket's theoretical arrival
	// time by scope id (ratelimit.go).
	rates map[string]time.Time
	// rateReap counts new reservations between passes over rates.
	rateReap reaper
	// box is the lifecycle events' outbox (outbox.go).
	box memOutbox
}

var (
	_ store.Store    = (*StateStore)(nil)
	_ history.Reader = (*StateStore)(nil)
)

// NewStateStore returns an empty store that reads TTL expiry from c.
func NewStateStore(c clock.Clock) *StateStore {
	return &StateStore{
		clock: c,
		rows:  map[store.Key]*store.Execution{},
		due:   map[store.Key]struct{}{},
		hist:  map[store.Key][]history.Event{},
		jobs:  memJobs{jobs: map[store.JobKey]*store.Job{}, pages: map[jobPageKey]jobPage{}},
		maps:  map[mapRecKey]*mapRec{},
		slots: map[string]*slotRec{},
		wait:  map[store.Key]struct{}{},
		rates: map[string]time.Time{},
	}
}

// CreateOrGet implements store.Store.
func (s *StateStore) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Execution{}, false, err
	}
	e := req.Execution
	if e.TenantID == "" || e.ExecutionID == "" {
		return store.Execution{}, false, fmt.Errorf("memory: create needs tenant and execution id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := slotKey(e.Key())
	if row := s.live(k, s.clock.Now()); row != nil {
		if row.Fingerprint != e.Fingerprint {
			return store.Execution{}, false, store.ErrKeyMismatch
		}
		return clone(*row), row.CreateToken != "" && row.CreateToken == e.CreateToken, nil
	}
	if s.reap.due() {
		now := s.clock.Now()
		for key := range s.rows {
			s.live(key, now)
		}
		for key, r := range s.maps {
			if expired(r.expires, now) {
				delete(s.maps, key)
			}
		}
	}
	row := clone(e)
	s.rows[k] = &row
	s.index(&row)
	s.hist[k] = history.Derive(nil, &row)
	s.box.add(&row, s.hist[k])
	return clone(row), true, nil
}

// Get implements store.Store.
func (s *StateStore) Get(ctx context.Context, key store.Key) (store.Execution, error) {
	if err := ctx.Err(); err != nil {
		return store.Execution{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.read(key, s.clock.Now())
	if row == nil {
		return store.Execution{}, store.ErrNotFound
	}
	return clone(*row), nil
}

// GetBatch implements store.Store.
func (s *StateStore) GetBatch(ctx context.Context, keys []store.Key) ([]store.Execution, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := make([]store.Execution, 0, len(keys))
	for _, k := range keys {
		if row := s.read(k, now); row != nil {
			out = append(out, clone(*row))
		}
	}
	return out, nil
}

// Claim implements store.Store.
func (s *StateStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	if err := ctx.Err(); err != nil {
		return store.Execution{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.exact(req.Key, s.clock.Now())
	if row == nil {
		return store.Execution{}, store.ErrNotFound
	}
	if row.Version != req.ExpectVersion || !store.Claimable(row, req.DueBy, req.TakeoverBy) {
		return store.Execution{}, store.ErrConflict
	}
	old := *row
	row.Status = store.Running
	row.LeaseOwner = req.Owner
	row.LeaseExpiresAt = req.LeaseUntil
	row.Attempt = req.Attempt
	row.Releases = req.Releases
	if !req.SweepAt.IsZero() {
		row.SweepAt, row.Sweeps = req.SweepAt, 0
	}
	row.Version++
	row.UpdatedAt = req.Now
	s.record(&old, row)
	return clone(*row), nil
}

// Renew implements store.Store.
func (s *StateStore) Renew(ctx context.Context, key store.Key, owner string, version int64, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.exact(key, s.clock.Now())
	if row == nil || row.Status != store.Running || row.LeaseOwner != owner || row.Version != version {
		return store.ErrLeaseLost
	}
	row.LeaseExpiresAt = until
	return nil
}

// Update implements store.Store.
func (s *StateStore) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	if err := ctx.Err(); err != nil {
		return store.Execution{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.exact(g.Key, s.clock.Now())
	if row == nil {
		return store.Execution{}, store.ErrNotFound
	}
	if row.Version != g.Version || row.LeaseOwner != g.LeaseOwner {
		if g.LeaseOwner != "" {
			return store.Execution{}, store.ErrLeaseLost
		}
		return store.Execution{}, store.ErrConflict
	}
	updated := clone(next)
	updated.TenantID, updated.ExecutionID, updated.PipelineID = row.TenantID, row.ExecutionID, row.PipelineID
	updated.PipelineVersion, updated.IdempotencyKey, updated.Input = row.PipelineVersion, row.IdempotencyKey, row.Input
	updated.Fingerprint, updated.CreateToken = row.Fingerprint, row.CreateToken
	updated.CreatedAt, updated.Parent, updated.ConcurrencyKey = row.CreatedAt, row.Parent, row.ConcurrencyKey
	updated.RateLimit, updated.RateKey = row.RateLimit, row.RateKey
	updated.Priority, updated.Rank = row.Priority, row.Rank
	if updated.ExpiresAt.IsZero() {
		updated.ExpiresAt = row.ExpiresAt
	}
	if g.KeepSweep {
		updated.SweepAt, updated.Sweeps = row.SweepAt, row.Sweeps
	}
	updated.Version = g.Version + 1
	old := *row
	*row = updated
	s.index(row)
	s.record(&old, row)
	return clone(*row), nil
}

// Reschedule implements store.Store.
func (s *StateStore) Reschedule(ctx context.Context, key store.Key, from, to time.Time, sweeps int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.exact(key, s.clock.Now())
	if row == nil {
		return store.ErrNotFound
	}
	if row.SweepAt.UnixMilli() != from.UnixMilli() || row.SweepAt.IsZero() != from.IsZero() {
		return store.ErrConflict
	}
	row.SweepAt, row.Sweeps = to, sweeps
	s.index(row)
	return nil
}

// Due implements store.Store.
func (s *StateStore) Due(ctx context.Context, q store.DueQuery) (store.DuePage, error) {
	if err := ctx.Err(); err != nil {
		return store.DuePage{}, err
	}
	after, err := decodeCursor(q.Cursor)
	if err != nil {
		return store.DuePage{}, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	var refs []store.DueRef
	for k := range s.due {
		row := s.live(k, now)
		if row == nil || row.SweepAt.IsZero() || row.SweepAt.After(q.By) {
			continue
		}
		ref := store.DueRef{Key: row.Key(), PipelineID: row.PipelineID, SweepAt: row.SweepAt}
		if after != nil && !dueLess(*after, ref) {
			continue
		}
		refs = append(refs, ref)
	}
	s.mu.Unlock()
	sort.Slice(refs, func(i, j int) bool { return dueLess(refs[i], refs[j]) })
	limit := max(q.Limit, 1)
	if len(refs) <= limit {
		return store.DuePage{Refs: refs}, nil
	}
	refs = refs[:limit]
	return store.DuePage{Refs: refs, Cursor: encodeCursor(refs[len(refs)-1])}, nil
}

// dueLess orders the sweep index: oldest SweepAt first, then by key.
func dueLess(a, b store.DueRef) bool {
	if a.SweepAt.UnixMilli() != b.SweepAt.UnixMilli() {
		return a.SweepAt.UnixMilli() < b.SweepAt.UnixMilli()
	}
	return a.Key.String() < b.Key.String()
}

// encodeCursor and decodeCursor carry the last ref of a page.
func encodeCursor(r store.DueRef) string {
	b, _ := json.Marshal(cursor{At: r.SweepAt.UnixMilli(), Key: r.Key}) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

type cursor struct {
	At  int64     `json:"at"`
	Key store.Key `json:"key"`
}

func decodeCursor(s string) (*store.DueRef, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c cursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return nil, fmt.Errorf("memory: invalid due cursor")
	}
	return &store.DueRef{Key: c.Key, SweepAt: time.UnixMilli(c.At)}, nil
}

// History implements history.Reader: the events recorded for the
// execution's writes, numbered. An unknown or expired execution (or
// another tenant's key) is store.ErrNotFound.
func (s *StateStore) History(ctx context.Context, key store.Key) ([]history.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exact(key, s.clock.Now()) == nil {
		return nil, store.ErrNotFound
	}
	return history.Number(s.hist[slotKey(key)]), nil
}

// record appends the events of the write that turned old into row.
// Callers hold s.mu. (Renew and Reschedule leave the version alone, so
// they yield no event and do not call it.)
func (s *StateStore) record(old, row *store.Execution) {
	if evs := history.Derive(old, row); len(evs) > 0 {
		k := slotKey(row.Key())
		s.hist[k] = append(s.hist[k], evs...)
		s.box.add(row, evs)
	}
}

// slotKey is where the rows of key's slot live in the maps.
func slotKey(k store.Key) store.Key {
	return store.Key{TenantID: k.TenantID, ExecutionID: store.Slot(k.ExecutionID)}
}

// read returns the unexpired row a read of key finds (store.Answers: its
// very id, or any incarnation for a bare slot). Callers hold s.mu.
func (s *StateStore) read(key store.Key, now time.Time) *store.Execution {
	row := s.live(slotKey(key), now)
	if row == nil || !store.Answers(key.ExecutionID, row.ExecutionID) {
		return nil
	}
	return row
}

// exact returns the unexpired row with key's very id (a write's). Callers
// hold s.mu.
func (s *StateStore) exact(key store.Key, now time.Time) *store.Execution {
	row := s.live(slotKey(key), now)
	if row == nil || row.ExecutionID != key.ExecutionID {
		return nil
	}
	return row
}

// live returns the unexpired row of the slot key k, dropping an expired
// one as DynamoDB's TTL sweeper eventually would. Callers hold s.mu.
func (s *StateStore) live(key store.Key, now time.Time) *store.Execution {
	row, ok := s.rows[key]
	if !ok {
		return nil
	}
	if row.Expired(now) {
		delete(s.rows, key)
		delete(s.due, key)
		delete(s.wait, key)
		delete(s.hist, key)
		return nil
	}
	return row
}

// index keeps the sparse sweep set in step with the row. Callers hold s.mu.
func (s *StateStore) index(row *store.Execution) {
	if row.SweepAt.IsZero() {
		delete(s.due, slotKey(row.Key()))
	} else {
		s.due[slotKey(row.Key())] = struct{}{}
	}
	if waiting(row) {
		s.wait[slotKey(row.Key())] = struct{}{}
	} else {
		delete(s.wait, slotKey(row.Key()))
	}
}

// clone copies a row so that callers and the store never share memory.
func clone(e store.Execution) store.Execution {
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
	if e.Parent != nil {
		p := *e.Parent
		e.Parent = &p
	}
	if e.Children != nil {
		c := *e.Children
		if c.Prior != nil {
			pr := *c.Prior
			pr.Inline = cloneBytes(pr.Inline)
			c.Prior = &pr
		}
		e.Children = &c
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

// reapEvery is how many new entries a store takes between two passes that
// drop its expired ones, as DynamoDB's TTL and the embedded janitor do:
// reads already treat them as absent, and the passes keep a long-running
// process's memory to what is live rather than all it ever stored. A pass
// costs one look at every entry, once per reapEvery writes.
const reapEvery = 1024

// reaper counts a store's new entries and says when a pass is due.
type reaper struct{ n int }

func (r *reaper) due() bool {
	r.n++
	return r.n%reapEvery == 0
}
