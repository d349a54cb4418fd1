package console

// Sign-out across instances. A session cookie is stateless (an expiry, a
// random session id and their HMAC keyed by the admin token), so every
// console instance accepts it without a read; what a sign-out must reach
// is every instance, so it leaves a revocation of the session id in a
// store they all read. The cheapest durable store every deployment
// already has for this is the state store's job store (store.JobStore:
// memory, embedded, DynamoDB): a put-if-absent record with an expiry,
// read with a strongly consistent single-item read, outside every index
// (on DynamoDB an item of the execution table that no query or scan of
// the executions meets). A revocation is kept until the session's expiry
// (the cookie is refused after it anyway) and then dropped by the store's
// expiry. Cost: a request whose cookie carries a valid session reads one
// record (on DynamoDB one strongly consistent GetItem, 1 read unit),
// once per request; a request without a session reads nothing; a
// sign-out writes one record.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// Revocations keep the operator sessions that were signed out, so that
// no console instance sharing them accepts those sessions again.
type Revocations interface {
	// Revoke records that session id ended; the record may be dropped
	// after until (the session's own expiry). Revoking twice is not an
	// error.
	Revoke(ctx context.Context, id string, until time.Time) error
	// Revoked reports whether session id was revoked.
	Revoked(ctx context.Context, id string) (bool, error)
}

// revocationTenant is the job store tenant of session revocations. It
// holds a ':', which no tenant id may (httpapi.ValidTenantID), so no
// tenant's job shares a key with a revocation, and no tenant's job route
// reads one.
const revocationTenant = "console:sessions"

// revocationGrace keeps a revocation a little past its session's expiry,
// for instances whose clocks run behind.
const revocationGrace = time.Minute

// StoreRevocations keeps revocations in js (the state store's job store),
// shared by every console instance of the deployment: a revocation is a
// job record that is never active (no driver ever sees it), keyed by a
// hash of the session id. now is the clock of the records' times.
func StoreRevocations(js store.JobStore, now func() time.Time) Revocations {
	if js == nil {
		panic("console: StoreRevocations: nil job store")
	}
	if now == nil {
		now = time.Now
	}
	return storeRevocations{js: js, now: now}
}

type storeRevocations struct {
	js  store.JobStore
	now func() time.Time
}

// revocationKey is the record of session id: a hash, so that the store
// never holds a session's id itself.
func revocationKey(id string) store.JobKey {
	h := sha256.Sum256([]byte("qasync console session revocation\n" + id))
	return store.JobKey{TenantID: revocationTenant, ID: "revoked-" + hex.EncodeToString(h[:16])}
}

// revocationState is a revocation record's State: the job store keeps a
// document per record; this one says what the record is.
var revocationState = []byte(`{"kind":"console-session-revoked"}`)

// Revoke implements Revocations.
func (s storeRevocations) Revoke(ctx context.Context, id string, until time.Time) error {
	now := s.now()
	err := s.js.CreateJob(ctx, store.Job{Key: revocationKey(id), State: revocationState,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: until.Add(revocationGrace)})
	if errors.Is(err, store.ErrConflict) {
		return nil // revoked already
	}
	if err != nil {
		return fmt.Errorf("console: revoke session: %w", err)
	}
	return nil
}

// Revoked implements Revocations.
func (s storeRevocations) Revoked(ctx context.Context, id string) (bool, error) {
	_, err := s.js.GetJob(ctx, revocationKey(id))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("console: read session revocation: %w", err)
}

// LocalRevocations keeps revocations in this process only: the default
// of a console given no Revocations (a test, a single process). A
// deployment of several instances needs StoreRevocations, which Site
// sets up.
func LocalRevocations(now func() time.Time) Revocations {
	if now == nil {
		now = time.Now
	}
	return &localRevocations{now: now, until: map[string]time.Time{}}
}

type localRevocations struct {
	now   func() time.Time
	mu    sync.Mutex
	until map[string]time.Time
}

// Revoke implements Revocations, dropping the revocations that expired.
func (l *localRevocations) Revoke(_ context.Context, id string, until time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for k, u := range l.until {
		if !now.Before(u) {
			delete(l.until, k)
		}
	}
	l.until[id] = until.Add(revocationGrace)
	return nil
}

// Revoked implements Revocations.
func (l *localRevocations) Revoked(_ context.Context, id string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.until[id]
	return ok && l.now().Before(u), nil
}
