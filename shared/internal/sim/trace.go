package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The trace is what a violation prints: the lines about the execution
// involved, and the global lines (crashes, deploys, outages) that name it.
// A run of months makes millions of lines, so the trace keeps, per
// execution, its first traceHead lines and its last traceTail ones, the
// last traceGlobal global lines, and forgets an execution's lines once its
// row expired as promised. Its memory stays bounded by the executions
// alive at once, not by the length of the run. Options.KeepTrace keeps
// every line besides (short runs: the determinism test).
const (
	traceHead   = 20
	traceTail   = 60
	traceGlobal = 4096
)

// traceLine is one line of the trace; seq orders lines of one instant.
type traceLine struct {
	seq  int
	at   time.Duration
	exec string // "" for global lines
	text string
}

// execTrace is one execution's kept lines: the first ones, then a ring
// of the last ones; dropped counts the lines between them.
type execTrace struct {
	head    []traceLine
	tail    []traceLine
	next    int // the ring's oldest line once it is full
	dropped int
}

func (t *execTrace) add(l traceLine) {
	switch {
	case len(t.head) < traceHead:
		t.head = append(t.head, l)
	case len(t.tail) < traceTail:
		t.tail = append(t.tail, l)
	default:
		t.tail[t.next] = l
		t.next = (t.next + 1) % traceTail
		t.dropped++
	}
}

// lines are the kept lines in order.
func (t *execTrace) lines() []traceLine {
	out := slices.Clone(t.head)
	out = append(out, t.tail[t.next:]...)
	return append(out, t.tail[:t.next]...)
}

// traceLog holds the trace.
type traceLog struct {
	seq    int
	all    []traceLine // every line (Options.KeepTrace only)
	keep   bool
	byExec map[string]*execTrace
	global []traceLine // a ring of the last traceGlobal global lines
	gnext  int
}

func newTraceLog(keep bool) *traceLog {
	return &traceLog{keep: keep, byExec: map[string]*execTrace{}}
}

// add records a line; the caller holds the world's lock.
func (t *traceLog) add(at time.Duration, exec, text string) {
	t.seq++
	l := traceLine{seq: t.seq, at: at, exec: exec, text: text}
	if t.keep {
		t.all = append(t.all, l)
	}
	if exec == "" {
		if len(t.global) < traceGlobal {
			t.global = append(t.global, l)
		} else {
			t.global[t.gnext] = l
			t.gnext = (t.gnext + 1) % traceGlobal
		}
		return
	}
	et := t.byExec[exec]
	if et == nil {
		et = &execTrace{}
		t.byExec[exec] = et
	}
	et.add(l)
}

// forget drops an execution's lines (its row expired as promised).
func (t *traceLog) forget(exec string) { delete(t.byExec, exec) }

// about is the trace of exec: its kept lines and the kept global lines
// naming it, in order, with a line telling how many were left out.
func (t *traceLog) about(exec string) []string {
	var ls []traceLine
	dropped, resumed := 0, 0 // lines left out, and the seq of the line after them
	if et := t.byExec[exec]; et != nil {
		ls, dropped = et.lines(), et.dropped
		if dropped > 0 {
			resumed = ls[traceHead].seq
		}
	}
	for _, l := range t.global {
		if strings.Contains(l.text, exec) {
			ls = append(ls, l)
		}
	}
	slices.SortFunc(ls, func(a, b traceLine) int { return a.seq - b.seq })
	out := make([]string, 0, len(ls)+1)
	for _, l := range ls {
		if dropped > 0 && l.seq == resumed {
			out = append(out, "... "+strconv.Itoa(dropped)+" lines ...")
		}
		out = append(out, "+"+fmtDur(l.at)+" "+l.text)
	}
	return out
}

// progress tells Options.Progress how far the run is, once every 30
// virtual days (from the audits, so that it adds no event to the run).
func (w *world) progress(now time.Time, alive int) {
	if w.o.Progress == nil {
		return
	}
	at := now.Sub(w.start)
	w.mu.Lock()
	defer w.mu.Unlock()
	if at < w.nextProgress {
		return
	}
	w.nextProgress = at.Truncate(progressEvery) + progressEvery
	fmt.Fprintf(w.o.Progress, "simulation %s seed=%d: +%s, %d executions created, %d alive, %d events, %d violations\n",
		w.o.Store, w.o.Seed, fmtDur(at), len(w.incList), alive, w.events, len(w.report.Violations))
}

// progressEvery is how often (in virtual time) a long run reports.
const progressEvery = 30 * 24 * time.Hour

// globalSince is the kept global lines from at on, in order (SIM_DEBUG:
// what the processes went through before a violation).
func (t *traceLog) globalSince(at time.Duration) []string {
	var ls []traceLine
	for _, l := range t.global {
		if l.at >= at {
			ls = append(ls, l)
		}
	}
	slices.SortFunc(ls, func(a, b traceLine) int { return a.seq - b.seq })
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = "+" + fmtDur(l.at) + " " + l.text
	}
	return out
}
