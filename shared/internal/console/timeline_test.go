package console

import (
	"testing"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// TestTimelineSpansOfATakeoverAndAnOpenRun: a takeover ends one run and
// starts the next (a STEP_STARTED of the same attempt at the same commit
// is that run, not a third), and a run still going ends at now.
func TestTimelineSpansOfATakeoverAndAnOpenRun(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := []history.Event{
		{Type: history.Submitted, At: at(0)},
		{Type: history.StepStarted, At: at(1), StepName: "a", Attempt: 1, Worker: "w1"},
		{Type: history.LeaseTakenOver, At: at(31), StepName: "a", Attempt: 1, Worker: "w2"},
		{Type: history.StepStarted, At: at(31), StepName: "a", Attempt: 1, Worker: "w2"},
		{Type: history.StepFailed, At: at(33), StepName: "a", Attempt: 1, RetryAt: at(43)},
		{Type: history.StepStarted, At: at(43), StepName: "a", Attempt: 2, Worker: "w1"},
	}
	e := &store.Execution{Status: store.Running, CreatedAt: at(0)}
	tl := buildTimeline(ev, e, at(100), false)
	type got struct {
		kind, outcome, worker string
		took                  time.Duration
	}
	want := []got{
		{spanRun, "taken-over", "w1", 30 * time.Second},
		{spanRun, "failed", "w2", 2 * time.Second},
		{spanBackoff, "backoff", "", 10 * time.Second},
		{spanRun, "running", "w1", 57 * time.Second},
	}
	if len(tl.Spans) != len(want) {
		t.Fatalf("%d spans %+v, want %d", len(tl.Spans), tl.Spans, len(want))
	}
	for i, w := range want {
		s := tl.Spans[i]
		if g := (got{s.Kind, s.Outcome, s.Worker, s.Duration()}); g != w {
			t.Errorf("span %d: %+v, want %+v", i, g, w)
		}
		if s.X < 0 || s.W < 2 || s.X+s.W > 1000 {
			t.Errorf("span %d placed at x=%d w=%d", i, s.X, s.W)
		}
	}
	if tl.Events[2].Took != 30*time.Second || tl.Events[4].Took != 2*time.Second || tl.Events[4].RetryIn != 10*time.Second {
		t.Errorf("event durations: takeover %v, failure %v, retry in %v", tl.Events[2].Took, tl.Events[4].Took, tl.Events[4].RetryIn)
	}
	if len(tl.Steps) != 1 || tl.Steps[0].Attempts != 2 || tl.Steps[0].Running != 89*time.Second || tl.Steps[0].Errors != 1 {
		t.Errorf("steps %+v", tl.Steps)
	}
	if !tl.End.Equal(at(100)) {
		t.Errorf("end %v, want now", tl.End)
	}
	if empty := buildTimeline(nil, e, at(100), false); len(empty.Events)+len(empty.Spans) != 0 {
		t.Errorf("empty history: %+v", empty)
	}
}

func TestDurationsForPeople(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0 ms", 500 * time.Microsecond: "<1 ms", 850 * time.Millisecond: "850 ms", 4250 * time.Millisecond: "4.25 s",
		12300 * time.Millisecond: "12.3 s", 187 * time.Second: "3m 07s", 125 * time.Minute: "2h 05m", 76 * time.Hour: "3d 04h",
		-2 * time.Second: "-2.00 s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestTimelineShowsASleep: a sleep step's SLEEPING event draws a sleep
// span to its wake-up (past the last event while it sleeps), counted as
// the step's waiting time.
func TestTimelineShowsASleep(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := []history.Event{
		{Type: history.Submitted, At: at(0)},
		{Type: history.StepStarted, At: at(1), StepIndex: 0, StepName: "nap", Attempt: 1, Worker: "w1"},
		{Type: history.StepSucceeded, At: at(2), StepIndex: 0, StepName: "nap", Attempt: 1, Worker: "w1"},
		{Type: history.Sleeping, At: at(2), StepIndex: 0, StepName: "nap", Attempt: 1, WakeAt: at(3602)},
	}
	tl := buildTimeline(ev, &store.Execution{Status: store.Queued, CreatedAt: at(0)}, at(60), false)
	var sleep *span
	for i := range tl.Spans {
		if tl.Spans[i].Kind == spanSleep {
			sleep = &tl.Spans[i]
		}
	}
	if sleep == nil || sleep.Duration() != time.Hour || sleep.Label() != "nap sleep" {
		t.Fatalf("spans %+v; want an hour's sleep span of nap", tl.Spans)
	}
	if !tl.End.Equal(at(3602)) || tl.Events[3].Kind != "waiting" {
		t.Errorf("end %v (want the wake-up), event kind %q", tl.End, tl.Events[3].Kind)
	}
	if len(tl.Steps) != 1 || tl.Steps[0].Waited != time.Hour {
		t.Errorf("steps %+v; want the hour counted as waited", tl.Steps)
	}
}

// TestTimelineSpanOfAMapsWait: CHILDREN_STARTED ends the map step's run
// and opens its wait for the children, which CHILDREN_FINISHED ends; the
// step's row counts the wait as waited, not run, and a wait still open
// ends at now.
func TestTimelineSpanOfAMapsWait(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := []history.Event{
		{Type: history.Submitted, At: at(0)},
		{Type: history.StepStarted, At: at(1), StepName: "fan", Attempt: 1, Worker: "w1"},
		{Type: history.ChildrenStarted, At: at(2), StepName: "fan", Attempt: 1, Status: store.WaitingChildren},
		{Type: history.ChildrenFinished, At: at(62), StepName: "fan", Attempt: 1, Status: store.Queued},
		{Type: history.StepStarted, At: at(63), StepName: "fan", Attempt: 1, Worker: "w2"},
		{Type: history.StepSucceeded, At: at(64), StepName: "fan", Attempt: 1, Status: store.Succeeded},
	}
	tl := buildTimeline(ev, &store.Execution{Status: store.Succeeded, CreatedAt: at(0)}, at(100), false)
	type got struct {
		kind, outcome string
		took          time.Duration
	}
	want := []got{{spanRun, "waiting-children", time.Second}, {spanChildren, "completed", time.Minute}, {spanRun, "succeeded", time.Second}}
	if len(tl.Spans) != len(want) {
		t.Fatalf("%d spans %+v, want %d", len(tl.Spans), tl.Spans, len(want))
	}
	for i, w := range want {
		if s := tl.Spans[i]; (got{s.Kind, s.Outcome, s.Duration()}) != w {
			t.Errorf("span %d: %+v, want %+v", i, s, w)
		}
	}
	if tl.Spans[1].Label() != "fan children" || tl.Events[3].Took != time.Minute || tl.Events[2].Kind != "waiting" || tl.Events[3].Kind != "ok" {
		t.Errorf("label %q, CHILDREN_FINISHED took %v, kinds %s %s", tl.Spans[1].Label(), tl.Events[3].Took, tl.Events[2].Kind, tl.Events[3].Kind)
	}
	if len(tl.Steps) != 1 || tl.Steps[0].Running != 2*time.Second || tl.Steps[0].Waited != time.Minute || tl.Steps[0].Outcome != "succeeded" {
		t.Errorf("steps %+v", tl.Steps)
	}

	waiting := buildTimeline(ev[:3], &store.Execution{Status: store.WaitingChildren, CreatedAt: at(0)}, at(100), false)
	if last := waiting.Spans[len(waiting.Spans)-1]; last.Kind != spanChildren || last.Outcome != "waiting" || !last.End.Equal(at(100)) {
		t.Errorf("an open wait: %+v", last)
	}
}
