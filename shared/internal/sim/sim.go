package sim

import (
	"container/heap"
	"context"
	"fmt"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/internal/tracing"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Stores the simulator runs on.
const (
	StoreMemory   = "memory"
	StoreEmbedded = "embedded"
	StoreDynamo   = "dynamo"
)

// Stores lists every store the simulator runs on.
var Stores = []string{StoreMemory, StoreEmbedded, StoreDynamo}

// Options configure one run. Zero values take the defaults.
type Options struct {
	// Seed drives everything; the same seed gives the same run.
	Seed uint64
	// Executions is how many submissions the workload makes (default 300;
	// resubmissions of an earlier key or body count among them).
	Executions int
	// VirtualDays is the span over which the submissions arrive (default
	// 30); the run then goes on until everything has settled.
	VirtualDays int
	// Store is StoreMemory, StoreEmbedded or StoreDynamo (default memory).
	Store string
	// Dir is a scratch directory (the embedded store's data directory).
	Dir string
	// KeepTrace keeps the whole event trace in the report (a failure
	// keeps the trace of the executions involved anyway).
	KeepTrace bool
	// Progress, when set, is told every 30 virtual days how far the run
	// is (a long run takes an hour); it changes nothing in the run.
	Progress io.Writer
	// skipRateReservation breaks the runtime's rate limits (every
	// reservation granted at once, nothing written): the test that proves
	// the rate limit invariant can fail sets it.
	skipRateReservation bool
	// ignoreRank is the broken variant of priorities (tests only): the
	// wait line of a key is read in creation order, as by a store that
	// ignores the rank; invKeyRankOrder must catch it.
	ignoreRank bool
	// urgentToWork is the broken variant of the urgent lane (tests only):
	// the dispatcher sends urgent work items to the work queue, as one
	// without the lane; invUrgentLane must catch it.
	urgentToWork bool
}

func (o *Options) defaults() {
	if o.Executions <= 0 {
		o.Executions = 300
	}
	if o.VirtualDays <= 0 {
		o.VirtualDays = 30
	}
	if o.Store == "" {
		o.Store = StoreMemory
	}
}

// Violation is one broken invariant.
type Violation struct {
	// Invariant names the promise (see invariants.go).
	Invariant string
	// At is the virtual time since the start of the run.
	At time.Duration
	// Execution is the execution involved ("" for none).
	Execution string
	// Detail says what was seen.
	Detail string
	// Trace is the minimal event trace: the events of the execution
	// involved (and the faults that hit its workers), in order.
	Trace []string
}

// Report is what a run found.
type Report struct {
	Seed        uint64
	Store       string
	Executions  int
	VirtualDays int
	// Settings describes the configuration the seed chose.
	Settings string
	// Virtual is how much virtual time the run covered.
	Virtual time.Duration
	// Events counts the events the main loop handled.
	Events int
	// Faults counts the faults injected, by kind.
	Faults map[string]int
	// Outcomes counts the executions by final status.
	Outcomes map[string]int
	// Checks counts the checks of each invariant.
	Checks map[string]int
	// Violations lists every broken invariant (a good run has none).
	Violations []Violation
	// Trace is the whole event trace (Options.KeepTrace).
	Trace []string
}

// OK reports whether no invariant was broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Table renders the report: the seed, the settings, the fault counts and
// the invariant table, then each violation with its trace.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "simulation seed=%d store=%s executions=%d virtual_days=%d (ran %s of virtual time, %d events)\n",
		r.Seed, r.Store, r.Executions, r.VirtualDays, r.Virtual.Round(time.Minute), r.Events)
	fmt.Fprintf(&b, "settings: %s\n", r.Settings)
	fmt.Fprintf(&b, "faults:")
	for _, k := range sortedKeys(r.Faults) {
		fmt.Fprintf(&b, " %s=%d", k, r.Faults[k])
	}
	fmt.Fprintf(&b, "\noutcomes:")
	for _, k := range sortedKeys(r.Outcomes) {
		fmt.Fprintf(&b, " %s=%d", k, r.Outcomes[k])
	}
	b.WriteString("\n\n| invariant | checks | violations |\n|---|---:|---:|\n")
	broken := map[string]int{}
	for _, v := range r.Violations {
		broken[v.Invariant]++
	}
	for _, inv := range invariantNames {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", inv, r.Checks[inv], broken[inv])
	}
	// Every violation in one line; the trace of the first of each
	// invariant (the others are alike).
	traced := map[string]bool{}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\nVIOLATION %s at +%s execution=%s\n  %s\n", v.Invariant, fmtDur(v.At), v.Execution, v.Detail)
		if traced[v.Invariant] {
			continue
		}
		traced[v.Invariant] = true
		for _, line := range v.Trace {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "\nreproduce: make simulate SEED=%d EXECUTIONS=%d VIRTUAL_DAYS=%d STORES=%s\n", r.Seed, r.Executions, r.VirtualDays, r.Store)
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Run runs one simulation inside a synctest bubble of t and returns its
// report. It fails t only when the simulator itself cannot run (a broken
// setup), never for a violation: the caller decides.
func Run(t *testing.T, o Options) Report {
	t.Helper()
	o.defaults()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	var rep Report
	// A simulation allocates a great deal and keeps little: collect less
	// often (it is CPU-bound, and memory is plentiful).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	synctest.Test(t, func(t *testing.T) {
		w, err := newWorld(t, o)
		if err != nil {
			t.Fatalf("sim: setup: %v", err)
		}
		rep = w.run()
	})
	return rep
}

// event is one thing the main loop does at a virtual time.
type event struct {
	at   time.Time
	seq  uint64
	name string
	fn   func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// world is one simulated deployment.
type world struct {
	t   *testing.T
	o   Options
	cfg settings
	// sink receives the lifecycle events (events.go).
	sink *outbox.MemorySink
	// pz follows the operators' pauses (pause.go).
	pz *pauseState
	// mu guards everything below that invocation goroutines touch (the
	// rng, the trace, the queues, the models, the tracking). It is never
	// held across a call into the runtime or a blocking operation.
	mu    sync.Mutex
	rng   *rand.Rand
	start time.Time
	q     eventQueue
	seq   uint64
	// phase: submissions and faults (load), then faults off until every
	// execution settled (settle).
	settling bool
	stopAt   time.Time

	back  backend
	procs []*proc
	work  *sqsQueue // memory and dynamo: the work queue (SQS semantics)
	// urgent is the urgent work queue (memory and dynamo): the lane of
	// executions of priority at most urgentAt.
	urgent *sqsQueue
	dlq    *sqsQueue // memory and dynamo: the dead-letter queue

	bank    *bank
	partner *partner
	subs    []*submission
	incs    map[string]*incarnation // by incarnation key
	incList []*incarnation          // in creation order
	// alive are the incarnations whose rows have not expired yet, in
	// creation order: what the audits look at (the audits drop the gone).
	alive []*incarnation

	report Report
	trace  *traceLog
	// tracer and spans: every process's OpenTelemetry spans (spans.go).
	tracer *tracing.Provider
	spans  *tracing.InMemory
	events int
	// instant and atInstant count the events run at one virtual instant:
	// past maxEventsPerInstant the simulator itself is spinning (time
	// cannot move), a failure with its seed rather than a hang.
	instant   time.Time
	atInstant int
	pending   map[string]bool // coalesced events by name
	// commits remembers (incarnation, transition key, status) of every
	// logged commit, to find one committed twice.
	commits map[string]string
	// keys is the record of the keyed executions (keys.go).
	keys keyBook
	// rates is the record of the rate-limited steps' starts (ratelimits.go).
	rates rateBook
	ctx   context.Context
	// wake tells the main loop, asleep until its next event, that an
	// earlier one was scheduled (by an invocation running meanwhile).
	wake          chan struct{}
	sleepingUntil time.Time
	// latest is the newest incarnation of each execution id.
	latest map[string]*incarnation
	// sessions numbers the console sessions signed out (signOut).
	sessions int
	// delivering counts, per process, the embedded store's deliveries in
	// flight. A process's own count limits its deliveries: those of a
	// dead process may still be ending (a slow step's wait), but a real
	// crash takes them with it, so they take no slot of the next one.
	delivering map[*proc]int
	// reported: the invariants already broken per execution.
	reported map[string]bool
	// debugGlobal counts the violations SIM_DEBUG printed (the first
	// also prints the hour of global lines before it).
	debugGlobal int
	// outages are the times the workers could do nothing.
	outages [][2]time.Time
	// reopenedAt is when the embedded store was last opened (breaking the
	// leases its dead process held).
	reopenedAt time.Time
	// audits counts the audits (every sixth is a full one); finishing is
	// set for the final checks.
	audits    int
	finishing bool
	// idleSweeps counts the sweeps that would have found nothing; quietUntil
	// is until when nothing is due unless something happens meanwhile;
	// running counts the invocations in flight.
	idleSweeps int
	quietUntil time.Time
	running    int
	// draws counts the random draws (a trace of them shows where two runs
	// of one seed part, should they).
	draws int
	// jobsUntil: a bulk re-drive may be running until then.
	jobsUntil time.Time
	// bulkKeys numbers the idempotency keys of bulk re-drives.
	bulkKeys int
	// spreads are the map pipeline's documents after their spread step,
	// by execution id: the join step's output continues them.
	spreads map[string]doc
	// scheds are the schedules the operators made (schedules.go).
	scheds []*simSchedule
	// nextProgress is when the run next reports its progress.
	nextProgress time.Duration
}

func newWorld(t *testing.T, o Options) (*world, error) {
	w := &world{
		t: t, o: o, rng: rand.New(rand.NewChaCha8(seedBytes(o.Seed))), start: time.Now(),
		incs: map[string]*incarnation{}, pending: map[string]bool{}, commits: map[string]string{},
		ctx: context.Background(), wake: make(chan struct{}, 1), latest: map[string]*incarnation{}, reported: map[string]bool{}, delivering: map[*proc]int{},
		spreads: map[string]doc{}, trace: newTraceLog(o.KeepTrace),
	}
	w.report = Report{Seed: o.Seed, Store: o.Store, Executions: o.Executions, VirtualDays: o.VirtualDays,
		Faults: map[string]int{}, Outcomes: map[string]int{}, Checks: map[string]int{}}
	w.cfg = drawSettings(w.rng, o)
	w.report.Settings = w.cfg.String()
	w.tracer, w.spans = newSpans(o.Seed)
	w.bank = &bank{w: w, charges: map[string][]charge{}}
	w.partner = &partner{w: w}
	b, err := newBackend(w)
	if err != nil {
		return nil, err
	}
	w.back = b
	if err := w.startProcs(); err != nil {
		return nil, err
	}
	w.plan()
	return w, nil
}

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	for i := range 4 {
		s := seed + uint64(i)*0x9E3779B97F4A7C15
		for j := range 8 {
			b[i*8+j] = byte(s >> (8 * j))
		}
	}
	return b
}

// now is the virtual time (the store's, the true clock).
func (w *world) now() time.Time { return time.Now() }

// since is the virtual time since the start of the run.
func (w *world) since() time.Duration { return time.Now().Sub(w.start) }

// at schedules fn at t (not before now) with a name for the trace.
func (w *world) at(t time.Time, name string, fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.atLocked(t, name, fn)
}

func (w *world) atLocked(t time.Time, name string, fn func()) {
	if n := time.Now(); t.Before(n) {
		t = n
	}
	w.seq++
	heap.Push(&w.q, &event{at: t, seq: w.seq, name: name, fn: fn})
	if t.Before(w.sleepingUntil) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// after schedules fn d from now, plus a random fraction of a millisecond,
// so that no two goroutines wake at one instant.
func (w *world) after(d time.Duration, name string, fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.atLocked(time.Now().Add(d+w.jitterLocked()), name, fn)
}

// once schedules fn at t unless an event of the same name is pending (it
// then keeps the earlier one... both run: the later finds nothing to do).
func (w *world) onceAt(t time.Time, name string, fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending[name] {
		return
	}
	w.pending[name] = true
	w.atLocked(t, name, func() {
		w.mu.Lock()
		delete(w.pending, name)
		w.mu.Unlock()
		fn()
	})
}

func (w *world) jitterLocked() time.Duration {
	w.draws++
	return time.Duration(w.rng.Int64N(int64(time.Millisecond))) + 1
}

// randReader is a source of random bytes for a runtime (its ids and
// tokens), seeded from the run's seed: a run's ids repeat with its seed.
func (w *world) randReader() io.Reader {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.draws++
	return &lockedReader{r: rand.New(rand.NewChaCha8(seedBytes(w.rng.Uint64())))}
}

// lockedReader is a seeded rand.Rand as an io.Reader.
type lockedReader struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedReader) Read(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range b {
		b[i] = byte(l.r.Uint32())
	}
	return len(b), nil
}

// chance draws true with probability p.
func (w *world) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.draws++
	return w.rng.Float64() < p
}

// intn draws an int in [0, n).
func (w *world) intn(n int) int {
	if n <= 1 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.draws++
	return w.rng.IntN(n)
}

// between draws a duration in [lo, hi).
func (w *world) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.draws++
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// fault counts an injected fault of kind.
func (w *world) fault(kind string) {
	w.mu.Lock()
	w.report.Faults[kind]++
	w.mu.Unlock()
}

// check counts a check of an invariant.
func (w *world) check(inv string) {
	w.mu.Lock()
	w.report.Checks[inv]++
	w.mu.Unlock()
}

// tracef adds a line to the trace; exec names the execution it is about
// ("" for a global line such as a crash or a deploy).
func (w *world) tracef(exec, format string, args ...any) {
	at, text := w.since(), fmt.Sprintf(format, args...)
	w.mu.Lock()
	if debugDraws {
		text = fmt.Sprintf("[%d] %s", w.draws, text)
	}
	w.trace.add(at, exec, text)
	w.mu.Unlock()
}

// violate records a broken invariant with the trace of exec.
func (w *world) violate(inv, exec, format string, args ...any) {
	v := Violation{Invariant: inv, At: w.since(), Execution: exec, Detail: fmt.Sprintf(format, args...)}
	w.mu.Lock()
	if exec != "" {
		// One report per execution and invariant: the first tells it.
		if w.reported[inv+"|"+exec] {
			w.mu.Unlock()
			return
		}
		w.reported[inv+"|"+exec] = true
	}
	if exec != "" {
		v.Trace = w.trace.about(exec)
	}
	if len(v.Trace) > traceHead+traceTail+20 {
		v.Trace = append(v.Trace[:traceHead:traceHead], append([]string{fmt.Sprintf("... %d lines ...", len(v.Trace)-traceHead-traceTail)}, v.Trace[len(v.Trace)-traceTail:]...)...)
	}
	w.report.Violations = append(w.report.Violations, v)
	w.mu.Unlock()
	w.tracef(exec, "VIOLATION %s: %s", inv, v.Detail)
	if os.Getenv("SIM_DEBUG") != "" {
		// Each violation as it happens, with its trace; the first also with
		// what every process went through in the hour before it.
		w.mu.Lock()
		inFlight, zombies := 0, 0
		for p, n := range w.delivering {
			if p == w.procs[0] {
				inFlight += n
			} else {
				zombies += n
			}
		}
		w.debugGlobal++
		var global []string
		if w.debugGlobal == 1 {
			global = w.trace.globalSince(v.At - time.Hour)
		}
		w.mu.Unlock()
		fmt.Fprintf(os.Stderr, "sim: violation %s at +%s %s: %s (embedded deliveries in flight: %d; of dead processes, still ending: %d)\n", inv, fmtDur(v.At), exec, v.Detail, inFlight, zombies)
		for _, line := range v.Trace {
			fmt.Fprintf(os.Stderr, "sim:   %s\n", line)
		}
		for _, line := range global {
			fmt.Fprintf(os.Stderr, "sim: global %s\n", line)
		}
	}
}

// async runs fn in a goroutine of its own (an invocation: a worker, a
// sweep) and returns once every goroutine is blocked again.
func (w *world) async(fn func()) {
	w.mu.Lock()
	w.running++
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			w.running--
			w.mu.Unlock()
		}()
		fn()
	}()
	synctest.Wait()
}

// debugDraws prefixes every trace line with the draws so far
// (SIM_DEBUG_DRAWS=1): a determinism check's diff then shows where two
// runs parted.
var debugDraws = os.Getenv("SIM_DEBUG_DRAWS") != ""

// periodic names the events that only look (they never make a row due).
var periodic = map[string]bool{"sweep": true, "audit": true, "history_feed": true}

// run is the main loop: events in time order until the workload is done
// and everything settled (or the virtual deadline).
// maxEventsPerInstant bounds the events of one virtual instant; a real
// run has a few dozen at most (a burst of deliveries and their commits).
const maxEventsPerInstant = 100_000

func (w *world) run() Report {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.pump()
		w.mu.Lock()
		if w.q.Len() == 0 {
			w.mu.Unlock()
			break
		}
		next := w.q[0].at
		if next.After(w.stopAt) {
			w.mu.Unlock()
			break
		}
		if d := time.Until(next); d > 0 {
			// Sleep until the next event, or until an invocation running
			// meanwhile schedules an earlier one (or the embedded queue
			// gets an entry).
			w.sleepingUntil = next
			w.mu.Unlock()
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-w.wake:
				timer.Stop()
			case <-w.back.woken():
				timer.Stop()
			}
			synctest.Wait()
			w.mu.Lock()
			w.sleepingUntil = time.Time{}
			w.mu.Unlock()
			continue
		}
		ev := heap.Pop(&w.q).(*event)
		if !periodic[ev.name] {
			w.quietUntil = time.Time{}
		}
		if now := time.Now(); now.Equal(w.instant) {
			w.atInstant++
		} else {
			w.instant, w.atInstant = now, 0
		}
		spinning := w.atInstant > maxEventsPerInstant
		w.mu.Unlock()
		if spinning {
			w.violate(invSetup, "", "%d events at one virtual instant (the last: %s): the simulator spins without letting time move", w.atInstant, ev.name)
			break
		}
		ev.fn()
		synctest.Wait()
		w.events++
		if w.settling && w.settled() {
			break
		}
	}
	w.finish()
	w.report.Events = w.events
	w.report.Virtual = w.since()
	if w.o.KeepTrace {
		for _, l := range w.trace.all {
			w.report.Trace = append(w.report.Trace, "+"+fmtDur(l.at)+" "+l.text)
		}
	}
	w.shutdown()
	return w.report
}

func fmtDur(d time.Duration) string {
	days := d / (24 * time.Hour)
	rest := d - days*24*time.Hour
	s := rest.Truncate(time.Millisecond).String()
	if days > 0 {
		return fmt.Sprintf("%dd%s", days, s)
	}
	return s
}
