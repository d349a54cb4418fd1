package backendtest

// The dead-letter recorder suite (Provider.Recorder): records stored once
// by ID, concurrent puts creating exactly one, expiry by ExpiresAt, and
// listing (deadletter.Lister) when the recorder lists.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
)

// recorderSeq makes record IDs unique within a test binary; the nanosecond
// prefix makes them unique across runs sharing one backend table.
var (
	recorderSeq  atomic.Int64
	recorderRun  = time.Now().UnixNano()
	recorderBase = time.Date(2026, 11, 29, 10, 0, 0, 123_456_789, time.UTC)
)

// recordID returns a record ID unique to this call.
func recordID(t *testing.T, prefix string) string {
	return fmt.Sprintf("%s%x-%d:%s:1:3", prefix, recorderRun, recorderSeq.Add(1), t.Name())
}

// executionRecord is a KindExecution record with every field set.
func executionRecord(id string) deadletter.Record {
	env := deadLetter(7)
	env.TransitionKey = id
	return deadletter.Record{
		ID: id, Kind: deadletter.KindExecution, TenantID: env.TenantID, ExecutionID: env.ExecutionID,
		Envelope:   &env,
		RecordedAt: recorderBase.Add(time.Second),
		ExpiresAt:  time.Now().Add(30 * 24 * time.Hour),
	}
}

// poisonRecord is a KindPoison record: no envelope.
func poisonRecord(id string) deadletter.Record {
	return deadletter.Record{
		ID: id, Kind: deadletter.KindPoison, MessageID: id[len("poison:"):], ReceiveCount: 5,
		RecordedAt: recorderBase.Add(2 * time.Second),
		ExpiresAt:  time.Now().Add(30 * 24 * time.Hour),
	}
}

// normalizedRecord copies r with every time truncated to milliseconds in UTC.
func normalizedRecord(r deadletter.Record) deadletter.Record {
	ms := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return t.Truncate(time.Millisecond).UTC()
	}
	r.RecordedAt, r.ExpiresAt = ms(r.RecordedAt), ms(r.ExpiresAt)
	if r.Envelope != nil {
		env := *r.Envelope
		env.FailedAt = ms(env.FailedAt)
		r.Envelope = &env
	}
	return r
}

// sameRecord fails t unless got equals want, times compared with Equal at
// millisecond precision.
func sameRecord(t *testing.T, got, want deadletter.Record) {
	t.Helper()
	g, w := normalizedRecord(got), normalizedRecord(want)
	if !g.RecordedAt.Equal(w.RecordedAt) {
		t.Errorf("RecordedAt %v, want %v", got.RecordedAt, want.RecordedAt)
	}
	if !g.ExpiresAt.Equal(w.ExpiresAt) {
		t.Errorf("ExpiresAt %v, want %v", got.ExpiresAt, want.ExpiresAt)
	}
	if (g.Envelope == nil) != (w.Envelope == nil) {
		t.Fatalf("Envelope %+v, want %+v", got.Envelope, want.Envelope)
	}
	if g.Envelope != nil {
		if !g.Envelope.FailedAt.Equal(w.Envelope.FailedAt) {
			t.Errorf("Envelope.FailedAt %v, want %v", got.Envelope.FailedAt, want.Envelope.FailedAt)
		}
		ge, we := *g.Envelope, *w.Envelope
		ge.FailedAt, we.FailedAt = time.Time{}, time.Time{}
		if ge != we {
			t.Errorf("Envelope\n got  %+v\n want %+v", ge, we)
		}
	}
	g.RecordedAt, g.ExpiresAt, g.Envelope = time.Time{}, time.Time{}, nil
	w.RecordedAt, w.ExpiresAt, w.Envelope = time.Time{}, time.Time{}, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("record\n got  %+v\n want %+v", g, w)
	}
}

// putRecord stores r and requires created to be wantCreated.
func putRecord(t *testing.T, rec deadletter.Recorder, r deadletter.Record, wantCreated bool) {
	t.Helper()
	created, err := rec.Put(context.Background(), r)
	if err != nil {
		t.Fatalf("Put %s: %v", r.ID, err)
	}
	if created != wantCreated {
		t.Fatalf("Put %s: created = %v, want %v", r.ID, created, wantCreated)
	}
}

// getRecord reads id and requires it to exist.
func getRecord(t *testing.T, rec deadletter.Recorder, id string) deadletter.Record {
	t.Helper()
	got, err := rec.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return got
}

// runRecorder runs the dead-letter recorder suite. The cases run in
// parallel and use IDs unique to each call, so newRecorder may return
// recorders sharing one backend table. The recorder's clock must read
// real time: expiry is tested with ExpiresAt an hour in the past.
func runRecorder(t *testing.T, newRecorder func(t *testing.T) deadletter.Recorder) {
	t.Run("PutThenGetRoundTrips", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		want := executionRecord(recordID(t, "exec-"))
		putRecord(t, rec, want, true)
		sameRecord(t, getRecord(t, rec, want.ID), want)
	})
	t.Run("RecordWithoutExpiryRoundTrips", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		want := executionRecord(recordID(t, "exec-"))
		want.ExpiresAt = time.Time{}
		putRecord(t, rec, want, true)
		got := getRecord(t, rec, want.ID)
		if !got.ExpiresAt.IsZero() {
			t.Errorf("ExpiresAt = %v, want zero", got.ExpiresAt)
		}
		sameRecord(t, got, want)
	})
	t.Run("PoisonRecordRoundTrips", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		want := poisonRecord(recordID(t, "poison:msg-"))
		putRecord(t, rec, want, true)
		got := getRecord(t, rec, want.ID)
		if got.Envelope != nil {
			t.Errorf("poison record has an envelope: %+v", got.Envelope)
		}
		sameRecord(t, got, want)
	})
	t.Run("RepeatPutKeepsFirstRecord", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		first := executionRecord(recordID(t, "exec-"))
		putRecord(t, rec, first, true)
		second := executionRecord(first.ID)
		second.Envelope.ErrorMessage = "a different message"
		second.Envelope.RetriesObserved = 9
		second.RecordedAt = first.RecordedAt.Add(time.Hour)
		putRecord(t, rec, second, false)
		putRecord(t, rec, first, false)
		sameRecord(t, getRecord(t, rec, first.ID), first)
	})
	t.Run("GetMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		_, err := rec.Get(context.Background(), recordID(t, "missing-"))
		if !errors.Is(err, deadletter.ErrNotFound) {
			t.Fatalf("Get missing: error = %v, want ErrNotFound", err)
		}
	})
	t.Run("ConcurrentPutsCreateOnce", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		id := recordID(t, "exec-")
		const n = 16
		var (
			wg      sync.WaitGroup
			created atomic.Int32
			winner  atomic.Int32
		)
		for i := range n {
			wg.Go(func() {
				r := executionRecord(id)
				r.Envelope.RetriesObserved = i
				ok, err := rec.Put(context.Background(), r)
				if err != nil {
					t.Errorf("Put %d: %v", i, err)
					return
				}
				if ok {
					created.Add(1)
					winner.Store(int32(i))
				}
			})
		}
		wg.Wait()
		if got := created.Load(); got != 1 {
			t.Fatalf("%d of %d concurrent Puts reported created, want exactly 1", got, n)
		}
		got := getRecord(t, rec, id)
		if got.Envelope == nil || got.Envelope.RetriesObserved != int(winner.Load()) {
			t.Fatalf("stored record %+v is not the one that reported created (%d)", got.Envelope, winner.Load())
		}
	})
	t.Run("ExpiredRecordIsNotFoundAndRecreatable", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		old := executionRecord(recordID(t, "exec-"))
		old.ExpiresAt = time.Now().Add(-time.Hour)
		putRecord(t, rec, old, true)
		if _, err := rec.Get(context.Background(), old.ID); !errors.Is(err, deadletter.ErrNotFound) {
			t.Fatalf("Get expired: error = %v, want ErrNotFound", err)
		}
		fresh := executionRecord(old.ID)
		fresh.Envelope.ErrorMessage = "recorded again"
		fresh.RecordedAt = old.RecordedAt.Add(time.Hour)
		putRecord(t, rec, fresh, true)
		sameRecord(t, getRecord(t, rec, old.ID), fresh)
		putRecord(t, rec, old, false)
	})
	t.Run("EmptyIDRefused", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		r := executionRecord("")
		if created, err := rec.Put(context.Background(), r); err == nil || created {
			t.Fatalf("Put with an empty ID: created = %v, error = %v, want an error", created, err)
		}
	})
	t.Run("CancelledContextRefused", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if created, err := rec.Put(ctx, executionRecord(recordID(t, "exec-"))); err == nil || created {
			t.Fatalf("Put with a cancelled context: created = %v, error = %v, want an error", created, err)
		}
	})
	runRecorderList(t, newRecorder)
}

// The list cases (deadletter.Lister), run when the recorder lists: a
// tenant's execution records newest first, each exactly once across the
// pages of a query (records stored in the same millisecond too), the
// pipeline filter, no poison, expired or other tenant's record, the
// limit's bounds, and another query's cursor refused.

// listTenant returns a tenant unique to this call (the recorders may
// share one table).
func listTenant() string { return fmt.Sprintf("dl-tenant-%x-%d", recorderRun, recorderSeq.Add(1)) }

// tenantRecord is a KindExecution record of tenant in pipeline, recorded
// at at.
func tenantRecord(t *testing.T, tenant, pipeline string, at time.Time) deadletter.Record {
	id := recordID(t, "exec-")
	env := deadLetter(3)
	env.TenantID, env.PipelineID, env.TransitionKey = tenant, pipeline, id
	r := deadletter.ExecutionRecord(env, at)
	r.ExpiresAt = time.Now().Add(time.Hour)
	return r
}

// listRecords pages through q to the end, failing on an error, an
// oversized page or paging that does not end within maxPages.
func listRecords(t *testing.T, l deadletter.Lister, q deadletter.ListQuery, maxPages int) []deadletter.Record {
	t.Helper()
	var out []deadletter.Record
	for pages := 0; ; pages++ {
		if pages >= maxPages {
			t.Fatalf("paging %+v did not end within %d pages", q, maxPages)
		}
		page, err := l.List(context.Background(), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		if len(page.Records) > q.PageSize() {
			t.Fatalf("List returned %d records, over the limit %d", len(page.Records), q.PageSize())
		}
		out = append(out, page.Records...)
		if page.Cursor == "" {
			return out
		}
		q.Cursor = page.Cursor
	}
}

// checkRecords fails unless got holds each record of want exactly once,
// intact, and nothing else, newest first.
func checkRecords(t *testing.T, got []deadletter.Record, want map[string]deadletter.Record) {
	t.Helper()
	seen := map[string]int{}
	for i, r := range got {
		seen[r.ID]++
		w, ok := want[r.ID]
		if !ok {
			t.Errorf("listed record %s (kind %s, tenant %s), which does not match", r.ID, r.Kind, r.TenantID)
			continue
		}
		sameRecord(t, r, w)
		if i > 0 && r.RecordedAt.After(got[i-1].RecordedAt) {
			t.Errorf("record %d (%s) recorded after record %d: not newest first", i, r.ID, i-1)
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("record %s listed %d times, want once", id, seen[id])
		}
	}
}

func runRecorderList(t *testing.T, newRecorder func(t *testing.T) deadletter.Recorder) {
	lister := func(t *testing.T) (deadletter.Recorder, deadletter.Lister) {
		rec := newRecorder(t)
		l, ok := rec.(deadletter.Lister)
		if !ok {
			t.Skip("the recorder does not list (deadletter.Lister)")
		}
		return rec, l
	}
	t.Run("ListNewestFirstEachOnce", func(t *testing.T) {
		t.Parallel()
		rec, l := lister(t)
		tenant := listTenant()
		same := recorderBase.Add(time.Minute)
		want := map[string]deadletter.Record{}
		for i := range 24 {
			at := same
			if i%3 == 0 {
				at = same.Add(time.Duration(i) * time.Second)
			}
			r := tenantRecord(t, tenant, "p.one", at)
			putRecord(t, rec, r, true)
			want[r.ID] = r
		}
		poison := poisonRecord(recordID(t, "poison:msg-"))
		poison.TenantID, poison.ExecutionID = tenant, "exec-poisoned" // a poison record may name its execution
		putRecord(t, rec, poison, true)
		putRecord(t, rec, tenantRecord(t, listTenant(), "p.one", same), true) // another tenant's
		checkRecords(t, listRecords(t, l, deadletter.ListQuery{TenantID: tenant, Limit: 5}, 50), want)
		checkRecords(t, listRecords(t, l, deadletter.ListQuery{TenantID: tenant, Limit: deadletter.MaxListLimit}, 2), want)
	})
	t.Run("ListPipelineFilter", func(t *testing.T) {
		t.Parallel()
		rec, l := lister(t)
		tenant := listTenant()
		want := map[string]deadletter.Record{}
		for i := range 16 {
			pipeline := "p.two"
			if i%4 == 1 {
				pipeline = "p.one"
			}
			r := tenantRecord(t, tenant, pipeline, recorderBase.Add(time.Duration(i)*time.Millisecond))
			putRecord(t, rec, r, true)
			if pipeline == "p.one" {
				want[r.ID] = r
			}
		}
		for _, limit := range []int{1, 2} {
			checkRecords(t, listRecords(t, l, deadletter.ListQuery{TenantID: tenant, PipelineID: "p.one", Limit: limit}, 40), want)
		}
		checkRecords(t, listRecords(t, l, deadletter.ListQuery{TenantID: tenant, PipelineID: "p.none"}, 10), nil)
	})
	t.Run("ListLeavesExpiredOut", func(t *testing.T) {
		t.Parallel()
		rec, l := lister(t)
		tenant := listTenant()
		live := tenantRecord(t, tenant, "p.one", recorderBase)
		old := tenantRecord(t, tenant, "p.one", recorderBase.Add(time.Second))
		old.ExpiresAt = time.Now().Add(-time.Hour)
		putRecord(t, rec, live, true)
		putRecord(t, rec, old, true)
		checkRecords(t, listRecords(t, l, deadletter.ListQuery{TenantID: tenant}, 5), map[string]deadletter.Record{live.ID: live})
	})
	t.Run("ListLimitAndCursor", func(t *testing.T) {
		t.Parallel()
		rec, l := lister(t)
		tenant := listTenant()
		for i := range deadletter.DefaultListLimit + 2 {
			putRecord(t, rec, tenantRecord(t, tenant, "p.one", recorderBase.Add(time.Duration(i)*time.Millisecond)), true)
		}
		ctx := context.Background()
		page, err := l.List(ctx, deadletter.ListQuery{TenantID: tenant})
		if err != nil || len(page.Records) != deadletter.DefaultListLimit || page.Cursor == "" {
			t.Fatalf("limit 0: %d records, cursor %q, %v; want the default %d and a cursor", len(page.Records), page.Cursor, err, deadletter.DefaultListLimit)
		}
		for _, q := range []deadletter.ListQuery{
			{TenantID: tenant, Limit: deadletter.MaxListLimit + 1}, {TenantID: tenant, Limit: -1}, {Limit: 5},
		} {
			if _, err := l.List(ctx, q); !errors.Is(err, deadletter.ErrInvalidListQuery) {
				t.Errorf("List(%+v): err = %v, want ErrInvalidListQuery", q, err)
			}
		}
		for name, q := range map[string]deadletter.ListQuery{
			"another tenant":   {TenantID: listTenant(), Cursor: page.Cursor},
			"another pipeline": {TenantID: tenant, PipelineID: "p.one", Cursor: page.Cursor},
			"garbage":          {TenantID: tenant, Cursor: "not-a-cursor"},
		} {
			if _, err := l.List(ctx, q); !errors.Is(err, deadletter.ErrInvalidCursor) {
				t.Errorf("the cursor with %s: err = %v, want ErrInvalidCursor", name, err)
			}
		}
		rest, err := l.List(ctx, deadletter.ListQuery{TenantID: tenant, Limit: 10, Cursor: page.Cursor})
		if err != nil || len(rest.Records) != 2 {
			t.Fatalf("the cursor with another limit: %d records, %v; want the 2 others", len(rest.Records), err)
		}
	})
}
