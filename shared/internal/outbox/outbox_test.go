package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// outboxStore is a state store that keeps an outbox.
type outboxStore interface {
	store.Store
	outbox.Source
}

// stores opens each store that keeps an outbox, recording types; reopen
// (embedded only: memory has no restart) closes and opens it again on
// the same data, as a process that crashed and restarted does.
type opened struct {
	name   string
	st     outboxStore
	reopen func() outboxStore
}

func stores(t *testing.T, types outbox.Types, clk clock.Clock) []opened {
	t.Helper()
	mem := memory.NewStateStore(clk)
	mem.EnableOutbox(types)
	dir := t.TempDir()
	var db *embedded.DB
	open := func() outboxStore {
		var err error
		if db, err = embedded.Open(dir, embedded.Options{Clock: clk, NoControl: true, Events: types}); err != nil {
			t.Fatal(err)
		}
		return db.State(clk)
	}
	emb := open()
	t.Cleanup(func() { _ = db.Close() })
	return []opened{
		{name: "memory", st: mem},
		{name: "embedded", st: emb, reopen: func() outboxStore { _ = db.Close(); return open() }},
	}
}

// finish runs execution id through one step to status end (commit at
// t0+2s), as the engine writes it: the create, the claim, the commit.
func finish(t *testing.T, st store.Store, id string, end store.Status, failure *store.Failure) store.Execution {
	t.Helper()
	ctx := context.Background()
	row := store.Execution{TenantID: "t", ExecutionID: id, PipelineID: "p", Status: store.Queued, Version: 1, StepName: "one",
		CreateToken: "tok-" + id, Fingerprint: "f", CreatedAt: t0, UpdatedAt: t0, NextDueAt: t0, ExpiresAt: t0.Add(24 * time.Hour)}
	if _, _, err := st.CreateOrGet(ctx, store.CreateRequest{Execution: row}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Second)
	claimed, err := st.Claim(ctx, store.ClaimRequest{Key: row.Key(), ExpectVersion: 1, Owner: "w1", Now: now, DueBy: now,
		TakeoverBy: now, LeaseUntil: now.Add(time.Minute), Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := claimed
	next.Status, next.Error, next.UpdatedAt, next.LeaseOwner, next.LeaseExpiresAt = end, failure, t0.Add(2*time.Second), "", time.Time{}
	next.NextDueAt, next.SweepAt = time.Time{}, time.Time{}
	done, err := st.Update(ctx, store.Guard{Key: row.Key(), Version: claimed.Version, LeaseOwner: "w1"}, next)
	if err != nil {
		t.Fatal(err)
	}
	return done
}

func TestIDIsDeterministicAndDistinct(t *testing.T) {
	a := outbox.ID("t", "e.1", 3, history.Succeeded)
	if a != outbox.ID("t", "e.1", 3, history.Succeeded) || len(a) != 32 {
		t.Fatalf("ID %q is not stable or not 32 hex digits", a)
	}
	for _, other := range []string{
		outbox.ID("u", "e.1", 3, history.Succeeded), outbox.ID("t", "e.2", 3, history.Succeeded),
		outbox.ID("t", "e.1", 4, history.Succeeded), outbox.ID("t", "e.1", 3, history.Cancelled),
	} {
		if other == a {
			t.Errorf("two events share the id %s", a)
		}
	}
}

func TestParseTypes(t *testing.T) {
	got, err := outbox.ParseTypes(" succeeded, DEAD_LETTERED ")
	if err != nil || got.String() != "DEAD_LETTERED,SUCCEEDED" {
		t.Errorf("ParseTypes = %v, %v", got, err)
	}
	for _, none := range []string{"", "none", "NONE"} {
		if got, err := outbox.ParseTypes(none); err != nil || len(got) != 0 {
			t.Errorf("ParseTypes(%q) = %v, %v; want the empty set", none, got, err)
		}
	}
	if _, err := outbox.ParseTypes("SUCCEEDED,FINISHED"); err == nil || !strings.Contains(err.Error(), `"FINISHED"`) {
		t.Errorf("an unknown type: error %v", err)
	}
}

// TestConfigKnowsTheTypes: the key's validation and its default agree
// with the types this package publishes.
func TestConfigKnowsTheTypes(t *testing.T) {
	var known []string
	for _, k := range outbox.Known {
		known = append(known, string(k))
	}
	if !slices.Equal(known, config.EventTypeNames) {
		t.Errorf("config.EventTypeNames %v, outbox.Known %v", config.EventTypeNames, known)
	}
	def, err := outbox.ParseTypes(config.DefaultEventsTypes)
	if err != nil || def.String() != (outbox.Types{history.Succeeded: true, history.DeadLettered: true, outbox.Rejected: true,
		history.OutcomeUnknown: true, history.Cancelled: true}).String() || len(def) != len(outbox.Terminal) {
		t.Errorf("default %v (%v), want the terminal types", def, err)
	}
	c := config.Default()
	c.EventsTypes = "SUCCEEDED,DONE"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "events.types") {
		t.Errorf("Validate with an unknown type: %v, want an error naming the key", err)
	}
}

// TestOutboxRecordsTheOptedInTypesOnly: each store's write records the
// events of the opted-in types, in the same write as the row, and
// nothing for the others; with no type nothing at all.
func TestOutboxRecordsTheOptedInTypesOnly(t *testing.T) {
	for _, tc := range []struct {
		types outbox.Types
		want  []history.Type
	}{
		{outbox.Types{history.Succeeded: true}, []history.Type{history.Succeeded}},
		{outbox.Types{history.DeadLettered: true}, nil},
		{outbox.Types{}, nil},
		{outbox.Types{history.Submitted: true, history.StepStarted: true, history.StepSucceeded: true, history.Succeeded: true},
			[]history.Type{history.Submitted, history.StepStarted, history.StepSucceeded, history.Succeeded}},
	} {
		for _, s := range stores(t, tc.types, clock.NewFake(t0)) {
			t.Run(s.name+"/"+tc.types.String(), func(t *testing.T) {
				row := finish(t, s.st, "e1.a", store.Succeeded, nil)
				recs, err := s.st.Pending(context.Background(), 100)
				if err != nil {
					t.Fatal(err)
				}
				var got []history.Type
				for _, r := range recs {
					got = append(got, r.Type)
					var d outbox.Detail
					if err := json.Unmarshal(r.Detail, &d); err != nil {
						t.Fatal(err)
					}
					if r.Seq == 0 || r.ID != outbox.ID("t", "e1.a", d.Version, r.Type) || d.EventID != r.ID {
						t.Errorf("record %+v (detail %+v) has no position or not its id", r, d)
					}
					if r.Type == history.Succeeded && (d.Version != row.Version || d.Status != "SUCCEEDED") {
						t.Errorf("SUCCEEDED detail %+v, want version %d", d, row.Version)
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("outbox %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// TestCrashBeforePublishStillDelivers: a process that committed the
// terminal write and died before anything was sent (its drainer never
// ran) loses no event: the restarted process's drainer sends it, and a
// crash after the send and before the delete sends it again with the
// same id.
func TestCrashBeforePublishStillDelivers(t *testing.T) {
	for _, s := range stores(t, outbox.Types{history.Succeeded: true}, clock.NewFake(t0)) {
		if s.reopen == nil {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			finish(t, s.st, "e1.a", store.Succeeded, nil)
			st := s.reopen() // the crash: nothing was sent

			// A drain whose delete fails: the sink took the event, the
			// record stays (a crash between the two).
			sink := &outbox.MemorySink{}
			failing := &ackFails{Source: st}
			if _, _, err := outbox.NewDrainer(failing, sink, outbox.DrainOptions{}).Drain(context.Background()); err == nil {
				t.Fatal("a drain whose delete failed reported no error")
			}
			st = s.reopen()
			n, _, err := outbox.NewDrainer(st, sink, outbox.DrainOptions{}).Drain(context.Background())
			if err != nil || n != 1 {
				t.Fatalf("drain after the restart: %d, %v", n, err)
			}
			sent := sink.Sent()
			want := outbox.ID("t", "e1.a", 3, history.Succeeded)
			if len(sent) != 2 || sent[0].ID != want || sent[1].ID != want {
				t.Fatalf("sent %+v, want the event twice with id %s", sent, want)
			}
			if left, _ := st.Pending(context.Background(), 10); len(left) != 0 {
				t.Errorf("records left after the acknowledgement: %+v", left)
			}
		})
	}
}

// ackFails is a source whose deletes fail.
type ackFails struct{ outbox.Source }

func (ackFails) Ack(context.Context, []uint64) error { return errors.New("disk gone") }

// TestDrainRetriesUntilAcknowledged: events the sink refuses for a
// transient reason stay in the outbox and are sent again; the ones it
// took are deleted; a permanent refusal is dead-lettered (logged) and
// deleted.
func TestDrainRetriesUntilAcknowledged(t *testing.T) {
	for _, s := range stores(t, outbox.Types{history.Succeeded: true, history.DeadLettered: true}, clock.NewFake(t0)) {
		t.Run(s.name, func(t *testing.T) {
			finish(t, s.st, "ok.a", store.Succeeded, nil)
			finish(t, s.st, "bad.a", store.DLQ, &store.Failure{Code: "x", Message: "y", TerminalReason: store.ReasonNonRetryable})
			finish(t, s.st, "poison.a", store.Succeeded, nil)
			down := true
			poison := outbox.ID("t", "poison.a", 3, history.Succeeded)
			sink := &outbox.MemorySink{Fail: func(ev outbox.Event) error {
				switch {
				case ev.ID == poison:
					return outbox.ErrPermanent
				case down && ev.Type == history.DeadLettered:
					return errors.New("ThrottlingException")
				}
				return nil
			}}
			logs, log := logtest.New()
			d := outbox.NewDrainer(s.st, sink, outbox.DrainOptions{Logger: log})
			if _, _, err := d.Drain(context.Background()); err == nil {
				t.Fatal("a pass with a refused event reported no error")
			}
			left, _ := s.st.Pending(context.Background(), 10)
			if len(left) != 1 || left[0].Type != history.DeadLettered {
				t.Fatalf("left %+v, want the DEAD_LETTERED event only", left)
			}
			if !strings.Contains(logs.String(), `"event":"lifecycle_event_dead_lettered"`) || !strings.Contains(logs.String(), poison) {
				t.Errorf("the poison event was not logged as dead-lettered:\n%s", logs.String())
			}
			if _, _, err := d.Drain(context.Background()); err == nil {
				t.Fatal("still down: no error")
			}
			down = false
			if n, _, err := d.Drain(context.Background()); err != nil || n != 1 {
				t.Fatalf("drain once EventBridge is back: %d, %v", n, err)
			}
			var got []history.Type
			for _, ev := range sink.Sent() {
				got = append(got, ev.Type)
			}
			if !slices.Equal(got, []history.Type{history.Succeeded, history.DeadLettered}) {
				t.Errorf("delivered %v", got)
			}
		})
	}
}

// TestRunBacksOffWhileTheSinkIsDown: in virtual time, a sink that fails
// every call is called at a backoff doubling from Interval to
// MaxBackoff, not in a tight loop; once it recovers the event is
// delivered.
func TestRunBacksOffWhileTheSinkIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memory.NewStateStore(clock.NewFake(t0))
		st.EnableOutbox(outbox.Types{history.Succeeded: true})
		finish(t, st, "e.a", store.Succeeded, nil)
		var calls atomic.Int32
		var up atomic.Bool
		sink := &outbox.MemorySink{Fail: func(outbox.Event) error {
			calls.Add(1)
			if !up.Load() {
				return errors.New("unavailable")
			}
			return nil
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = outbox.NewDrainer(st, sink, outbox.DrainOptions{Interval: time.Second, MaxBackoff: 8 * time.Second,
				Logger: slog.New(slog.DiscardHandler)}).Run(ctx)
		}()
		time.Sleep(60 * time.Second)
		synctest.Wait()
		// Calls at 0, 1, 3, 7, 15, 23, 31, 39, 47, 55 s.
		if n := calls.Load(); n != 10 {
			t.Errorf("%d calls in 60 s, want 10 (backoff 1, 2, 4, 8, 8, ... s)", n)
		}
		up.Store(true)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if sent := sink.Sent(); len(sent) != 1 {
			t.Errorf("sent %d events once the sink is up, want 1", len(sent))
		}
		cancel()
		<-done
	})
}
