package crashtest_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/store"
)

// checkoutHistory is the history of a checkout execution that ran its
// four steps chained, in one work item.
const checkoutHistory = "SUBMITTED STEP_STARTED STEP_SUCCEEDED STEP_STARTED STEP_SUCCEEDED STEP_STARTED STEP_SUCCEEDED STEP_STARTED STEP_SUCCEEDED SUCCEEDED"

// TestServeFeedsTheHistoryAcrossAKill: `qasync serve` on DynamoDB reads
// the execution table's stream into the history table. Executions run to
// completion; then the process is killed (SIGKILL) while another batch of
// executions runs, and a new process takes over their work and the
// stream. Every execution's history is then complete and once: the first
// batch exactly its chained steps; each of the others every row version
// from the submit to SUCCEEDED, each event once, numbered from 1 — the
// restarted feed lost nothing and doubled nothing.
func TestServeFeedsTheHistoryAcrossAKill(t *testing.T) {
	st := crashtest.NewStack(t)
	// A lease a loaded machine cannot outrun: the first batch's histories
	// are asserted exactly (chained, no takeover), and with 2 s renewals
	// at load 18 under -race came late enough that leases lapsed and
	// LEASE_TAKEN_OVER joined them. The second batch's takeover waits
	// this lease out after the kill, well inside its wait.
	env := st.Env(crashtest.Settings{"history.poll-interval": "200ms", "lease-ms": "10000"})
	reader, err := dynamo.NewHistory(st.Clients.DynamoDB, st.Store, dynamo.HistoryOptions{Table: st.Names.HistoryTable})
	if err != nil {
		t.Fatal(err)
	}
	body := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"orderId":"h-%d","items":[{"sku":"sku-%d","qty":1}],"amountCents":%d}`, i, i, 100+i))
	}
	a := crashtest.Start(t, env, "serve-a")
	first, _ := runAcross(t, []*crashtest.Server{a}, 10, crashtest.CheckoutID, body)
	for _, id := range first {
		if got := awaitHistory(t, reader, st, id); got != checkoutHistory {
			t.Errorf("history of %s:\n  %s\nwant\n  %s", id, got, checkoutHistory)
		}
	}
	// A second batch, submitted to a, which dies at once.
	var second []string
	for i := 10; i < 20; i++ {
		code, s, err := crashtest.Submit(a.Addr, crashtest.CheckoutID, "key-"+strconv.Itoa(i), body(i))
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("submit %d: %d %v", i, code, err)
		}
		second = append(second, s.ExecutionID)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	b := crashtest.Start(t, env, "serve-b")
	for _, id := range second {
		if _, ok := st.AwaitRow(context.Background(), id, 2*time.Minute, func(e store.Execution) bool { return e.Status == store.Succeeded }); !ok {
			t.Fatalf("execution %s did not succeed after the kill", id)
		}
	}
	for _, id := range second {
		row, err := st.Row(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		got := awaitVersions(t, reader, row)
		if !strings.HasPrefix(got, "SUBMITTED") || !strings.HasSuffix(got, "SUCCEEDED") {
			t.Errorf("history of %s after the kill: %s", id, got)
		}
	}
	stop(t, b)
}

// awaitHistory waits for the execution's history to end SUCCEEDED and
// returns its types.
func awaitHistory(t *testing.T, r *dynamo.History, st *crashtest.Stack, id string) string {
	t.Helper()
	k := store.Key{TenantID: "default", ExecutionID: id}
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := r.History(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(evs); n > 0 && evs[n-1].Type == history.Succeeded || time.Now().After(deadline) {
			return historyTypes(t, evs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitVersions waits until the history holds every version of the row
// (each row write yields at least one event here: no releases, no
// version waits), then checks each event is there once, in order, and
// returns the types.
func awaitVersions(t *testing.T, r *dynamo.History, row store.Execution) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := r.History(context.Background(), row.Key())
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for _, e := range evs {
			seen[e.Version] = true
		}
		if int64(len(seen)) == row.Version || time.Now().After(deadline) {
			for v := int64(1); v <= row.Version; v++ {
				if !seen[v] {
					t.Errorf("%s: no event of version %d (of %d): %s", row.ExecutionID, v, row.Version, historyTypes(t, evs))
				}
			}
			return historyTypes(t, evs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// historyTypes checks the numbering and uniqueness of a history and returns its
// types.
func historyTypes(t *testing.T, evs []history.Event) string {
	t.Helper()
	var out []string
	type at struct {
		v int64
		i int
	}
	seen := map[at]bool{}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Errorf("event %d has seq %d", i, e.Seq)
		}
		if seen[at{e.Version, e.Index}] {
			t.Errorf("event (version %d, index %d) twice", e.Version, e.Index)
		}
		seen[at{e.Version, e.Index}] = true
		out = append(out, string(e.Type))
	}
	return strings.Join(out, " ")
}
