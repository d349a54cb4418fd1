// Concurrency keys: the slots of a key (SlotStore) and the status of an
// execution that waits for one (WaitingKey).

package store

import (
	"context"
	"time"
)

// WaitingKey: the execution's pipeline has a concurrency key
// (Execution.ConcurrencyKey) whose limit is reached; it waits, not
// dispatched and not claimed, until a holder of the key ends and hands it
// its slot (or the sweeper finds a slot free). Waiters are released in
// rank order (Execution.WaitRank: submission order, aged by priority).
const WaitingKey Status = "WAITING_KEY"

// SlotScope names one concurrency key: a tenant's pipeline's key value.
// Executions of different tenants or pipelines never share a key's slots.
type SlotScope struct {
	TenantID   string
	PipelineID string
	Key        string
}

// ID is the scope as one string, each part length-prefixed so that no two
// scopes collide however their parts are spelled.
func (s SlotScope) ID() string { return KeyID(s.TenantID, KeyID(s.PipelineID, s.Key)) }

// SlotScope is the scope of the execution's concurrency key (zero when it
// has none).
func (e *Execution) SlotScope() SlotScope {
	if e.ConcurrencyKey == "" {
		return SlotScope{}
	}
	return SlotScope{TenantID: e.TenantID, PipelineID: e.PipelineID, Key: e.ConcurrencyKey}
}

// SlotHolder is one holder of a key's slot: an execution, in one of its
// lives (Life is its RedriveCount when it acquired the slot: a holder
// left from a life that ended before a re-drive is told apart from the
// re-driven execution and can be evicted).
type SlotHolder struct {
	ExecutionID string
	Life        int
}

// Holder is the execution's slot holder in its current life.
func (e *Execution) Holder() SlotHolder {
	return SlotHolder{ExecutionID: e.ExecutionID, Life: e.RedriveCount}
}

// SlotStore keeps the slots of concurrency keys beside the executions:
// one record per key holding its holders (at most the limit), written
// with one conditional write per acquire and one per release, and an
// index of the executions waiting for a key (status WaitingKey), lowest
// rank (Execution.WaitRank) first, kept by the row writes themselves (a row is in it
// exactly while its status is WaitingKey and it has a ConcurrencyKey).
// Every state store keeps them (the conformance suite's concurrency file
// checks the contract).
type SlotStore interface {
	// AcquireSlot adds h to the key's holders, in one conditional write,
	// if h already holds it in the same life, or h does not hold it and
	// fewer than limit do. It reports acquired; when refused it returns
	// the key's holders as the refused write found them (the caller checks
	// them for stale ones: SlotStale). expires is the record's TTL (a live
	// record's holders are never lost to it: each write sets it).
	AcquireSlot(ctx context.Context, s SlotScope, h SlotHolder, limit int, expires time.Time) (holders []SlotHolder, acquired bool, err error)
	// ReleaseSlot removes h from the key's holders if it holds it in that
	// very life, and, when next is set, adds next in the same write (a
	// hand-over of the slot to a waiter: the count does not move, so no
	// newcomer can take it first). It reports whether h held it; false
	// means nothing was written (released before, or evicted).
	ReleaseSlot(ctx context.Context, s SlotScope, h SlotHolder, next *SlotHolder, expires time.Time) (released bool, err error)
	// Slots reads the key's holders, strongly consistent (none for a key
	// never used or whose record expired).
	Slots(ctx context.Context, s SlotScope) ([]SlotHolder, error)
	// Waiting returns up to limit of the key's waiting executions, lowest
	// rank (Execution.WaitRank) first (ties in an order of the store's choosing). It reads an index that may lag the rows a moment
	// (DynamoDB's is eventually consistent): callers read the rows they
	// act on. An entry's execution id may be a bare slot (GetBatch
	// answers it with the slot's live row).
	Waiting(ctx context.Context, s SlotScope, limit int) ([]Key, error)
}

// SlotStale reports whether holder h's slot may be taken from it, given
// its row (nil when it is gone): the row is gone, ended, or lives another
// life than h (re-driven since). A holder whose worker died keeps its
// slot: its execution is taken over and goes on. So does a WAITING_KEY
// row that holds a slot: a releaser handed it the slot and is about to
// wake it (or the sweeper will). A row paused while it waited
// (PausedFrom WaitingKey) holds none: its resume queues it to acquire
// again, so a slot handed to it as it was paused is taken back.
func SlotStale(h SlotHolder, row *Execution) bool {
	return row == nil || row.Status.Terminal() || row.RedriveCount != h.Life ||
		(row.Status == Paused && row.PausedFrom == WaitingKey)
}
