package history_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// queued is a fresh execution row at version 1, as the runtime submits it.
func queued() store.Execution {
	return store.Execution{
		TenantID: "t1", ExecutionID: "e1", PipelineID: "p", Status: store.Queued, Version: 1,
		StepIndex: 0, StepName: "a", Attempt: 1, NextDueAt: t0, SweepAt: t0.Add(10 * time.Second),
		CreateToken: "ct-1", CreatedAt: t0, UpdatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
	}
}

// next is row after a committed write at at: version+1, updated then.
func next(row store.Execution, at time.Duration, change func(*store.Execution)) store.Execution {
	row.Version++
	row.UpdatedAt = t0.Add(at)
	change(&row)
	return row
}

// claimed is row claimed by owner for attempt.
func claimed(row store.Execution, at time.Duration, owner string, attempt int) store.Execution {
	return next(row, at, func(e *store.Execution) {
		e.Status, e.LeaseOwner, e.LeaseExpiresAt, e.Attempt = store.Running, owner, t0.Add(at+30*time.Second), attempt
	})
}

// committed is row's step committed, handing over to step (name) index+1.
func committed(row store.Execution, at time.Duration, name string, chain bool) store.Execution {
	return next(row, at, func(e *store.Execution) {
		e.Status, e.StepIndex, e.StepName, e.Attempt, e.NextDueAt = store.Queued, e.StepIndex+1, name, 1, t0.Add(at)
		e.LeaseOwner, e.LeaseExpiresAt = "", time.Time{}
		if chain {
			e.Status, e.LeaseOwner, e.LeaseExpiresAt = store.Running, row.LeaseOwner, t0.Add(at+30*time.Second)
		}
	})
}

// ev is an expected event without the fields a case does not care about.
type ev struct {
	Type      history.Type
	StepIndex int
	Attempt   int
	Status    store.Status
	Worker    string
	Code      string
	RetryAt   time.Time
	Reason    string // a substring of the reason
}

func check(t *testing.T, got []history.Event, want []ev, version int64, at time.Time) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i, w := range want {
		g := got[i]
		code := ""
		if g.Error != nil {
			code = g.Error.Code
		}
		if g.Type != w.Type || g.StepIndex != w.StepIndex || g.Attempt != w.Attempt || g.Status != w.Status ||
			g.Worker != w.Worker || code != w.Code || !g.RetryAt.Equal(w.RetryAt) || !strings.Contains(g.Reason, w.Reason) {
			t.Errorf("event %d = {%s step %d attempt %d status %s worker %q code %q retryAt %v reason %q}, want %+v",
				i, g.Type, g.StepIndex, g.Attempt, g.Status, g.Worker, code, g.RetryAt, g.Reason, w)
		}
		if g.Version != version || g.Index != i || !g.At.Equal(at) || g.Seq != 0 {
			t.Errorf("event %d: version %d index %d at %v seq %d, want version %d index %d at %v seq 0 (numbered when read)",
				i, g.Version, g.Index, g.At, g.Seq, version, i, at)
		}
	}
}

// TestDerive covers every write the runtime makes, one case per kind,
// each naming the write and the events it must yield.
func TestDerive(t *testing.T) {
	sub := queued()
	run := claimed(sub, time.Second, "w1", 1)
	failure := &store.Failure{Code: "boom", Message: "it broke"}
	retryAt := t0.Add(7 * time.Second)
	waitRetry := next(run, 2*time.Second, func(e *store.Execution) {
		e.Status, e.Attempt, e.NextDueAt, e.Error, e.LeaseOwner, e.LeaseExpiresAt = store.WaitRetry, 2, retryAt, failure, "", time.Time{}
	})
	failed := next(run, 2*time.Second, func(e *store.Execution) {
		e.Status, e.DLQPending, e.LeaseOwner = store.Failed, true, ""
		e.Error = &store.Failure{Code: "boom", Message: "it broke", TerminalReason: store.ReasonNonRetryable}
	})
	dlq := next(failed, 3*time.Second, func(e *store.Execution) { e.Status, e.DLQPending, e.SweepAt = store.DLQ, false, time.Time{} })
	awaiting := next(run, 2*time.Second, func(e *store.Execution) {
		e.Status, e.LeaseOwner = store.WaitingExternal, ""
		e.Await = &store.Await{ID: "aw-1", StepIndex: 0, Status: store.AwaitWaiting, TimeoutAt: t0.Add(time.Hour)}
	})
	timedOut := next(awaiting, time.Hour, func(e *store.Execution) {
		a := *e.Await
		a.Status = store.AwaitTimedOut
		e.Status, e.Attempt, e.NextDueAt, e.Await = store.WaitRetry, 2, retryAt, &a
		e.Error = &store.Failure{Code: "AWAIT_TIMEOUT", Message: "await aw-1 timed out"}
	})
	var cases = []struct {
		name     string
		old, new *store.Execution
		want     []ev
	}{
		{"create", nil, &sub, []ev{{Type: history.Submitted, Status: store.Queued, Attempt: 1}}},
		{"create over an expired row of the same key", ptr(next(dlq, time.Hour, func(e *store.Execution) {})),
			ptr(func() store.Execution {
				r := queued()
				r.CreateToken = "ct-2"
				r.UpdatedAt = t0.Add(time.Hour)
				return r
			}()),
			[]ev{{Type: history.Submitted, Status: store.Queued, Attempt: 1}}},
		{"claim", &sub, &run, []ev{{Type: history.StepStarted, Attempt: 1, Status: store.Running, Worker: "w1"}}},
		{"lease renewal", &run, ptr(func() store.Execution { r := run; r.LeaseExpiresAt = r.LeaseExpiresAt.Add(time.Minute); return r }()), nil},
		{"sweeper reschedule", &sub, ptr(func() store.Execution { r := sub; r.SweepAt, r.Sweeps = r.SweepAt.Add(time.Minute), 1; return r }()), nil},
		{"hand-over to the next step", &run, ptr(committed(run, 2*time.Second, "b", false)),
			[]ev{{Type: history.StepSucceeded, Attempt: 1, Status: store.Queued, Worker: "w1"}}},
		{"chained commit: step 0's commit and step 1's claim in one write", &run, ptr(committed(run, 2*time.Second, "b", true)),
			[]ev{{Type: history.StepSucceeded, StepIndex: 0, Attempt: 1, Status: store.Running, Worker: "w1"},
				{Type: history.StepStarted, StepIndex: 1, Attempt: 1, Status: store.Running, Worker: "w1"}}},
		{"last step succeeded", &run, ptr(next(run, 2*time.Second, func(e *store.Execution) { e.Status, e.LeaseOwner = store.Succeeded, "" })),
			[]ev{{Type: history.StepSucceeded, Attempt: 1, Status: store.Succeeded, Worker: "w1"}, {Type: history.Succeeded, Attempt: 1, Status: store.Succeeded}}},
		{"retry scheduled", &run, &waitRetry,
			[]ev{{Type: history.StepFailed, Attempt: 1, Status: store.WaitRetry, Worker: "w1", Code: "boom", RetryAt: retryAt}}},
		{"retry claimed", &waitRetry, ptr(claimed(waitRetry, 8*time.Second, "w2", 2)),
			[]ev{{Type: history.StepStarted, Attempt: 2, Status: store.Running, Worker: "w2"}}},
		{"takeover of a lapsed lease", &run, ptr(claimed(run, time.Minute, "w2", 2)),
			[]ev{{Type: history.LeaseTakenOver, Attempt: 2, Status: store.Running, Worker: "w2", Reason: "the lease of w1 lapsed"}}},
		{"terminal failure", &run, &failed,
			[]ev{{Type: history.StepFailed, Attempt: 1, Status: store.Failed, Worker: "w1", Code: "boom"}}},
		{"dead letter published", &failed, &dlq, []ev{{Type: history.DeadLettered, Attempt: 1, Status: store.DLQ, Code: "boom"}}},
		{"failure and dead letter in one write", &run, ptr(next(run, 2*time.Second, func(e *store.Execution) {
			e.Status, e.Error, e.LeaseOwner = store.DLQ, failure, ""
		})), []ev{{Type: history.StepFailed, Attempt: 1, Status: store.DLQ, Worker: "w1", Code: "boom"}, {Type: history.DeadLettered, Attempt: 1, Status: store.DLQ, Code: "boom"}}},
		{"await parked", &run, &awaiting,
			[]ev{{Type: history.Awaiting, Attempt: 1, Status: store.WaitingExternal, Worker: "w1", Reason: "await aw-1, times out at "}}},
		{"await completed", &awaiting, ptr(next(awaiting, time.Minute, func(e *store.Execution) {
			a := *e.Await
			a.Status, a.CompletedAt = store.AwaitCompleted, t0.Add(time.Minute)
			e.Status, e.Await = store.Queued, &a
		})), []ev{{Type: history.AwaitCompleted, Attempt: 1, Status: store.Queued, Reason: "await aw-1 completed"}}},
		{"await timed out", &awaiting, &timedOut,
			[]ev{{Type: history.StepFailed, Attempt: 1, Status: store.WaitRetry, Code: "AWAIT_TIMEOUT", RetryAt: retryAt}}},
		{"late completion", &timedOut, ptr(next(timedOut, 2*time.Hour, func(e *store.Execution) {
			a := *e.Await
			a.Late = true
			e.Await = &a
		})), []ev{{Type: history.AwaitCompleted, Attempt: 2, Status: store.WaitRetry, Reason: "late"}}},
		{"outcome unknown", &run, ptr(next(run, 2*time.Second, func(e *store.Execution) {
			e.Status, e.LeaseOwner = store.RemoteOutcomeUnknown, ""
			e.Error = &store.Failure{Code: "REMOTE_OUTCOME_UNKNOWN", Message: "deadline passed"}
		})), []ev{{Type: history.OutcomeUnknown, Attempt: 1, Status: store.RemoteOutcomeUnknown, Worker: "w1", Code: "REMOTE_OUTCOME_UNKNOWN", Reason: "deadline passed"}}},
		{"redrive", &dlq, ptr(next(dlq, time.Hour, func(e *store.Execution) {
			e.Status, e.Attempt, e.MaxAttempt, e.Error, e.Note, e.RedriveCount = store.Queued, 2, 2, nil, "fixed the bug", 1
		})), []ev{{Type: history.Redriven, Attempt: 2, Status: store.Queued, Reason: "fixed the bug"}}},
		{"release (hand-back)", &run, ptr(next(run, 2*time.Second, func(e *store.Execution) {
			e.Status, e.LeaseOwner, e.Releases = store.Queued, "", 1
		})), nil},
		{"pipeline version wait recorded", &sub, ptr(next(sub, time.Second, func(e *store.Execution) {
			e.VersionWaitSince, e.Error = t0.Add(time.Second), &store.Failure{Code: store.CodePipelineVersionUnavailable}
		})), nil},
		{"cancel of a queued execution", &waitRetry, ptr(next(waitRetry, 3*time.Second, func(e *store.Execution) {
			e.Status, e.CancelReason, e.CancelRequestedAt, e.SweepAt = store.Cancelled, "not needed", t0.Add(3*time.Second), time.Time{}
		})), []ev{{Type: history.CancelRequested, Attempt: 2, Status: store.Cancelled, Reason: "not needed"},
			{Type: history.Cancelled, Attempt: 2, Status: store.Cancelled, Reason: "not needed"}}},
		{"cancel requested of a running step", &run, ptr(next(run, 2*time.Second, func(e *store.Execution) {
			e.CancelReason, e.CancelRequestedAt = "not needed", t0.Add(2*time.Second)
		})), []ev{{Type: history.CancelRequested, Attempt: 1, Status: store.Running, Reason: "not needed"}}},
		{"running step ended cancelled", ptr(next(run, 2*time.Second, func(e *store.Execution) {
			e.CancelReason, e.CancelRequestedAt = "not needed", t0.Add(2*time.Second)
		})), ptr(next(run, 3*time.Second, func(e *store.Execution) {
			e.Version++ // after the cancel request's write
			e.Status, e.LeaseOwner, e.CancelReason, e.CancelRequestedAt = store.Cancelled, "", "not needed", t0.Add(2*time.Second)
		})), []ev{{Type: history.Cancelled, Attempt: 1, Status: store.Cancelled, Reason: "not needed"}}},
		{"row deleted", &dlq, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var version int64
			var at time.Time
			if c.new != nil {
				version, at = c.new.Version, c.new.UpdatedAt
			}
			check(t, history.Derive(c.old, c.new), c.want, version, at)
		})
	}
}

// TestDeriveDoesNotShareTheRowsFailure: an event's Error is a copy, so a
// later change of the row (the caller reuses it) cannot rewrite history.
func TestDeriveDoesNotShareTheRowsFailure(t *testing.T) {
	run := claimed(queued(), time.Second, "w1", 1)
	failed := next(run, time.Second, func(e *store.Execution) {
		e.Status, e.Error = store.Failed, &store.Failure{Code: "boom"}
	})
	got := history.Derive(&run, &failed)
	failed.Error.Code = "changed"
	if got[0].Error.Code != "boom" {
		t.Fatalf("the event's error changed with the row: %+v", got[0].Error)
	}
}

// TestNumber: events given in any order, some of them twice (a stream
// page written again), come out in commit order, once each, numbered
// from 1.
func TestNumber(t *testing.T) {
	e := func(v int64, i int, typ history.Type) history.Event {
		return history.Event{Version: v, Index: i, Type: typ}
	}
	in := []history.Event{
		e(3, 0, history.StepSucceeded), e(3, 1, history.StepStarted), // a page of versions 3..4
		e(4, 0, history.StepSucceeded), e(4, 1, history.Succeeded),
		e(1, 0, history.Submitted), e(2, 0, history.StepStarted), // an earlier page, read after
		e(4, 0, history.StepSucceeded), e(4, 1, history.Succeeded), // version 4 again
		e(3, 1, history.StepStarted),
	}
	orig := append([]history.Event(nil), in...)
	got := history.Number(in)
	want := []history.Event{
		{Seq: 1, Version: 1, Type: history.Submitted}, {Seq: 2, Version: 2, Type: history.StepStarted},
		{Seq: 3, Version: 3, Type: history.StepSucceeded}, {Seq: 4, Version: 3, Index: 1, Type: history.StepStarted},
		{Seq: 5, Version: 4, Type: history.StepSucceeded}, {Seq: 6, Version: 4, Index: 1, Type: history.Succeeded},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Number = %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Fatal("Number changed its input")
	}
}

// TestDeriveAWholeLifecycle chains Derive over every version of one
// execution (submit, a retry, a takeover, chained steps, success) and
// numbers the result: the history a reader returns.
func TestDeriveAWholeLifecycle(t *testing.T) {
	v1 := queued()
	v2 := claimed(v1, time.Second, "w1", 1)
	v3 := next(v2, 2*time.Second, func(e *store.Execution) {
		e.Status, e.Attempt, e.NextDueAt, e.LeaseOwner = store.WaitRetry, 2, t0.Add(5*time.Second), ""
		e.Error = &store.Failure{Code: "boom"}
	})
	v4 := claimed(v3, 5*time.Second, "w1", 2)
	v5 := claimed(v4, time.Minute, "w2", 3) // w1 died: its lease lapsed
	v6 := committed(v5, 61*time.Second, "b", true)
	v7 := next(v6, 62*time.Second, func(e *store.Execution) { e.Status, e.LeaseOwner = store.Succeeded, "" })
	rows := []store.Execution{v1, v2, v3, v4, v5, v6, v7}
	var all []history.Event
	var prev *store.Execution
	for i := range rows {
		all = append(all, history.Derive(prev, &rows[i])...)
		prev = &rows[i]
	}
	var got []string
	for _, e := range history.Number(all) {
		got = append(got, string(e.Type))
	}
	want := "SUBMITTED STEP_STARTED STEP_FAILED STEP_STARTED LEASE_TAKEN_OVER STEP_SUCCEEDED STEP_STARTED STEP_SUCCEEDED SUCCEEDED"
	if strings.Join(got, " ") != want {
		t.Fatalf("history:\n  %s\nwant\n  %s", strings.Join(got, " "), want)
	}
}

func ptr[T any](v T) *T { return &v }
