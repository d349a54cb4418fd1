package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// ExecutionSlot is the slot (store.Slot) of the executions a tenant
// submits under an idempotency key: a UUIDv8 (RFC 9562's custom version)
// made of a SHA-256 of both, length-prefixed. The same key always names
// the same slot, so the row's own key is the idempotency record: a submit
// is one conditional write of one item, and a duplicate submit finds the
// execution it means while that lives. The DynamoDB layout's tests use it
// to check how one tenant's executions spread over partitions.
func ExecutionSlot(tenantID, key string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "qasync-execution;%d:%s;%d:%s", len(tenantID), tenantID, len(key), key))
	return uuid(h[:16])
}

// uuid formats 16 bytes as a UUIDv8 (RFC 9562's custom version).
func uuid(src []byte) string {
	var b [16]byte
	copy(b[:], src)
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// newExecutionID issues the id of a new execution,
// "<slot>.<incarnation>": the slot derives from the tenant and the
// idempotency key (ExecutionSlot), or is random without a key; the
// incarnation is the create token, random for every create. It returns
// the id and the token.
func (r *Runtime) newExecutionID(tenantID, key string) (id, token string) {
	slot := ""
	if key != "" {
		slot = ExecutionSlot(tenantID, key)
	} else {
		var b [16]byte
		r.random(b[:])
		slot = uuid(b[:])
	}
	token = r.newToken()
	return slot + store.IncarnationSep + token, token
}

// newWorkerID names this process's leases: a random suffix keeps two
// processes with the same host name apart.
func newWorkerID(prefix string, rand io.Reader) string {
	var b [6]byte
	_, _ = io.ReadFull(rand, b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// newToken is a random 16-hex-digit token (a create token: the
// incarnation of an execution id).
func (r *Runtime) newToken() string {
	var b [8]byte
	r.random(b[:])
	return hex.EncodeToString(b[:])
}

// random fills b from the runtime's source of randomness (Deps.Rand).
func (r *Runtime) random(b []byte) {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	_, _ = io.ReadFull(r.deps.Rand, b)
}

// jitter spreads a backoff d over [d/2, d), drawn from Deps.Rand, so that
// retries that failed together (a throttled burst, one process's commits
// failing at one instant) do not come back together. Drawn from the
// runtime's source, it keeps a seeded simulation's timers apart and its
// runs reproducible.
func (r *Runtime) jitter(d time.Duration) time.Duration {
	half := d / 2
	if half <= 0 {
		return d
	}
	var b [8]byte
	r.random(b[:])
	return half + time.Duration(binary.BigEndian.Uint64(b[:])%uint64(half))
}
