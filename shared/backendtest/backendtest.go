// Package backendtest is the conformance suite of qasync's backend seams:
// the state store (store.Store), the chunk store (payload.Store), the
// effect log (effect.Log), the work dispatcher (dispatch.Dispatcher), the
// dead-letter publisher and recorder (deadletter.Publisher,
// deadletter.Recorder), the item reject publisher (reject.Publisher) and
// the object store (ObjectStore) and the history reader (history.Reader,
// through lifecycles the real engine runs on the provider's state store).
// The suites check, through the seam
// interfaces only, what the runtime relies on: a backend that passes the
// suites of the seams it implements can be wired in.
//
// A provider (a group of backends on one service: in-memory, DynamoDB,
// SQS, ...) has one conformance test that lists its adapters in a
// Provider and calls Exercise:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Exercise(t, backendtest.Provider{
//			State:    func(t *testing.T, c clock.Clock) store.Store { return mystore.NewState(c) },
//			Payloads: func(t *testing.T) payload.Store { return mystore.NewPayloads(clock.System{}) },
//			Effects:  func(t *testing.T, c clock.Clock) effect.Log { return mystore.NewEffects(c) },
//			Dispatcher: func(t *testing.T, h dispatch.Handler) dispatch.Dispatcher {
//				d := myqueue.NewDispatcher(h)
//				t.Cleanup(func() { d.Close(context.Background()) })
//				return d
//			},
//		})
//	}
//
// Exercise runs one subtest per listed seam (named as the Provider field:
// State, Payloads, ...), each holding that seam's cases, so
// "go test -run 'TestConformance/State/ClaimRefusals'" runs one case.
// Seams and cases run in parallel: a factory is called once per case, may
// be called concurrently, and may hand out backends sharing one table or
// queue as long as the field's documentation allows it. The suites use
// only the seam interfaces (and payload.Write and payload.Read), never a
// backend's own types.
package backendtest

import (
	"context"
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// Provider lists the adapters of one provider, one factory per seam. A
// nil factory means the provider does not implement that seam: its suite
// is not run. Each factory is called once per case with that case's t
// (register cleanup on it) and must return a backend ready for use. Each
// field says what its suite checks; the seam's interface documents the
// same contract in full.
type Provider struct {
	// State returns a state store whose TTL expiry follows c, a fake
	// clock the case advances. To pass: CreateOrGet creates one row per
	// (tenant, idempotency key), even for concurrent duplicates, and
	// refuses another fingerprint with ErrKeyMismatch; Claim is guarded by
	// version, due time, live lease and status (ErrConflict), one of
	// concurrent claims wins; Renew and leased Update are guarded by owner
	// and version (ErrLeaseLost); Update keeps the immutable fields; Due
	// pages the sweep index oldest first; rows and keys past ExpiresAt
	// read as absent; every field round trips (milliseconds; seconds for
	// ExpiresAt) and reads are copies; List pages a tenant's rows newest
	// first, each matching row exactly once (rows created in the same
	// millisecond too), filters by pipeline, status and creation time,
	// bounds its limit and refuses another query's cursor. A store that
	// also keeps jobs (store.JobStore) has them checked too: created once,
	// updated under their version, the active ones listed, pages of ids
	// round tripping. Each case uses its own tenant, so the stores may
	// share one backend (one table).
	State func(t *testing.T, c clock.Clock) store.Store
	// Payloads returns an empty chunk store whose clock reads wall time
	// (expiry is tested with wall-clock instants). To pass: PutPart writes
	// a part once (identical bytes again are accepted, other bytes refused
	// with ErrConflict), parts are copied in and out, a missing or expired
	// part is ErrNotFound; payload.Write and payload.Read over the store
	// then round trip every size and descriptor and detect corruption.
	// Cases reuse payload ids, so each call needs its own backend (a fresh
	// table).
	Payloads func(t *testing.T) payload.Store
	// Effects returns an effect log whose TTL expiry follows c, a fake
	// clock the case advances. To pass: CreateOrGet creates a record once
	// (version 1), even for concurrent creators; Transition is guarded by
	// the version (ErrConflict with the current record), one of concurrent
	// transitions wins; a missing or expired record is ErrNotFound; output
	// above effect.MaxOutputBytes is ErrTooLarge; an unknown state or an
	// empty id is ErrInvalid. Each case uses its own command ids, so the
	// logs may share one backend.
	Effects func(t *testing.T, c clock.Clock) effect.Log
	// Dispatcher returns a dispatcher whose deliveries call h, running
	// until the case ends: stop it (and any poller) in t.Cleanup. To pass:
	// every item is delivered with its fields, within Timeout; a Delay is
	// a lower bound; an item whose handler failed is delivered again; a
	// cancelled context is refused. Each call needs its own transport (a
	// fresh queue).
	Dispatcher func(t *testing.T, h dispatch.Handler) dispatch.Dispatcher
	// DeadLetters returns a dead-letter publisher and a function reading
	// back what it published. To pass: every published envelope reads back
	// intact (times to the millisecond); a cancelled context is refused.
	// Each call needs its own destination (a fresh queue, a fresh log).
	DeadLetters func(t *testing.T) (deadletter.Publisher, ReadBack[deadletter.Envelope])
	// Recorder returns a dead-letter recorder whose clock reads wall time
	// (expiry is tested with ExpiresAt an hour in the past). To pass: Put
	// stores a record once per ID and reports created only then, even for
	// concurrent Puts, keeping the first record; a missing ID is
	// ErrNotFound; an expired record reads as ErrNotFound and can be
	// stored again; an empty ID and a cancelled context are refused;
	// records round trip (times to the millisecond). A recorder that also
	// lists (deadletter.Lister) has listing checked too: a tenant's
	// execution records newest first, each once across pages, by
	// pipeline, without poison or expired records, the limit bounded and
	// another query's cursor refused. Record IDs and tenants are unique to
	// each case and run, so the recorders may share one backend.
	Recorder func(t *testing.T) deadletter.Recorder
	// Rejects returns an item reject publisher and a function reading
	// back what it published. To pass: every published envelope (item and
	// stream scope, with and without payload) reads back intact (times to
	// the millisecond); a cancelled context is refused. Each call needs
	// its own destination.
	Rejects func(t *testing.T) (reject.Publisher, ReadBack[reject.Envelope])
	// Objects returns an object store and a base URI without a trailing
	// slash (file:///tmp/x, s3://bucket/prefix) under which the case
	// writes; ObjectStore says what it must do to pass. Each call needs
	// its own base.
	Objects func(t *testing.T) (ObjectStore, string)
	// History returns a state store whose TTL expiry follows c, a fake
	// clock near the real time that the case advances, and the history
	// reader of the executions that store keeps (running, until the case
	// ends, whatever feeds it: stop it in t.Cleanup). To pass: lifecycles
	// run by the real engine on the store (chained steps; a retry, a dead
	// letter and a re-drive; a lease renewed, a reschedule and a takeover;
	// an await and its completion; an unknown outcome re-driven) read back
	// as exactly their events in commit order, numbered from 1, with
	// workers, errors and retry times; renewals and reschedules add
	// nothing; another tenant's key and an unknown execution are
	// store.ErrNotFound. The history may lag the writes (a reader fed from
	// a change stream): the suite waits up to HistoryWait for it. Each case
	// uses its own tenant, so the stores may share one backend.
	History func(t *testing.T, c clock.Clock) (store.Store, history.Reader)
}

// ReadBack returns every envelope published so far, in any order. It may
// wait (up to a few seconds) for want envelopes to become visible, and
// should fail t (of the factory's call) for anything wrong on the way
// that the envelope does not show, such as a missing message attribute.
type ReadBack[E any] func(ctx context.Context, want int) ([]E, error)

// Exercise runs the suite of every seam p lists, as parallel subtests of
// t named after the Provider fields. A Provider listing no seam fails t.
func Exercise(t *testing.T, p Provider) {
	t.Helper()
	seams := []struct {
		name   string
		listed bool
		run    func(t *testing.T)
	}{
		{"State", p.State != nil, func(t *testing.T) { runState(t, p.State) }},
		{"Payloads", p.Payloads != nil, func(t *testing.T) { runPayloads(t, p.Payloads) }},
		{"Effects", p.Effects != nil, func(t *testing.T) { runEffects(t, p.Effects) }},
		{"Dispatcher", p.Dispatcher != nil, func(t *testing.T) { runDispatcher(t, p.Dispatcher) }},
		{"DeadLetters", p.DeadLetters != nil, func(t *testing.T) { runDeadLetters(t, p.DeadLetters) }},
		{"Recorder", p.Recorder != nil, func(t *testing.T) { runRecorder(t, p.Recorder) }},
		{"Rejects", p.Rejects != nil, func(t *testing.T) { runRejects(t, p.Rejects) }},
		{"Objects", p.Objects != nil, func(t *testing.T) { runObjects(t, p.Objects) }},
		{"History", p.History != nil, func(t *testing.T) { runHistory(t, p.History) }},
	}
	listed := 0
	for _, s := range seams {
		if !s.listed {
			continue
		}
		listed++
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t)
		})
	}
	if listed == 0 {
		t.Fatal("backendtest.Exercise: the Provider lists no seam (every factory is nil)")
	}
}
