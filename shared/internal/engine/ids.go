package engine

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// executionID derives an execution's id from its tenant and idempotency
// key: a UUIDv8 (RFC 9562's custom version) made of a SHA-256 of both,
// length-prefixed. The same key always names the same execution, so the
// row's own key is the idempotency key: a submit is one conditional write
// of one item, and a duplicate submit finds the execution it means.
func executionID(tenantID, key string) string { return ExecutionID(tenantID, key) }

// ExecutionID is the id the runtime gives the execution a tenant submits
// under an idempotency key (see executionID). The DynamoDB layout's tests
// use it to check how one tenant's executions spread over partitions.
func ExecutionID(tenantID, key string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "qasync-execution;%d:%s;%d:%s", len(tenantID), tenantID, len(key), key))
	var b [16]byte
	copy(b[:], h[:16])
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

// newWorkerID names this process's leases: a random suffix keeps two
// processes with the same host name apart.
func newWorkerID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// newToken is a random 16-hex-digit token (a submit call's CreateToken).
func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
