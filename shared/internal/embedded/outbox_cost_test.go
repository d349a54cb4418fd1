package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

// TestOutboxCost measures what the outbox costs the embedded store, in
// its group commit's writes (Stats): a 4-step execution's writes are the
// same with every event type opted into and with none (the records are
// put in the transitions' own transactions: no write, commit or fsync of
// their own), and draining them is one write (the delete of a batch of
// up to 100 acknowledged records).
func TestOutboxCost(t *testing.T) {
	run := func(types outbox.Types) (writes uint64, recs int, drainWrites uint64) {
		clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		db, err := embedded.Open(t.TempDir(), embedded.Options{Clock: clk, NoControl: true, NoSync: true, Events: types})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		st := db.State(clk)
		ctx := context.Background()
		before := db.Stats().Writes
		now := clk.Now()
		row := store.Execution{TenantID: "t", ExecutionID: "e.a", PipelineID: "p", Status: store.Queued, Version: 1, StepName: "s0",
			CreateToken: "tok", CreatedAt: now, UpdatedAt: now, NextDueAt: now, ExpiresAt: now.Add(time.Hour)}
		if _, _, err := st.CreateOrGet(ctx, store.CreateRequest{Execution: row}); err != nil {
			t.Fatal(err)
		}
		cur, err := st.Claim(ctx, store.ClaimRequest{Key: row.Key(), ExpectVersion: 1, Owner: "w", Now: now, DueBy: now, TakeoverBy: now,
			LeaseUntil: now.Add(time.Minute), Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		for step := 1; step <= 4; step++ { // each commit claims the next step (chained), the last ends it
			next := cur
			next.UpdatedAt = now.Add(time.Duration(step) * time.Second)
			if step < 4 {
				next.StepIndex, next.StepName, next.Attempt = step, "s", 1
			} else {
				next.Status, next.LeaseOwner, next.LeaseExpiresAt, next.SweepAt, next.NextDueAt = store.Succeeded, "", time.Time{}, time.Time{}, time.Time{}
			}
			if cur, err = st.Update(ctx, store.Guard{Key: row.Key(), Version: cur.Version, LeaseOwner: "w"}, next); err != nil {
				t.Fatal(err)
			}
		}
		writes = db.Stats().Writes - before
		pending, err := st.Pending(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		before = db.Stats().Writes
		if _, _, err := outbox.NewDrainer(st, &outbox.MemorySink{}, outbox.DrainOptions{}).Drain(ctx); err != nil {
			t.Fatal(err)
		}
		return writes, len(pending), db.Stats().Writes - before
	}
	offWrites, offRecs, _ := run(nil)
	onWrites, onRecs, drain := run(outbox.Types{history.Submitted: true, history.StepStarted: true, history.StepSucceeded: true, history.Succeeded: true})
	termWrites, termRecs, termDrain := run(outbox.Types{history.Succeeded: true})
	t.Logf("4 steps: %d writes with no event type (%d records), %d with the terminal types (%d records, drained in %d write), %d with step-level types too (%d records, drained in %d write)",
		offWrites, offRecs, termWrites, termRecs, termDrain, onWrites, onRecs, drain)
	if offWrites != onWrites || offWrites != termWrites || offRecs != 0 || termRecs != 1 || onRecs != 10 || drain != 1 || termDrain != 1 {
		t.Errorf("writes %d/%d/%d, records %d/%d/%d, drain writes %d/%d: want equal writes, 0/1/10 records, 1 drain write",
			offWrites, termWrites, onWrites, offRecs, termRecs, onRecs, termDrain, drain)
	}
}
