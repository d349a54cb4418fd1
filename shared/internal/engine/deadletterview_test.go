package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// recordingLister records every published dead letter as the dead-letter
// consumer would (deadletter.ExecutionRecord) and lists the records.
type recordingLister struct{ *memory.DeadLetters }

func (l recordingLister) Publish(ctx context.Context, env deadletter.Envelope) error {
	_, err := l.Put(ctx, deadletter.ExecutionRecord(env, time.Now()))
	return err
}

// deadLetterWorker is a runtime on the cluster's store whose dead letters
// are recorded and listed (Deps.DeadLetters), running p.refuse: its one
// step refuses (non-retryable, code "refused") while refuse is set.
func deadLetterWorker(c *cluster, refuse *atomic.Bool) *engine.Runtime {
	c.t.Helper()
	p := pipeline.Pipeline{ID: "p.refuse", Steps: []pipeline.Step{
		pipeline.NewStep("check", func(_ context.Context, _ pipeline.StepInfo, in order) (order, error) {
			if refuse.Load() {
				return order{}, pipeline.NonRetryable("refused", errors.New("no"))
			}
			return in, nil
		}),
	}}
	reg, err := pipeline.NewRegistry(p)
	if err != nil {
		c.t.Fatal(err)
	}
	records := recordingLister{memory.NewDeadLetters(nil)}
	rt, err := engine.New(engine.Config{WorkerID: "w", ExecutionTTL: day, Retry: fastRetry}, engine.Deps{
		Registry: reg, Store: c.store, Payloads: c.payloads, Effects: c.effects, Dispatcher: c.queue,
		DeadLetter: records, DeadLetters: records,
		Logger: slog.New(slog.NewJSONHandler(c.logs, nil)),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return rt
}

// views returns the tenant t1's dead-letter views of one query, one page.
func views(t *testing.T, rt *engine.Runtime, q engine.DeadLetterViewQuery) engine.DeadLetterViewPage {
	t.Helper()
	q.TenantID = "t1"
	page, err := rt.DeadLetterViews(context.Background(), q)
	if err != nil {
		t.Fatalf("DeadLetterViews: %v", err)
	}
	return page
}

// describe renders a view as "<transition key> <current status or gone> <outstanding>".
func describe(v engine.DeadLetterView) string {
	cur := "gone"
	if v.Current != nil {
		cur = string(v.Current.Status)
	}
	out := "done"
	if v.Outstanding {
		out = "outstanding"
	}
	return v.Envelope.TransitionKey + " " + cur + " " + out
}

func describeAll(vs []engine.DeadLetterView) string {
	var s []string
	for _, v := range vs {
		s = append(s, describe(v))
	}
	return strings.Join(s, ", ")
}

// TestDeadLetterViewsTellWhatBecameOfEachExecution: a dead letter whose
// execution was re-driven and succeeded shows it SUCCEEDED and not
// outstanding; one re-driven into a second dead letter shows its newer
// record outstanding and the older one not; once the rows expire (the
// records outlive them) every view's execution is gone. The counts by
// code follow.
func TestDeadLetterViewsTellWhatBecameOfEachExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var refuse atomic.Bool
		refuse.Store(true)
		rt := deadLetterWorker(c, &refuse)
		ctx := context.Background()
		a := submitTo(t, rt, "p.refuse", "a", order{Amount: 1})
		runAll(t, rt, c.queue)
		time.Sleep(time.Second)
		b := submitTo(t, rt, "p.refuse", "b", order{Amount: 2})
		runAll(t, rt, c.queue)
		time.Sleep(time.Second)
		got := views(t, rt, engine.DeadLetterViewQuery{})
		want := b.ExecutionID + ":0:1 DLQ outstanding, " + a.ExecutionID + ":0:1 DLQ outstanding"
		if s := describeAll(got.DeadLetters); s != want || got.Cursor != "" {
			t.Fatalf("before any re-drive: %s (cursor %q)\nwant %s", s, got.Cursor, want)
		}

		// a: re-driven with the cause fixed, it succeeds.
		refuse.Store(false)
		if _, err := rt.Redrive(ctx, a.Key(), "fixed", nil); err != nil {
			t.Fatal(err)
		}
		runAll(t, rt, c.queue)
		time.Sleep(time.Second)
		// b: re-driven too early, it dead-letters again (attempt 2).
		refuse.Store(true)
		if _, err := rt.Redrive(ctx, b.Key(), "try again", nil); err != nil {
			t.Fatal(err)
		}
		runAll(t, rt, c.queue)
		got = views(t, rt, engine.DeadLetterViewQuery{})
		want = b.ExecutionID + ":0:2 DLQ outstanding, " + b.ExecutionID + ":0:1 DLQ done, " + a.ExecutionID + ":0:1 SUCCEEDED done"
		if s := describeAll(got.DeadLetters); s != want {
			t.Fatalf("after the re-drives: %s\nwant %s", s, want)
		}
		if cur := got.DeadLetters[2].Current; cur.ExecutionID != a.ExecutionID || cur.RedriveCount != 1 || cur.Version < 2 {
			t.Fatalf("a's current row %+v", cur)
		}
		only := views(t, rt, engine.DeadLetterViewQuery{OutstandingOnly: true})
		if s := describeAll(only.DeadLetters); s != b.ExecutionID+":0:2 DLQ outstanding" || only.Cursor != "" {
			t.Fatalf("outstanding only: %s (cursor %q)", s, only.Cursor)
		}
		counts, err := rt.DeadLetterCounts(ctx, deadletter.ListQuery{TenantID: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		if counts.ByCode["refused"] != 3 || len(counts.ByCode) != 1 || counts.Outstanding["refused"] != 1 || len(counts.Outstanding) != 1 ||
			counts.Scanned != 3 || !counts.Complete {
			t.Fatalf("counts %+v; want 3 refused, 1 outstanding, all 3 scanned", counts)
		}
		if other, err := rt.DeadLetterViews(ctx, engine.DeadLetterViewQuery{ListQuery: deadletter.ListQuery{TenantID: "t2"}}); err != nil || len(other.DeadLetters) != 0 {
			t.Fatalf("another tenant's views: %d, %v", len(other.DeadLetters), err)
		}

		// The rows expire (a retention after they ended); the records stay.
		time.Sleep(day + time.Hour)
		got = views(t, rt, engine.DeadLetterViewQuery{})
		want = b.ExecutionID + ":0:2 gone done, " + b.ExecutionID + ":0:1 gone done, " + a.ExecutionID + ":0:1 gone done"
		if s := describeAll(got.DeadLetters); s != want {
			t.Fatalf("after the rows expired: %s\nwant %s", s, want)
		}
		if counts, err := rt.DeadLetterCounts(ctx, deadletter.ListQuery{TenantID: "t1"}); err != nil || counts.ByCode["refused"] != 3 || len(counts.Outstanding) != 0 {
			t.Fatalf("counts after expiry %+v, %v", counts, err)
		}
	})
}

// TestOutstandingOnlyReadsABoundedNumberOfPages: with most records
// settled, an outstanding-only page reads a bounded number of list pages
// and may come back short (even empty) with a cursor; following the
// cursors finds every outstanding record once, newest first.
func TestOutstandingOnlyReadsABoundedNumberOfPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var refuse atomic.Bool
		refuse.Store(true)
		rt := deadLetterWorker(c, &refuse)
		var ids []string
		for i := range 7 {
			e := submitTo(t, rt, "p.refuse", "k"+string(rune('a'+i)), order{Amount: i})
			runAll(t, rt, c.queue)
			ids = append(ids, e.ExecutionID)
			time.Sleep(time.Second)
		}
		// The two oldest stay outstanding; the five newest are settled.
		refuse.Store(false)
		for _, id := range ids[2:] {
			if _, err := rt.Redrive(context.Background(), store.Key{TenantID: "t1", ExecutionID: id}, "fixed", nil); err != nil {
				t.Fatal(err)
			}
		}
		runAll(t, rt, c.queue)
		first := views(t, rt, engine.DeadLetterViewQuery{ListQuery: deadletter.ListQuery{Limit: 1}, OutstandingOnly: true})
		if len(first.DeadLetters) != 0 || first.Cursor == "" {
			t.Fatalf("first page: %s, cursor %q; want none (4 pages of 1 settled record read) and a cursor", describeAll(first.DeadLetters), first.Cursor)
		}
		var found []string
		cursor, pages := first.Cursor, 1
		for cursor != "" && pages < 10 {
			p := views(t, rt, engine.DeadLetterViewQuery{ListQuery: deadletter.ListQuery{Limit: 1, Cursor: cursor}, OutstandingOnly: true})
			for _, v := range p.DeadLetters {
				found = append(found, v.ExecutionID)
			}
			cursor = p.Cursor
			pages++
		}
		if want := ids[1] + "," + ids[0]; strings.Join(found, ",") != want || cursor != "" {
			t.Fatalf("outstanding found %v (cursor %q), want %s", found, cursor, want)
		}
	})
}

// TestDeadLetterCountsStopAtTheBound: past the bound the counts cover the
// newest records only and say they are not complete.
func TestDeadLetterCountsStopAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var refuse atomic.Bool
		refuse.Store(true)
		rt := deadLetterWorker(c, &refuse)
		for i := range 3 {
			submitTo(t, rt, "p.refuse", "k"+string(rune('a'+i)), order{Amount: i})
			runAll(t, rt, c.queue)
			time.Sleep(time.Second)
		}
		engine.SetDeadLetterCountLimit(t, 2)
		q := deadletter.ListQuery{TenantID: "t1", Limit: 1, Cursor: "ignored"}
		counts, err := rt.DeadLetterCounts(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if counts.Scanned != 2 || counts.Complete || counts.ByCode["refused"] != 2 || counts.Outstanding["refused"] != 2 {
			t.Fatalf("counts past the bound %+v; want 2 scanned, not complete", counts)
		}
		engine.SetDeadLetterCountLimit(t, 3)
		if counts, err = rt.DeadLetterCounts(context.Background(), q); err != nil || counts.Scanned != 3 || !counts.Complete {
			t.Fatalf("counts at the bound %+v, %v; want 3 scanned, complete", counts, err)
		}
	})
}

// TestDeadLetterViewsWithoutALister: a runtime without a dead-letter
// lister says so.
func TestDeadLetterViewsWithoutALister(t *testing.T) {
	h := newHarness(t, engine.Config{})
	if _, err := h.rt.DeadLetterViews(context.Background(), engine.DeadLetterViewQuery{ListQuery: deadletter.ListQuery{TenantID: "t1"}}); !errors.Is(err, engine.ErrDeadLettersUnavailable) {
		t.Fatalf("DeadLetterViews err = %v", err)
	}
	if _, err := h.rt.DeadLetterCounts(context.Background(), deadletter.ListQuery{TenantID: "t1"}); !errors.Is(err, engine.ErrDeadLettersUnavailable) {
		t.Fatalf("DeadLetterCounts err = %v", err)
	}
}

// TestInputReadsTheSubmittedPayload: the input of an execution in any
// status, through the payload store when it is not inline; another
// tenant's is not found; InputWithin refuses a larger input, naming its
// size, without reading it.
func TestInputReadsTheSubmittedPayload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var refuse atomic.Bool
		refuse.Store(true)
		rt := deadLetterWorker(c, &refuse)
		ctx := context.Background()
		in := order{Amount: 7, Pad: strings.Repeat("p", 2000)} // above the inline budget: stored
		e := submitTo(t, rt, "p.refuse", "k", in)
		runAll(t, rt, c.queue)
		row, p, err := rt.Input(ctx, e.Key())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := payload.JSON(in)
		if row.Status != store.DLQ || string(p.Data) != string(want.Data) || p.Encoding != payload.EncodingJSON || row.Input.ManifestID == "" {
			t.Fatalf("Input = %s, %d bytes %q (manifest %q)", row.Status, len(p.Data), p.Encoding, row.Input.ManifestID)
		}
		if _, _, err := rt.Input(ctx, store.Key{TenantID: "t2", ExecutionID: e.ExecutionID}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's input err = %v, want ErrNotFound", err)
		}
		row, p, err = rt.InputWithin(ctx, e.Key(), 100)
		if !errors.Is(err, engine.ErrPayloadTooLarge) || p.Data != nil || row.Input.Length != int64(len(want.Data)) {
			t.Fatalf("InputWithin(100) = %d bytes, length %d, %v; want ErrPayloadTooLarge", len(p.Data), row.Input.Length, err)
		}
		if _, p, err = rt.InputWithin(ctx, e.Key(), int64(len(want.Data))); err != nil || len(p.Data) != len(want.Data) {
			t.Fatalf("InputWithin(its size) = %d bytes, %v", len(p.Data), err)
		}
	})
}
