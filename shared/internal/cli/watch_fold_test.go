package cli

import (
	"io"
	"regexp"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// derived returns the history the real history.Derive gives for the
// successive versions of a row, as the API sends it (client events).
func derived(rows ...store.Execution) []client.Event {
	var evs []history.Event
	for i := range rows {
		var old *store.Execution
		if i > 0 {
			old = &rows[i-1]
		}
		evs = append(evs, history.Derive(old, &rows[i])...)
	}
	var out []client.Event
	for _, ev := range history.Number(evs) {
		ce := client.Event{Seq: ev.Seq, Type: ev.Type, At: ev.At, StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt,
			Status: ev.Status, RetryAt: ev.RetryAt, Worker: ev.Worker, Reason: ev.Reason}
		if ev.Error != nil {
			ce.Error = &client.EventError{Code: ev.Error.Code, Message: ev.Error.Message}
		}
		out = append(out, ce)
	}
	return out
}

// version returns row moved to its next version at t, changed by change.
func version(row store.Execution, t time.Time, change func(*store.Execution)) store.Execution {
	row.Version++
	row.UpdatedAt = t
	if row.Await != nil {
		a := *row.Await
		row.Await = &a
	}
	change(&row)
	return row
}

// document is the status document of row.
func document(row store.Execution) client.Execution {
	return client.Execution{ExecutionID: row.ExecutionID, PipelineID: row.PipelineID, Status: row.Status, StepIndex: row.StepIndex,
		StepName: row.StepName, Attempt: row.Attempt, Version: row.Version, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
}

// TestWatchFollowsTheRealEvents: the live display folds history.Derive's
// events as they are. A completed await is not a succeeded step: its
// AWAIT_COMPLETED queues the await step to run again with the completion
// (QUEUED until its STEP_STARTED and STEP_SUCCEEDED follow). A takeover
// (LEASE_TAKEN_OVER, after a worker's lease lapsed) is the step's next
// attempt, running, by the new worker.
func TestWatchFollowsTheRealEvents(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	claim := func(owner string) func(*store.Execution) {
		return func(r *store.Execution) {
			r.Status, r.LeaseOwner, r.LeaseExpiresAt = store.Running, owner, r.UpdatedAt.Add(30*time.Second)
		}
	}
	newWatcher := func() *watcher {
		return &watcher{w: io.Discard, live: true, steps: map[int]*stepView{}, now: func() time.Time { return at(100_000) }}
	}

	// An await step parked, completed, run again; then the next step.
	submitted := store.Execution{ExecutionID: "x1", PipelineID: "p", Status: store.Queued, StepName: "approve", Attempt: 1,
		Version: 1, CreateToken: "c1", CreatedAt: t0, UpdatedAt: t0}
	started := version(submitted, at(1), claim("w1"))
	parked := version(started, at(2), func(r *store.Execution) {
		r.Status, r.LeaseOwner, r.LeaseExpiresAt = store.WaitingExternal, "", time.Time{}
		r.Await = &store.Await{ID: "aw-1", Status: store.AwaitWaiting}
	})
	completed := version(parked, at(5000), func(r *store.Execution) {
		r.Status, r.Await.Status, r.Await.CompletedAt = store.Queued, store.AwaitCompleted, at(5000)
	})
	evs := derived(submitted, started, parked, completed)
	if last := evs[len(evs)-1]; last.Type != history.AwaitCompleted {
		t.Fatalf("derived events %+v end without AWAIT_COMPLETED", evs)
	}
	wt := newWatcher()
	wt.update(document(completed), evs, true)
	if st := wt.steps[0]; st.status != string(store.Queued) || !st.ended.IsZero() || st.note != "await aw-1 completed" {
		t.Fatalf("after AWAIT_COMPLETED the await step is %+v, want QUEUED (it runs again) with the completion", *st)
	}
	rerun := version(completed, at(5001), claim("w1"))
	next := version(rerun, at(5002), func(r *store.Execution) { r.StepIndex, r.StepName = 1, "finish" }) // commit and chained claim
	evs = derived(submitted, started, parked, completed, rerun, next)
	wt.update(document(next), evs, true)
	lines := wt.lines(document(next))
	if len(lines) != 3 || !regexp.MustCompile(`^  ok 0 approve\s+SUCCEEDED\s+attempt 1  5\.00s$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^  \.\. 1 finish\s+RUNNING\s+attempt 1`).MatchString(lines[2]) {
		t.Fatalf("display after the await step's second run:\n%q", lines)
	}

	// A takeover: the step's next attempt, running, by another worker.
	sub := store.Execution{ExecutionID: "x2", PipelineID: "p", Status: store.Queued, StepName: "work", Attempt: 1,
		Version: 1, CreateToken: "c2", CreatedAt: t0, UpdatedAt: t0}
	first := version(sub, at(1), claim("w1"))
	taken := version(first, at(40_000), func(r *store.Execution) {
		claim("w2")(r)
		r.Attempt = 2
	})
	evs = derived(sub, first, taken)
	if last := evs[len(evs)-1]; last.Type != history.LeaseTakenOver || last.Worker != "w2" || last.Attempt != 2 {
		t.Fatalf("derived events %+v end without w2's LEASE_TAKEN_OVER", evs)
	}
	wt = newWatcher()
	wt.update(document(taken), evs, true)
	lines = wt.lines(document(taken))
	if len(lines) != 2 || !regexp.MustCompile(`^  \.\. 0 work\s+RUNNING\s+attempt 2  1m39s  lease taken over by w2$`).MatchString(lines[1]) {
		t.Fatalf("display after a takeover:\n%q", lines)
	}
}
