package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

func watchCmd(fs *flag.FlagSet) runFunc {
	display := fs.String("display", "auto", "auto (live on a terminal, plain when piped), live or plain")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		var live bool
		switch *display {
		case "auto":
			live = s.env.Terminal != nil && s.env.Terminal()
		case "live":
			live = true
		case "plain":
		default:
			return usagef("--display %q: want auto, live or plain", *display)
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		return s.watch(ctx, c, args[0], live)
	}
}

// stepView is what watch knows of one step.
type stepView struct {
	index          int
	name           string
	status         string
	attempt        int
	started, ended time.Time
	note           string
	// failure: note is the step's last failure, which a new run or a
	// success makes stale.
	failure bool
}

// watcher turns status documents (and history events, where the server
// has them) into step progress, and draws it.
type watcher struct {
	w     io.Writer
	live  bool
	steps map[int]*stepView
	// lastSeq is the last history event folded in (and, plain, printed):
	// an event read again (from a server that predates paging, which
	// answers the whole history every time) is skipped.
	lastSeq int
	// lastStatus is the execution's status after that event.
	lastStatus store.Status
	// lastLine is the last plain status line printed (without history).
	lastLine string
	// drawn is how many lines the live display has on screen.
	drawn int
	now   func() time.Time
}

// newEvents reads the events of an execution's history after the ones
// read before: it keeps the answer's endCursor between calls, so each
// poll of a long history fetches only what joined it since.
type newEvents struct {
	c      *client.Client
	id     string
	cursor string
}

func (n *newEvents) read(ctx context.Context) ([]client.Event, error) {
	h, err := n.c.HistoryAfter(ctx, n.id, n.cursor)
	if err != nil {
		return nil, err
	}
	if h.EndCursor != "" {
		n.cursor = h.EndCursor
	}
	return h.Events, nil
}

func (s *session) watch(ctx context.Context, c *client.Client, id string, live bool) error {
	wt := &watcher{w: s.env.Stdout, live: live, steps: map[int]*stepView{}, now: time.Now}
	useHistory := true
	tail := &newEvents{c: c, id: id}
	final, err := c.Wait(ctx, id, client.WaitOptions{MinInterval: s.pollMin(), MaxInterval: s.pollMax(),
		OnChange: func(e client.Execution) error {
			if s.json() {
				writeJSONLine(s.env.Stdout, e)
				return nil
			}
			var events []client.Event
			if useHistory {
				evs, err := tail.read(ctx)
				switch {
				case err == nil:
					events = evs
				case historyMissing(err):
					useHistory = false // a server without the history route
				default:
					return err
				}
			}
			wt.update(e, events, useHistory)
			return nil
		}})
	if err != nil {
		return err
	}
	if useHistory && !s.json() {
		if err := s.catchUp(ctx, tail, id, final, wt); err != nil {
			return err
		}
	}
	if !s.json() {
		wt.finish(final)
	}
	if final.Status != store.Succeeded {
		return errNotSucceeded
	}
	return nil
}

// historyCatchUp bounds how long watch waits, once the status is
// terminal, for the history to tell that end too.
const historyCatchUp = 10 * time.Second

// catchUp reads the new events of the history until the last one shows a
// terminal status, as final does (a stream-fed history, DynamoDB's,
// trails the row by about a second), so that watch prints every event;
// after historyCatchUp it prints what there is and says so on stderr.
func (s *session) catchUp(ctx context.Context, tail *newEvents, id string, final client.Execution, wt *watcher) error {
	deadline := time.Now().Add(historyCatchUp)
	wait := s.pollMin()
	var events []client.Event
	last := wt.lastStatus
	for {
		evs, err := tail.read(ctx)
		if err != nil {
			return err
		}
		events = append(events, evs...)
		if len(evs) > 0 {
			last = evs[len(evs)-1].Status
		}
		// Any terminal status will do: a FAILED execution the status
		// showed may have been dead-lettered (DLQ) since.
		caughtUp := last.Terminal()
		if caughtUp || !time.Now().Before(deadline) {
			wt.update(final, events, true)
			if !caughtUp {
				fmt.Fprintln(s.env.Stderr, visible(fmt.Sprintf("qasync: the history of %s had not caught up with its status %s after %s; qasync history %s shows it once it has",
					id, final.Status, historyCatchUp, id)))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// historyMissing reports whether err says the server has no history
// route (as opposed to no such execution).
func historyMissing(err error) bool {
	var e *client.Error
	if !errors.As(err, &e) {
		return false
	}
	return (e.StatusCode == http.StatusNotFound && e.Problem.Kind() != "execution-not-found") ||
		e.StatusCode == http.StatusMethodNotAllowed || e.StatusCode == http.StatusNotImplemented
}

func (wt *watcher) step(index int, name string) *stepView {
	st := wt.steps[index]
	if st == nil {
		st = &stepView{index: index, name: name}
		wt.steps[index] = st
	}
	if name != "" {
		st.name = name
	}
	return st
}

// apply folds one history event into the steps. The events are
// history.Derive's: an event names the step it is about (an event ending
// an attempt the step the attempt ran, one starting an attempt the step
// it starts) and the execution's status after the write.
func (wt *watcher) apply(ev client.Event) {
	st := wt.step(ev.StepIndex, ev.StepName)
	if ev.Attempt > 0 {
		st.attempt = ev.Attempt
	}
	errText := func() string {
		if ev.Error == nil {
			return ""
		}
		return ev.Error.Code + ": " + ev.Error.Message
	}
	// running marks a new attempt of the step (a start, a takeover):
	// a failure before it is stale.
	running := func() {
		st.status, st.ended = string(store.Running), time.Time{}
		if st.started.IsZero() {
			st.started = ev.At
		}
		if st.failure {
			st.note, st.failure = "", false
		}
	}
	switch ev.Type {
	case history.Submitted:
		st.status = string(ev.Status)
	case history.StepStarted:
		running()
		st.note = ""
	case history.LeaseTakenOver:
		// Another worker took over the step after its lease lapsed: a new
		// attempt, running.
		running()
		st.note = "lease taken over by " + ev.Worker
	case history.StepSucceeded:
		st.status, st.ended, st.note, st.failure = string(store.Succeeded), ev.At, "", false
	case history.StepFailed:
		st.status, st.note, st.failure = string(ev.Status), errText(), true
		if !ev.RetryAt.IsZero() {
			st.note += ", retry at " + ts(ev.RetryAt)
		}
		if ev.Status.Terminal() {
			st.ended = ev.At
		}
	case history.Awaiting:
		st.status, st.note = string(store.WaitingExternal), ev.Reason
	case history.Sleeping:
		st.note = "sleeping until " + ts(ev.WakeAt)
	case history.AwaitCompleted:
		// The await step is queued to run again with the completion (its
		// STEP_STARTED and STEP_SUCCEEDED follow); a late completion
		// changes nothing else.
		st.status, st.note = string(ev.Status), ev.Reason
	case history.OutcomeUnknown:
		st.status, st.note = string(store.RemoteOutcomeUnknown), ev.Reason
	case history.Redriven:
		st.status, st.note, st.ended, st.failure = string(ev.Status), "re-driven: "+ev.Reason, time.Time{}, false
	case history.CancelRequested:
		st.note = "cancel requested: " + ev.Reason
	case history.Cancelled, history.DeadLettered:
		st.status, st.ended = string(ev.Status), ev.At
		if t := errText(); t != "" {
			st.note = t
		}
	}
}

// update takes a new status document and, with history, the events
// read since the last update (those seen before are skipped).
func (wt *watcher) update(e client.Execution, events []client.Event, withHistory bool) {
	var fresh []client.Event
	for _, ev := range events {
		if ev.Seq > wt.lastSeq {
			wt.lastSeq, wt.lastStatus = ev.Seq, ev.Status
			wt.apply(ev)
			fresh = append(fresh, ev)
		}
	}
	// The status document is the newest word on the current step (a
	// stream-fed history may lag behind it).
	cur := wt.step(e.StepIndex, e.StepName)
	for i, st := range wt.steps {
		if i < e.StepIndex && st.status != string(store.Succeeded) {
			st.status = string(store.Succeeded)
			if st.ended.IsZero() {
				st.ended = e.UpdatedAt
			}
		}
		if i < e.StepIndex && st.failure {
			st.note, st.failure = "", false
		}
	}
	if cur.started.IsZero() {
		cur.started = e.UpdatedAt
	}
	cur.status, cur.attempt = string(e.Status), e.Attempt
	if e.Status.Terminal() && cur.ended.IsZero() {
		cur.ended = e.UpdatedAt
	}
	switch {
	case cur.failure && (e.Status == store.Running || e.Status == store.Queued || e.Status == store.Succeeded):
		cur.note, cur.failure = "", false
	case e.Error != nil && e.Error.Code != "" && (e.Status == store.WaitRetry || e.Status.Terminal()) && e.Status != store.Succeeded:
		cur.note, cur.failure = e.Error.Code+": "+e.Error.Message, true
		if e.Status == store.WaitRetry && !e.NextDueAt.IsZero() {
			cur.note += ", retry at " + ts(e.NextDueAt)
		}
	}
	if wt.live {
		wt.draw(e)
		return
	}
	if withHistory {
		for _, ev := range fresh {
			line := fmt.Sprintf("%s  %-16s  step %s  attempt %d", ts(ev.At), ev.Type, step(ev.StepIndex, ev.StepName), ev.Attempt)
			if d := eventDetail(ev); d != "" {
				line += "  " + d
			}
			fmt.Fprintln(wt.w, visible(line))
		}
		return
	}
	line := fmt.Sprintf("%s  %-16s  step %s  attempt %d", ts(e.UpdatedAt), e.Status, step(e.StepIndex, e.StepName), e.Attempt)
	if cur.note != "" {
		line += "  " + cur.note
	}
	if line != wt.lastLine {
		wt.lastLine = line
		fmt.Fprintln(wt.w, visible(line))
	}
}

// lines renders the live display: a header and one line per step.
func (wt *watcher) lines(e client.Execution) []string {
	idx := make([]int, 0, len(wt.steps))
	for i := range wt.steps {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := []string{visible(fmt.Sprintf("execution %s  pipeline %s  %s", e.ExecutionID, e.PipelineID, e.Status))}
	width := 0
	for _, i := range idx {
		width = max(width, len(visible(step(i, wt.steps[i].name))))
	}
	for _, i := range idx {
		st := wt.steps[i]
		mark := "  "
		switch st.status {
		case string(store.Succeeded):
			mark = "ok"
		case string(store.Running), string(store.Queued):
			mark = ".."
		case string(store.WaitRetry), string(store.WaitingExternal), string(store.RemoteOutcomeUnknown):
			mark = "~~"
		case string(store.DLQ), string(store.Failed), string(store.Cancelled):
			mark = "!!"
		}
		line := fmt.Sprintf("  %s %-*s  %-22s  attempt %d", mark, width, visible(step(i, st.name)), visible(st.status), st.attempt)
		switch {
		case !st.started.IsZero() && !st.ended.IsZero():
			line += "  " + dur(st.ended.Sub(st.started))
		case !st.started.IsZero() && st.status == string(store.Running):
			line += "  " + dur(wt.now().Sub(st.started))
		}
		if st.note != "" {
			line += "  " + visible(st.note)
		}
		out = append(out, line)
	}
	return out
}

// draw rewrites the live display in place: up to its first line, then
// each line cleared and written again.
func (wt *watcher) draw(e client.Execution) {
	var b strings.Builder
	if wt.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", wt.drawn)
	}
	ls := wt.lines(e)
	for _, l := range ls {
		b.WriteString("\r\x1b[2K" + l + "\n")
	}
	wt.drawn = len(ls)
	_, _ = io.WriteString(wt.w, b.String())
}

// finish prints the outcome line.
func (wt *watcher) finish(e client.Execution) {
	line := fmt.Sprintf("%s after %s", e.Status, dur(e.UpdatedAt.Sub(e.CreatedAt)))
	if e.Status != store.Succeeded && e.Error != nil {
		line += ": " + errorText(e.Error)
	}
	fmt.Fprintln(wt.w, visible(line))
}
