package backendtest

// The effect log suite (Provider.Effects): one record per command id,
// created once, moved by version-guarded transitions, expiring by the
// clock, through effect.Log only. Each case uses its own command ids, so a
// factory may share one backend (one table) across cases.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
)

// effectEpoch is the effect suite's fake "now": milliseconds matter, so it
// has some. It is near the real time so that a backend that deletes
// expired items on its own (DynamoDB's TTL) does not remove the suite's
// records while a test runs.
var effectEpoch = time.Now().UTC().Truncate(time.Hour).Add(123 * time.Millisecond)

var commandSeq atomic.Int64

type effectEnv struct {
	t     *testing.T
	log   effect.Log
	clock *clock.Fake
	ctx   context.Context
	id    string
}

func setupEffects(t *testing.T, f func(*testing.T, clock.Clock) effect.Log) *effectEnv {
	t.Helper()
	c := clock.NewFake(effectEpoch)
	return &effectEnv{t: t, log: f(t, c), clock: c, ctx: context.Background(),
		id: fmt.Sprintf("cmd-%d-%d", time.Now().UnixNano(), commandSeq.Add(1))}
}

// pending is a new PENDING record with id suffix.
func (e *effectEnv) pending(suffix string) effect.Record {
	now := e.clock.Now()
	return effect.Record{CommandID: e.id + suffix, State: effect.Pending, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour).Truncate(time.Second)}
}

func (e *effectEnv) create(r effect.Record) effect.Record {
	e.t.Helper()
	got, created, err := e.log.CreateOrGet(e.ctx, r)
	if err != nil || !created {
		e.t.Fatalf("CreateOrGet(%s) = created %v, err %v", r.CommandID, created, err)
	}
	return got
}

func effectDispatcher(n int64) effect.Dispatcher {
	return effect.Dispatcher{TenantID: "tenant-a", ExecutionID: "exec-1", StepIndex: 2,
		TransitionKey: fmt.Sprintf("exec-1:2:%d", n), FencingToken: n}
}

func jsonOutput(data string) payload.Payload {
	return payload.Payload{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Data: []byte(data)}
}

// sameEffect fails unless got equals want field by field (times compared as
// instants; output bytes compared as bytes).
func sameEffect(t *testing.T, what string, got, want effect.Record) {
	t.Helper()
	norm := func(r effect.Record) effect.Record {
		r.CreatedAt, r.UpdatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC(), r.ExpiresAt.UTC()
		if len(r.Output.Data) == 0 {
			r.Output.Data = nil
		}
		return r
	}
	g, w := norm(got), norm(want)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

// runEffects runs the effect log suite on logs from f.
func runEffects(t *testing.T, f func(*testing.T, clock.Clock) effect.Log) {
	t.Run("CreateThenGet", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		r := e.pending("")
		r.Version = 7 // ignored: a new record is version 1
		got := e.create(r)
		r.Version = 1
		sameEffect(t, "created", got, r)
		read, err := e.log.Get(e.ctx, r.CommandID)
		if err != nil {
			t.Fatal(err)
		}
		sameEffect(t, "read back", read, r)
	})

	t.Run("CreateOrGetReturnsExisting", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		first := e.create(e.pending(""))
		other := e.pending("")
		other.State, other.Dispatcher = effect.Dispatching, effectDispatcher(3)
		got, created, err := e.log.CreateOrGet(e.ctx, other)
		if err != nil || created {
			t.Fatalf("second CreateOrGet: created %v, err %v", created, err)
		}
		sameEffect(t, "existing", got, first)
	})

	t.Run("CreateOrGetKeepsTheRecordLonger", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		first := e.create(e.pending(""))
		later := e.pending("")
		later.ExpiresAt = first.ExpiresAt.Add(72 * time.Hour)
		got, created, err := e.log.CreateOrGet(e.ctx, later)
		if err != nil || created {
			t.Fatalf("CreateOrGet with a later expiry: created %v, err %v", created, err)
		}
		want := first
		want.ExpiresAt = later.ExpiresAt
		sameEffect(t, "returned", got, want)
		// Past the first expiry, the record is still there.
		e.clock.Advance(first.ExpiresAt.Sub(e.clock.Now()) + time.Hour)
		read, err := e.log.Get(e.ctx, first.CommandID)
		if err != nil {
			t.Fatalf("Get past the first expiry: %v (the record must have been kept longer)", err)
		}
		sameEffect(t, "kept longer", read, want)
		// An earlier expiry never shortens it.
		earlier := e.pending("")
		earlier.ExpiresAt = e.clock.Now().Add(time.Hour).Truncate(time.Second)
		if got, _, err := e.log.CreateOrGet(e.ctx, earlier); err != nil || !got.ExpiresAt.Equal(want.ExpiresAt) {
			t.Fatalf("CreateOrGet with an earlier expiry = expires %v, %v; want %v kept", got.ExpiresAt, err, want.ExpiresAt)
		}
	})

	t.Run("ConcurrentCreateOneWins", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		const n = 8
		var wins atomic.Int32
		got := make([]effect.Record, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := e.pending("")
				r.Dispatcher = effectDispatcher(int64(i + 1))
				rec, created, err := e.log.CreateOrGet(e.ctx, r)
				if err != nil {
					t.Errorf("CreateOrGet %d: %v", i, err)
				}
				if created {
					wins.Add(1)
				}
				got[i] = rec
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d creators, want 1", wins.Load())
		}
		for i := range got {
			sameEffect(t, fmt.Sprintf("answer %d", i), got[i], got[0])
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		if _, err := e.log.Get(e.ctx, e.id+"-absent"); !errors.Is(err, effect.ErrNotFound) {
			t.Fatalf("Get missing: %v, want ErrNotFound", err)
		}
	})

	t.Run("TransitionsAdvanceVersion", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		rec := e.create(e.pending(""))
		created, expires := rec.CreatedAt, rec.ExpiresAt
		e.clock.Advance(1500 * time.Millisecond)
		next := rec
		next.State, next.Dispatcher, next.Dispatches, next.UpdatedAt = effect.Dispatching, effectDispatcher(5), 1, e.clock.Now()
		next.CreatedAt, next.ExpiresAt = created.Add(time.Hour), expires.Add(time.Hour) // not changed by a transition
		got, err := e.log.Transition(e.ctx, 1, next)
		if err != nil {
			t.Fatal(err)
		}
		want := next
		want.Version, want.CreatedAt, want.ExpiresAt = 2, created, expires
		sameEffect(t, "dispatching", got, want)

		done := got
		done.State, done.Output, done.UpdatedAt = effect.Succeeded, jsonOutput(`{"paymentId":"pay-1"}`), e.clock.Now()
		done.Output.Message = "shop.v1.Payment"
		done.Output.Encoding, done.Output.ContentType = payload.EncodingProtobuf, payload.ContentTypeProtobuf
		got, err = e.log.Transition(e.ctx, 2, done)
		if err != nil {
			t.Fatal(err)
		}
		done.Version = 3
		sameEffect(t, "succeeded", got, done)
		read, err := e.log.Get(e.ctx, rec.CommandID)
		if err != nil {
			t.Fatal(err)
		}
		sameEffect(t, "read back", read, done)
	})

	t.Run("ErrorSetAndCleared", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		rec := e.create(e.pending(""))
		failed := rec
		failed.State, failed.Error = effect.FailedRetryable, &effect.Failure{Code: "provider_down", Message: "503 from provider — ünïcode"}
		got, err := e.log.Transition(e.ctx, 1, failed)
		if err != nil {
			t.Fatal(err)
		}
		failed.Version = 2
		sameEffect(t, "failed", got, failed)
		again := got
		again.State, again.Error, again.Dispatcher, again.Dispatches = effect.Dispatching, nil, effectDispatcher(9), 2
		got, err = e.log.Transition(e.ctx, 2, again)
		if err != nil {
			t.Fatal(err)
		}
		read, err := e.log.Get(e.ctx, rec.CommandID)
		if err != nil {
			t.Fatal(err)
		}
		if read.Error != nil || got.Error != nil || read.State != effect.Dispatching || read.Version != 3 {
			t.Fatalf("after re-dispatch: %+v", read)
		}
	})

	t.Run("StaleTransitionConflictsAndReturnsCurrent", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		rec := e.create(e.pending(""))
		win := rec
		win.State, win.Dispatcher, win.Dispatches = effect.Dispatching, effectDispatcher(4), 1
		won, err := e.log.Transition(e.ctx, 1, win)
		if err != nil {
			t.Fatal(err)
		}
		lose := rec
		lose.State, lose.Dispatcher = effect.Dispatching, effectDispatcher(6)
		cur, err := e.log.Transition(e.ctx, 1, lose)
		if !errors.Is(err, effect.ErrConflict) {
			t.Fatalf("stale transition: %v, want ErrConflict", err)
		}
		sameEffect(t, "current after conflict", cur, won)
	})

	t.Run("ConcurrentTransitionsOneWins", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		rec := e.create(e.pending(""))
		const n = 8
		var wins atomic.Int32
		var winner atomic.Int64
		seen := make([]effect.Record, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				next := rec
				next.State, next.Dispatcher, next.Dispatches = effect.Dispatching, effectDispatcher(int64(i+1)), 1
				got, err := e.log.Transition(e.ctx, 1, next)
				switch {
				case err == nil:
					wins.Add(1)
					winner.Store(int64(i + 1))
				case !errors.Is(err, effect.ErrConflict):
					t.Errorf("transition %d: %v", i, err)
				}
				seen[i] = got
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d runs moved the record to DISPATCHING, want 1", wins.Load())
		}
		for i, r := range seen {
			if r.State != effect.Dispatching || r.Version != 2 || r.Dispatcher.FencingToken != winner.Load() {
				t.Fatalf("run %d saw %+v, want the winner's (fencing %d) DISPATCHING at version 2", i, r, winner.Load())
			}
		}
	})

	t.Run("TransitionMissing", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		r := e.pending("-absent")
		r.Version = 1
		if _, err := e.log.Transition(e.ctx, 1, r); !errors.Is(err, effect.ErrNotFound) {
			t.Fatalf("transition of a missing record: %v, want ErrNotFound", err)
		}
	})

	t.Run("ExpiryFollowsClock", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		r := e.pending("")
		r.ExpiresAt = e.clock.Now().Add(time.Minute).Truncate(time.Second)
		rec := e.create(r)
		e.clock.Set(r.ExpiresAt.Add(-time.Second))
		if _, err := e.log.Get(e.ctx, r.CommandID); err != nil {
			t.Fatalf("Get before expiry: %v", err)
		}
		e.clock.Set(r.ExpiresAt)
		if _, err := e.log.Get(e.ctx, r.CommandID); !errors.Is(err, effect.ErrNotFound) {
			t.Fatalf("Get at expiry: %v, want ErrNotFound", err)
		}
		next := rec
		next.State = effect.Dispatching
		if _, err := e.log.Transition(e.ctx, 1, next); !errors.Is(err, effect.ErrNotFound) {
			t.Fatalf("Transition of an expired record: %v, want ErrNotFound", err)
		}
		fresh := e.pending("")
		fresh.ExpiresAt = time.Time{} // no TTL
		got, created, err := e.log.CreateOrGet(e.ctx, fresh)
		if err != nil || !created {
			t.Fatalf("CreateOrGet over an expired record: created %v, err %v", created, err)
		}
		if !got.ExpiresAt.IsZero() || got.State != effect.Pending || got.Version != 1 {
			t.Fatalf("recreated: %+v", got)
		}
		e.clock.Advance(1000 * 24 * time.Hour)
		if _, err := e.log.Get(e.ctx, r.CommandID); err != nil {
			t.Fatalf("a record without TTL expired: %v", err)
		}
	})

	t.Run("OutputLimit", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		rec := e.create(e.pending(""))
		big := rec
		big.State, big.Output = effect.Succeeded, jsonOutput(string(bytes.Repeat([]byte("x"), effect.MaxOutputBytes+1)))
		if _, err := e.log.Transition(e.ctx, 1, big); !errors.Is(err, effect.ErrTooLarge) {
			t.Fatalf("transition with %d output bytes: %v, want ErrTooLarge", len(big.Output.Data), err)
		}
		tooBig := e.pending("-big")
		tooBig.Output = big.Output
		if _, _, err := e.log.CreateOrGet(e.ctx, tooBig); !errors.Is(err, effect.ErrTooLarge) {
			t.Fatalf("create with %d output bytes: %v, want ErrTooLarge", len(tooBig.Output.Data), err)
		}
		fits := rec
		fits.State, fits.Output = effect.Succeeded, jsonOutput(string(bytes.Repeat([]byte("y"), effect.MaxOutputBytes)))
		got, err := e.log.Transition(e.ctx, 1, fits)
		if err != nil {
			t.Fatalf("transition with exactly %d output bytes: %v", effect.MaxOutputBytes, err)
		}
		read, err := e.log.Get(e.ctx, rec.CommandID)
		if err != nil || !bytes.Equal(read.Output.Data, fits.Output.Data) || got.Version != 2 {
			t.Fatalf("read back %d bytes, err %v", len(read.Output.Data), err)
		}
	})

	t.Run("EmptyOutputSucceeds", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		rec := e.create(e.pending(""))
		done := rec
		done.State, done.Output = effect.Succeeded, payload.Payload{Encoding: payload.EncodingRaw, ContentType: "application/octet-stream"}
		if _, err := e.log.Transition(e.ctx, 1, done); err != nil {
			t.Fatal(err)
		}
		read, err := e.log.Get(e.ctx, rec.CommandID)
		if err != nil || len(read.Output.Data) != 0 || read.Output.Encoding != payload.EncodingRaw || read.State != effect.Succeeded {
			t.Fatalf("read back %+v, %v", read, err)
		}
	})

	t.Run("InvalidRecordsRefused", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		bad := e.pending("")
		bad.State = "DONE"
		if _, _, err := e.log.CreateOrGet(e.ctx, bad); !errors.Is(err, effect.ErrInvalid) {
			t.Fatalf("unknown state: %v, want ErrInvalid", err)
		}
		noID := e.pending("")
		noID.CommandID = ""
		if _, _, err := e.log.CreateOrGet(e.ctx, noID); !errors.Is(err, effect.ErrInvalid) {
			t.Fatalf("empty id: %v, want ErrInvalid", err)
		}
		rec := e.create(e.pending(""))
		rec.State = "DONE"
		if _, err := e.log.Transition(e.ctx, 1, rec); !errors.Is(err, effect.ErrInvalid) {
			t.Fatalf("transition to an unknown state: %v, want ErrInvalid", err)
		}
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		e := setupEffects(t, f)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		if _, _, err := e.log.CreateOrGet(ctx, e.pending("")); err == nil {
			t.Fatal("CreateOrGet with a canceled context succeeded")
		}
	})
}
