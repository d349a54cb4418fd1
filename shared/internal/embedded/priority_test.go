package embedded_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/embedded"
)

// TestDueItemsDeliveredByRank: of the queue's due entries, the one of the
// smallest rank is delivered first, whatever order they became due in;
// an entry not due yet waits however small its rank; a row written
// before priorities (no rank) ranks at its creation.
func TestDueItemsDeliveredByRank(t *testing.T) {
	clk := clock.NewFake(epoch.Add(5 * time.Minute))
	db, err := embedded.Open(t.TempDir(), embedded.Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := db.State(nil)
	for _, r := range []struct {
		id           string
		minute, rank int // rank in minutes after the epoch; -1: none
	}{{"low", 0, 4}, {"urgent", 1, 1}, {"mid", 2, 3}, {"old", 2, -1}, {"later", 10, 0}} {
		e := row("t1", r.id, r.minute)
		if r.rank >= 0 {
			e.Priority, e.Rank = 3, epoch.Add(time.Duration(r.rank)*time.Minute)
		}
		mustCreate(t, st, e)
	}
	got := newCollector()
	// Each delivery is recorded and handed back for an hour (the row is
	// not claimed: its entry stays).
	d := db.NewDispatcher(func(ctx context.Context, it dispatch.WorkItem) error {
		_ = got.handle(ctx, it)
		return &dispatch.RetryAfterError{Delay: time.Hour, Reason: "test"}
	}, embedded.DispatcherOptions{})
	for d.DeliverOne() {
	}
	var order []string
	for _, it := range got.got {
		order = append(order, it.ExecutionID)
	}
	if want := []string{"urgent", "old", "mid", "low"}; !slices.Equal(order, want) {
		t.Fatalf("delivered %v, want %v (smallest rank first; later not due)", order, want)
	}
	if it := got.got[0]; it.Rank != epoch.Add(time.Minute).UnixMilli() {
		t.Fatalf("the item carries rank %d, want the row's", it.Rank)
	}
	clk.Advance(10 * time.Minute)
	if !d.DeliverOne() || got.got[len(got.got)-1].ExecutionID != "later" {
		t.Fatalf("the entry due later was not delivered once due")
	}
}
