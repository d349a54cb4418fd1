package console

import (
	"slices"
	"strconv"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// timeline is a page of an execution's history as the execution page
// shows it: the events, the spans they delimit (each run of a step
// attempt, each await, each retry back-off) and a summary per step. A
// long history is shown a page at a time, so the spans and the steps are
// those of the page's events: a run that began on the page before has no
// span here, and one still open at the end of a page that another
// follows "continues".
type timeline struct {
	Events []eventRow
	Spans  []span
	Steps  []stepRow
	// Start and End bound the chart: the page's first event (the
	// execution's creation on the first page) and its last (or now, on
	// the last page of an execution that has not ended).
	Start time.Time
	End   time.Time
}

// eventRow is one event of the timeline table.
type eventRow struct {
	history.Event
	// Offset is the time since the first event (the submit).
	Offset time.Duration
	// Took is the length of the span the event ends (a step run, an
	// await), or 0.
	Took time.Duration
	// RetryIn is RetryAt - At for a failed step that runs again.
	RetryIn time.Duration
	// Kind is the event's CSS class: ok, failed, waiting, info, cancelled.
	Kind string
}

// Span kinds.
const (
	spanRun     = "run"
	spanAwait   = "await"
	spanBackoff = "backoff"
	spanSleep   = "sleep"
	// spanChildren is a map parent's wait for its children
	// (WAITING_CHILDREN), from CHILDREN_STARTED to CHILDREN_FINISHED.
	spanChildren = "children"
)

// span is an interval of the chart.
type span struct {
	Kind      string // run, await, backoff, sleep, children
	StepIndex int
	StepName  string
	Attempt   int
	Worker    string
	Start     time.Time
	End       time.Time
	// Outcome says how it ended: succeeded, failed, outcome-unknown,
	// awaiting, completed, taken-over, cancelled, running (still open),
	// continues (open at the end of a page another follows).
	Outcome string
	Open    bool
	// X and W place the span on a 0-1000 axis from the timeline's Start
	// to its End (W at least 2, so that a short span stays visible).
	X, W int
}

// Label names the span in the chart.
func (s span) Label() string {
	switch s.Kind {
	case spanAwait:
		return s.StepName + " await"
	case spanBackoff:
		return s.StepName + " back-off"
	case spanSleep:
		return s.StepName + " sleep"
	case spanChildren:
		return s.StepName + " children"
	}
	return s.StepName + " #" + strconv.Itoa(s.Attempt)
}

// Duration is the span's length.
func (s span) Duration() time.Duration { return s.End.Sub(s.Start) }

// stepRow summarises one step.
type stepRow struct {
	Index    int
	Name     string
	Attempts int
	// Running is the time its attempts ran; Waited the time it awaited
	// an external completion.
	Running, Waited time.Duration
	Outcome         string
	Errors          int
}

// buildTimeline derives the timeline of e from a page of its history
// (the first page when its first event's Seq is 1, or unset), at time
// now (the end of the spans still open when e has not ended). more says
// another page follows this one.
func buildTimeline(events []history.Event, e *store.Execution, now time.Time, more bool) timeline {
	var t timeline
	if len(events) == 0 {
		return t
	}
	// origin is the submit: events show the time since it.
	origin := events[0].At
	if e.CreatedAt.Before(origin) && !e.CreatedAt.IsZero() {
		origin = e.CreatedAt
	}
	t.Start = origin
	if events[0].Seq > 1 {
		t.Start = events[0].At
	}
	// The open spans: a run, and a wait (an await or a map's children).
	var run, await *span
	closeSpan := func(s **span, at time.Time, outcome string) int {
		if *s == nil {
			return -1
		}
		(*s).End, (*s).Outcome, (*s).Open = at, outcome, false
		i := len(t.Spans)
		t.Spans = append(t.Spans, **s)
		*s = nil
		return i
	}
	open := func(ev history.Event, worker string) {
		run = &span{Kind: spanRun, StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt, Worker: worker, Start: ev.At, Open: true}
	}
	for _, ev := range events {
		row := eventRow{Event: ev, Offset: ev.At.Sub(origin), Kind: "info"}
		took := func(i int) {
			if i >= 0 {
				row.Took = t.Spans[i].Duration()
			}
		}
		switch ev.Type {
		case history.StepStarted:
			// A takeover may be followed by the start of the same attempt
			// at the same commit: one run.
			if run != nil && run.StepIndex == ev.StepIndex && run.Attempt == ev.Attempt && run.Start.Equal(ev.At) {
				run.Worker = ev.Worker
				break
			}
			closeSpan(&run, ev.At, "taken-over")
			open(ev, ev.Worker)
		case history.LeaseTakenOver:
			row.Kind = "warn"
			took(closeSpan(&run, ev.At, "taken-over"))
			open(ev, ev.Worker)
		case history.StepSucceeded:
			row.Kind = "ok"
			took(closeSpan(&run, ev.At, "succeeded"))
		case history.StepFailed:
			row.Kind = "failed"
			took(closeSpan(&run, ev.At, "failed"))
			if !ev.RetryAt.IsZero() {
				row.RetryIn = ev.RetryAt.Sub(ev.At)
				if ev.RetryAt.After(ev.At) {
					t.Spans = append(t.Spans, span{Kind: spanBackoff, StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt,
						Start: ev.At, End: ev.RetryAt, Outcome: "backoff"})
				}
			}
		case history.OutcomeUnknown:
			row.Kind = "warn"
			took(closeSpan(&run, ev.At, "outcome-unknown"))
		case history.Awaiting:
			row.Kind = "waiting"
			took(closeSpan(&run, ev.At, "awaiting"))
			await = &span{Kind: spanAwait, StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt, Start: ev.At, Open: true}
		case history.Sleeping:
			row.Kind = "waiting"
			t.Spans = append(t.Spans, span{Kind: spanSleep, StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt,
				Start: ev.At, End: ev.WakeAt, Outcome: "sleeping"})
		case history.ChildrenStarted:
			row.Kind = "waiting"
			took(closeSpan(&run, ev.At, "waiting-children"))
			await = &span{Kind: spanChildren, StepIndex: ev.StepIndex, StepName: ev.StepName, Attempt: ev.Attempt, Start: ev.At, Open: true}
		case history.AwaitCompleted, history.ChildrenFinished:
			row.Kind = "ok"
			took(closeSpan(&await, ev.At, "completed"))
		case history.CancelRequested:
			row.Kind = "cancelled"
		case history.Cancelled:
			row.Kind = "cancelled"
			took(closeSpan(&run, ev.At, "cancelled"))
			closeSpan(&await, ev.At, "cancelled")
		case history.DeadLettered:
			row.Kind = "failed"
			closeSpan(&run, ev.At, "failed")
			closeSpan(&await, ev.At, "timed-out")
		case history.Succeeded:
			row.Kind = "ok"
			closeSpan(&run, ev.At, "succeeded")
		case history.Redriven:
			row.Kind = "warn"
		}
		t.Events = append(t.Events, row)
	}
	t.End = events[len(events)-1].At
	if !more && !e.Status.Terminal() && now.After(t.End) {
		t.End = now
	}
	for _, s := range []*span{run, await} {
		if s != nil {
			s.End, s.Outcome = t.End, "running"
			switch {
			case more:
				s.Outcome = "continues"
			case s.Kind == spanAwait || s.Kind == spanChildren:
				s.Outcome = "waiting"
			}
			t.Spans = append(t.Spans, *s)
		}
	}
	for i := range t.Spans {
		if t.Spans[i].End.After(t.End) {
			t.End = t.Spans[i].End // a back-off past the last event
		}
	}
	// The chart lists the spans in the order they began.
	slices.SortStableFunc(t.Spans, func(a, b span) int { return a.Start.Compare(b.Start) })
	total := t.End.Sub(t.Start)
	for i := range t.Spans {
		s := &t.Spans[i]
		if total > 0 {
			s.X = int(1000 * s.Start.Sub(t.Start) / total)
			s.W = int(1000 * s.Duration() / total)
		}
		s.W = max(s.W, 2)
		s.X = min(s.X, 1000-s.W)
	}
	t.Steps = stepRows(t.Spans, t.Events)
	return t
}

// stepRows summarises the spans per step, in step order.
func stepRows(spans []span, events []eventRow) []stepRow {
	byIndex := map[int]*stepRow{}
	var order []int
	get := func(i int, name string) *stepRow {
		if r, ok := byIndex[i]; ok {
			return r
		}
		r := &stepRow{Index: i, Name: name}
		byIndex[i] = r
		order = append(order, i)
		return r
	}
	for _, s := range spans {
		r := get(s.StepIndex, s.StepName)
		switch s.Kind {
		case spanRun:
			r.Running += s.Duration()
			r.Attempts = max(r.Attempts, s.Attempt)
			r.Outcome = s.Outcome
		case spanAwait, spanChildren:
			r.Waited += s.Duration()
			r.Outcome = s.Outcome
		case spanSleep:
			r.Waited += s.Duration()
		}
	}
	for _, ev := range events {
		if ev.Type == history.StepFailed || ev.Type == history.OutcomeUnknown {
			if r, ok := byIndex[ev.StepIndex]; ok {
				r.Errors++
			}
		}
	}
	rows := make([]stepRow, 0, len(order))
	for i := range order {
		rows = append(rows, *byIndex[order[i]])
	}
	// Steps in index order (a re-drive revisits one; it keeps one row).
	slices.SortStableFunc(rows, func(a, b stepRow) int { return a.Index - b.Index })
	return rows
}
