package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

var epoch = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// row is a new QUEUED execution of tenant t, created at epoch+minute.
func row(t, id string, minute int) store.Execution {
	at := epoch.Add(time.Duration(minute) * time.Minute)
	return store.Execution{TenantID: t, ExecutionID: id, PipelineID: "p.one", Status: store.Queued, Version: 1, StepName: "s0", Attempt: 1,
		NextDueAt: at, SweepAt: at.Add(10 * time.Second), Fingerprint: "fp-" + id, CreateToken: "ct-" + id,
		Input:     payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 2, SHA256: payload.Digest([]byte("{}")), Inline: []byte("{}")},
		CreatedAt: at, UpdatedAt: at, ExpiresAt: at.Add(24 * time.Hour)}
}

func mustCreate(t *testing.T, s *embedded.State, e store.Execution) store.Execution {
	t.Helper()
	got, created, err := s.CreateOrGet(context.Background(), store.CreateRequest{Execution: e})
	if err != nil || !created {
		t.Fatalf("CreateOrGet(%s): created %v, %v", e.ExecutionID, created, err)
	}
	return got
}

// collector records delivered work items.
type collector struct {
	mu  sync.Mutex
	got []dispatch.WorkItem
	ch  chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 100)} }

func (c *collector) handle(_ context.Context, it dispatch.WorkItem) error {
	c.mu.Lock()
	c.got = append(c.got, it)
	c.mu.Unlock()
	c.ch <- struct{}{}
	return nil
}

func (c *collector) wait(t *testing.T, n int) []dispatch.WorkItem {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		if len(c.got) >= n {
			out := append([]dispatch.WorkItem(nil), c.got...)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("%d deliveries, want %d", len(c.got), n)
		}
	}
}

// TestCommitAndHandOverAreOneWrite: a row written QUEUED has its work
// item queued by that very commit: the engine's Dispatch after it writes
// nothing more, a store closed right after the commit (a crash between
// the commit and its hand-over) still delivers the item when reopened,
// and the claim consumes the entry without a write of its own.
func TestCommitAndHandOverAreOneWrite(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(epoch)
	db, err := embedded.Open(dir, embedded.Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	st := db.State(nil)
	before := db.Stats().Commits
	e := mustCreate(t, st, row("t1", "a", 0))
	if n := db.Stats().Commits - before; n != 1 {
		t.Fatalf("create took %d commits, want 1", n)
	}
	d := db.NewDispatcher(newCollector().handle, embedded.DispatcherOptions{})
	item := dispatch.ItemOf(&e) // what the engine dispatches: the row's rank rides on it
	if err := d.Dispatch(context.Background(), dispatch.Message{Item: item}); err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().Commits - before; n != 1 {
		t.Fatalf("the Dispatch after the create wrote: %d commits, want 1", n)
	}
	if err := db.Close(); err != nil { // the process stops before any hand-over
		t.Fatal(err)
	}

	db, err = embedded.Open(dir, embedded.Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := newCollector()
	st = db.State(nil)
	claimed := make(chan error, 1)
	d = db.NewDispatcher(func(ctx context.Context, it dispatch.WorkItem) error {
		_, err := st.Claim(ctx, store.ClaimRequest{Key: e.Key(), ExpectVersion: 1, Owner: "w", Now: clk.Now(), DueBy: clk.Now(), TakeoverBy: clk.Now(),
			LeaseUntil: clk.Now().Add(time.Minute), Attempt: 1})
		claimed <- err
		return got.handle(ctx, it)
	}, embedded.DispatcherOptions{Workers: 2})
	d.Start()
	defer d.Close(context.Background())
	if items := got.wait(t, 1); items[0] != item {
		t.Fatalf("delivered %+v, want %+v", items[0], item)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if s := db.Stats(); s.Writes != 1 {
		t.Fatalf("after the delivery: %d writes, want 1 (the claim; it removed the entry)", s.Writes)
	}
}

// claiming is a handler that claims the item's row, as the engine's
// Process does, then records the item.
func claiming(st *embedded.State, c *collector) dispatch.Handler {
	return func(ctx context.Context, it dispatch.WorkItem) error {
		k := store.Key{TenantID: it.TenantID, ExecutionID: it.ExecutionID}
		e, err := st.Get(ctx, k)
		if err != nil {
			return err
		}
		now := time.Now()
		if _, err := st.Claim(ctx, store.ClaimRequest{Key: k, ExpectVersion: e.Version, Owner: "w", Now: now, DueBy: now, TakeoverBy: now,
			LeaseUntil: now.Add(time.Minute), Attempt: 1}); err != nil {
			return err
		}
		return c.handle(ctx, it)
	}
}

// TestQueueDeliversDueItemsAndWakesAtOnce: a commit wakes an idle worker
// at once (no poll interval), and a row due later is delivered no earlier
// than its due time. The workers idle with a row due in an hour, so their
// timers would sleep that long: a row due now is delivered only because
// its commit woke them.
func TestQueueDeliversDueItemsAndWakesAtOnce(t *testing.T) {
	db := open(t, embedded.Options{})
	st := db.State(nil)
	c := newCollector()
	d := db.NewDispatcher(claiming(st, c), embedded.DispatcherOptions{Workers: 2})
	d.Start()
	defer d.Close(context.Background())
	create := func(id string, due time.Duration) time.Time {
		now := time.Now().Truncate(time.Millisecond)
		r := row("t1", id, 0)
		r.NextDueAt, r.CreatedAt, r.UpdatedAt, r.ExpiresAt = now.Add(due), now, now, now.Add(2*time.Hour)
		mustCreate(t, st, r)
		return now
	}
	create("far", time.Hour)
	time.Sleep(20 * time.Millisecond) // the workers go back to sleep, until the far row is due
	create("soon", 0)
	if items := c.wait(t, 1); items[0].ExecutionID != "soon" {
		t.Fatalf("first delivery %s, want soon", items[0].ExecutionID)
	}
	created := create("later", 300*time.Millisecond)
	items := c.wait(t, 2)
	if items[1].ExecutionID != "later" || time.Since(created) < 300*time.Millisecond {
		t.Fatalf("second delivery %s after %v, want later, no earlier than its due time (300ms)", items[1].ExecutionID, time.Since(created))
	}
	if got := c.wait(t, 2); len(got) != 2 {
		t.Fatalf("deliveries %+v: the row due in an hour was delivered", got)
	}
}

// TestGroupCommitBatchesConcurrentWriters: concurrent writers share
// commits (each one fsync'd before any of its writers is answered).
func TestGroupCommitBatchesConcurrentWriters(t *testing.T) {
	db := open(t, embedded.Options{})
	st := db.State(nil)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() { mustCreate(t, st, row("t1", fmt.Sprint("x", i), i)) })
	}
	wg.Wait()
	s := db.Stats()
	if s.Writes < 64 || s.Commits >= s.Writes {
		t.Fatalf("%d writes in %d commits, want fewer commits than writes", s.Writes, s.Commits)
	}
	t.Logf("%d writes in %d commits", s.Writes, s.Commits)
}

// TestSecondOpenRefused: a second Open of a directory in use fails with
// ErrLocked, naming the holder; after Close it opens.
func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := embedded.Open(dir, embedded.Options{NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = embedded.Open(dir, embedded.Options{NoControl: true})
	if !errors.Is(err, embedded.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second Open: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	_ = db.Close()
	db, err = embedded.Open(dir, embedded.Options{NoControl: true})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	_ = db.Close()
}

// TestListNewestFirstWithFiltersAndCursors: a tenant's executions newest
// first, filtered by pipeline, status and creation time, paged with
// cursors that visit each row once; another tenant's rows never; a
// cursor of another query refused.
func TestListNewestFirstWithFiltersAndCursors(t *testing.T) {
	db := open(t, embedded.Options{Clock: clock.NewFake(epoch)})
	st := db.State(nil)
	ctx := context.Background()
	for i := range 12 {
		e := row("t1", fmt.Sprintf("e%02d", i), i)
		if i%3 == 0 {
			e.PipelineID = "p.two"
		}
		mustCreate(t, st, e)
	}
	mustCreate(t, st, row("t2", "other", 30))
	// Two rows in the same millisecond: ordered by id, descending.
	mustCreate(t, st, row("t1", "tie-a", 20))
	mustCreate(t, st, row("t1", "tie-b", 20))
	var ids []string
	q := store.ListQuery{TenantID: "t1", Limit: 4}
	for pages := 0; ; pages++ {
		page, err := st.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Executions {
			ids = append(ids, e.ExecutionID)
		}
		if page.Cursor == "" {
			break
		}
		q.Cursor = page.Cursor
	}
	want := "tie-b tie-a e11 e10 e09 e08 e07 e06 e05 e04 e03 e02 e01 e00"
	if got := strings.Join(ids, " "); got != want {
		t.Fatalf("list\n got  %s\n want %s", got, want)
	}
	page, err := st.List(ctx, store.ListQuery{TenantID: "t1", PipelineID: "p.two", CreatedBefore: epoch.Add(9 * time.Minute), CreatedAfter: epoch})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Executions {
		got = append(got, e.ExecutionID)
	}
	if strings.Join(got, " ") != "e06 e03" || page.Cursor != "" {
		t.Fatalf("filtered list %v (cursor %q), want e06 e03", got, page.Cursor)
	}
	if page, err := st.List(ctx, store.ListQuery{TenantID: "t1", Statuses: []store.Status{store.Succeeded}}); err != nil || len(page.Executions) != 0 {
		t.Fatalf("no SUCCEEDED rows: %d, %v", len(page.Executions), err)
	}
	first, _ := st.List(ctx, store.ListQuery{TenantID: "t1", Limit: 2})
	if _, err := st.List(ctx, store.ListQuery{TenantID: "t1", PipelineID: "p.one", Cursor: first.Cursor}); !errors.Is(err, store.ErrInvalidCursor) {
		t.Fatalf("cursor of another query: %v, want ErrInvalidCursor", err)
	}
	if _, err := st.List(ctx, store.ListQuery{TenantID: "t1", Statuses: []store.Status{"NOPE"}}); err == nil {
		t.Fatal("unknown status accepted")
	}
}

// TestHistoryRecordedWithEachWrite: each row write records its events in
// the same transaction, read back in commit order and numbered from 1; a
// renewal adds nothing; an unknown execution or another tenant's is
// ErrNotFound.
func TestHistoryRecordedWithEachWrite(t *testing.T) {
	clk := clock.NewFake(epoch)
	db := open(t, embedded.Options{Clock: clk})
	st := db.State(nil)
	ctx := context.Background()
	e := mustCreate(t, st, row("t1", "h", 0))
	now := clk.Now()
	claimed, err := st.Claim(ctx, store.ClaimRequest{Key: e.Key(), ExpectVersion: 1, Owner: "w1", Now: now, DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(time.Minute), Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Renew(ctx, e.Key(), "w1", claimed.Version, now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	done := claimed
	done.Status, done.LeaseOwner, done.LeaseExpiresAt, done.SweepAt, done.UpdatedAt = store.Succeeded, "", time.Time{}, time.Time{}, now.Add(time.Second)
	if _, err := st.Update(ctx, store.Guard{Key: e.Key(), Version: claimed.Version, LeaseOwner: "w1"}, done); err != nil {
		t.Fatal(err)
	}
	events, err := st.History(ctx, e.Key())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, ev := range events {
		if ev.Seq != i+1 {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		types = append(types, string(ev.Type))
	}
	if got := strings.Join(types, " "); !strings.HasPrefix(got, "SUBMITTED STEP_STARTED") || !strings.HasSuffix(got, string(history.Succeeded)) {
		t.Fatalf("history %s", got)
	}
	if events[1].Worker != "w1" || events[1].Version != 2 {
		t.Fatalf("STEP_STARTED %+v", events[1])
	}
	for _, k := range []store.Key{{TenantID: "t2", ExecutionID: "h"}, {TenantID: "t1", ExecutionID: "nope"}} {
		if _, err := st.History(ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("History(%v) = %v, want ErrNotFound", k, err)
		}
	}
}

// TestBreakLeasesAtOpen: with BreakLeases, a RUNNING row left by a dead
// process (the directory's lock proves it dead) is queued for a takeover
// at once instead of after its lease lapses; its lease is ended, not
// given an invented expiry (the takeover's history would name it).
func TestBreakLeasesAtOpen(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(epoch)
	db, err := embedded.Open(dir, embedded.Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	st := db.State(nil)
	e := mustCreate(t, st, row("t1", "r", 0))
	now := clk.Now()
	if _, err := st.Claim(context.Background(), store.ClaimRequest{Key: e.Key(), ExpectVersion: 1, Owner: "dead", Now: now, DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(time.Hour), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	db, err = embedded.Open(dir, embedded.Options{Clock: clk, NoControl: true, BreakLeases: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.State(nil).Get(context.Background(), e.Key())
	if err != nil || got.Status != store.Running || !got.LeaseExpiresAt.IsZero() || got.Version != 2 {
		t.Fatalf("after open: %+v, %v; want RUNNING at version 2 with its lease ended (no expiry)", got, err)
	}
	c := newCollector()
	d := db.NewDispatcher(c.handle, embedded.DispatcherOptions{})
	d.Start()
	defer d.Close(context.Background())
	if items := c.wait(t, 1); items[0].ExecutionID != "r" {
		t.Fatalf("delivered %+v", items[0])
	}
}

// TestBackupWhileServing: Backup asks the process holding the directory
// for a consistent copy while it writes, the copy opens as a store with
// the rows written before the backup began; with no process running,
// Backup reads the file itself.
func TestBackupWhileServing(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(epoch)
	db, err := embedded.Open(dir, embedded.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	st := db.State(nil)
	for i := range 50 {
		mustCreate(t, st, row("t1", fmt.Sprint("b", i), i))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // writers go on during the backup
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mustCreate(t, st, row("t1", fmt.Sprint("during", i), i))
		}
	})
	to := filepath.Join(t.TempDir(), "copy.db")
	info, err := embedded.Backup(context.Background(), dir, to)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !info.FromServer || info.Schema != embedded.SchemaVersion || info.Executions < 50 {
		t.Fatalf("backup %+v", info)
	}
	_ = db.Close()

	restored := t.TempDir()
	data, err := os.ReadFile(to)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restored, embedded.FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	rdb, err := embedded.Open(restored, embedded.Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatalf("open the restored copy: %v", err)
	}
	if got, err := rdb.State(nil).Get(context.Background(), store.Key{TenantID: "t1", ExecutionID: "b49"}); err != nil || got.ExecutionID != "b49" {
		t.Fatalf("restored row: %+v, %v", got, err)
	}
	_ = rdb.Close()

	offline, err := embedded.Backup(context.Background(), dir, filepath.Join(t.TempDir(), "offline.db"))
	if err != nil || offline.FromServer || offline.Executions < info.Executions {
		t.Fatalf("backup without a server: %+v, %v", offline, err)
	}
}

// TestExpireDeletesExpiredRowsAndTheirEntries: Expire deletes what is
// past its TTL (rows with their index entries, history and queue entry;
// dead-letter records; jobs with their active entry, and their pages),
// keeps the rest, and the deleted rows' keys bind
// anew.
func TestExpireDeletesExpiredRowsAndTheirEntries(t *testing.T) {
	clk := clock.NewFake(epoch)
	db := open(t, embedded.Options{Clock: clk})
	st := db.State(nil)
	ctx := context.Background()
	old := mustCreate(t, st, row("t1", "old", 0))
	young := row("t1", "young", 0)
	young.ExpiresAt = epoch.Add(72 * time.Hour)
	mustCreate(t, st, young)
	dl := db.DeadLetters(nil)
	if _, err := dl.Put(ctx, deadletter.Record{ID: "d1", Kind: deadletter.KindExecution, TenantID: "t1", RecordedAt: epoch, ExpiresAt: epoch.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Jobs: one expiring with its page, one kept.
	for _, j := range []store.Job{
		{Key: store.JobKey{TenantID: "t1", ID: "done"}, Active: true, CreatedAt: epoch, UpdatedAt: epoch, ExpiresAt: epoch.Add(time.Hour)},
		{Key: store.JobKey{TenantID: "t1", ID: "kept"}, Active: true, CreatedAt: epoch, UpdatedAt: epoch, ExpiresAt: epoch.Add(72 * time.Hour)},
	} {
		if err := st.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		if err := st.PutJobPage(ctx, j.Key, 0, []string{"a", "b"}, j.ExpiresAt); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(48 * time.Hour)
	n, err := db.Expire(ctx)
	if err != nil || n != 4 {
		t.Fatalf("Expire = %d, %v; want 4 (a row, a record, a job and its page)", n, err)
	}
	if active, err := st.ActiveJobs(ctx); err != nil || len(active) != 1 || active[0].Key.ID != "kept" {
		t.Fatalf("active jobs after expiry: %+v, %v; want the kept one", active, err)
	}
	if ids, err := st.JobPage(ctx, store.JobKey{TenantID: "t1", ID: "kept"}, 0); err != nil || len(ids) != 2 {
		t.Fatalf("the kept job's page: %v, %v", ids, err)
	}
	if page, _ := st.List(ctx, store.ListQuery{TenantID: "t1"}); len(page.Executions) != 1 || page.Executions[0].ExecutionID != "young" {
		t.Fatalf("list after expiry: %+v", page.Executions)
	}
	if due, _ := st.Due(ctx, store.DueQuery{By: clk.Now(), Limit: 10}); len(due.Refs) != 1 {
		t.Fatalf("sweep index after expiry: %+v", due.Refs)
	}
	again := row("t1", "old", 0)
	again.CreateToken, again.ExpiresAt = "new", clk.Now().Add(time.Hour)
	if _, created, err := st.CreateOrGet(ctx, store.CreateRequest{Execution: again}); err != nil || !created {
		t.Fatalf("the expired key binds anew: created %v, %v", created, err)
	}
	if events, err := st.History(ctx, old.Key()); err != nil || len(events) != 1 {
		t.Fatalf("history of the new execution: %d events, %v; want its SUBMITTED only", len(events), err)
	}
}

// TestCancelledRowLeavesTheQueueAndTheSweepSet: the write that makes a
// QUEUED row CANCELLED (as the engine's Cancel writes it: no sweep time,
// nothing due) removes its queue entry and its sweep entry in that same
// commit and records CANCEL_REQUESTED and CANCELLED; a Dispatch of its
// item afterwards (one that raced the cancel) writes nothing, so the
// queue never delivers a CANCELLED row.
func TestCancelledRowLeavesTheQueueAndTheSweepSet(t *testing.T) {
	clk := clock.NewFake(epoch)
	db := open(t, embedded.Options{Clock: clk})
	st := db.State(nil)
	ctx := context.Background()
	e := mustCreate(t, st, row("t1", "c", 0))
	if q := db.Queued(); len(q) != 1 {
		t.Fatalf("queued %+v, want the new row's item", q)
	}
	next := e
	next.Status, next.SweepAt, next.NextDueAt = store.Cancelled, time.Time{}, time.Time{}
	next.CancelReason, next.CancelRequestedAt, next.UpdatedAt = "not needed", clk.Now(), clk.Now()
	before := db.Stats().Commits
	if _, err := st.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next); err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().Commits - before; n != 1 {
		t.Fatalf("the cancel took %d commits, want 1", n)
	}
	if q := db.Queued(); len(q) != 0 {
		t.Fatalf("the cancelled row is still queued: %+v", q)
	}
	if due, err := st.Due(ctx, store.DueQuery{By: clk.Now().Add(time.Hour), Limit: 10}); err != nil || len(due.Refs) != 0 {
		t.Fatalf("sweep index after the cancel: %+v, %v; want empty", due.Refs, err)
	}
	events, err := st.History(ctx, e.Key())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range events {
		types = append(types, string(ev.Type))
	}
	if got := strings.Join(types, " "); got != "SUBMITTED CANCEL_REQUESTED CANCELLED" || events[2].Reason != "not needed" || events[2].Seq != 3 {
		t.Fatalf("history %s (%+v), want SUBMITTED CANCEL_REQUESTED CANCELLED with the reason", got, events)
	}
	got := newCollector()
	d := db.NewDispatcher(got.handle, embedded.DispatcherOptions{})
	d.Start()
	defer d.Close(ctx)
	before = db.Stats().Commits
	if err := d.Dispatch(ctx, dispatch.Message{Item: dispatch.WorkItem{TenantID: "t1", ExecutionID: "c", PipelineID: "p.one"}}); err != nil {
		t.Fatal(err)
	}
	if q := db.Queued(); len(q) != 0 {
		t.Fatalf("a Dispatch of the cancelled row's item queued %+v", q)
	}
	// Another execution's item is queued as ever (and delivered).
	if err := d.Dispatch(ctx, dispatch.Message{Item: dispatch.WorkItem{TenantID: "t1", ExecutionID: "other", PipelineID: "p.one"}}); err != nil {
		t.Fatal(err)
	}
	if items := got.wait(t, 1); len(items) != 1 || items[0].ExecutionID != "other" {
		t.Fatalf("delivered %+v, want only the other execution's item", items)
	}
}

// TestExpireDeletesIdleRateBuckets: Expire deletes a rate limit bucket a
// store.RateRecordTTL after its theoretical arrival time and keeps one in
// use; a bucket deleted reads as unused (its burst whole again).
func TestExpireDeletesIdleRateBuckets(t *testing.T) {
	clk := clock.NewFake(epoch)
	db := open(t, embedded.Options{Clock: clk})
	st := db.State(nil)
	ctx := context.Background()
	reserve := func(key string) (time.Time, bool) {
		at, ok, err := st.Reserve(ctx, store.RateScope{TenantID: "t1", Limit: "api", Key: key}, time.Minute, 1, time.Hour, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		return at, ok
	}
	reserve("idle")
	reserve("idle") // tat two minutes out
	clk.Advance(store.RateRecordTTL + 3*time.Minute)
	reserve("busy")
	n, err := db.Expire(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Expire = %d, %v; want 1 (the idle bucket)", n, err)
	}
	if at, ok := reserve("idle"); !ok || !at.Equal(clk.Now()) {
		t.Fatalf("the expired bucket reserved %s (ok %v), want now", at, ok)
	}
	if at, _ := reserve("busy"); !at.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("the kept bucket reserved %s, want a minute out", at)
	}
}
