package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// errCrashed is what every I/O of a crashed process returns: nothing it
// does after the crash reaches a store, a queue or a partner.
var errCrashed = errors.New("sim: the process crashed")

// errInjected is a backend failure the simulator injected (transient).
var errInjected = fmt.Errorf("sim: injected backend failure: %w", store.ErrUnavailable)

// errDiskFull is a write of the embedded process while its disk is full.
// It is not store.ErrUnavailable: the embedded store passes the file
// system's error on as it is (as bbolt's ENOSPC would reach a caller).
var errDiskFull = errors.New("sim: write failed: no space left on device")

// proc is one worker process: a runtime with its providers behind fault
// gates, and the Lambda handlers on it.
type proc struct {
	w    *world
	slot int
	gen  int
	name string
	skew time.Duration

	version int  // the sim.pay definition it serves (1 or 2)
	dropOld bool // version 2 without version 1 draining beside it

	rt      *engine.Runtime
	worker  func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
	dlq     func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
	sweeper func(context.Context, events.EventBridgeEvent) (lambdahandlers.SweepReport, error)

	mu      sync.Mutex
	crashed bool
	// paused is set while the process is frozen: its I/O calls wait, each
	// on a channel of its own (waiters, in arrival order), so that they can
	// be woken one at a time.
	paused  bool
	waiters []chan struct{}
	// diskFull: the embedded store refuses writes until then.
	diskFullUntil time.Time
}

// clock is the process's clock: the true time plus its skew.
type skewClock struct{ d time.Duration }

func (c skewClock) Now() time.Time { return time.Now().Add(c.d) }

// isCrashed reports whether the process has crashed.
func (p *proc) isCrashed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashed
}

// crash kills the process: every later I/O of it fails.
func (p *proc) crash(where, exec string) {
	p.mu.Lock()
	if p.crashed {
		p.mu.Unlock()
		return
	}
	p.crashed = true
	p.mu.Unlock()
	p.w.fault("crash_" + where)
	p.w.tracef(exec, "CRASH %s at %s", p.name, where)
	p.w.procCrashed(p)
}

// maybeCrash crashes the process with the step crash rate.
func (p *proc) maybeCrash(where, exec string) bool {
	if p.w.settling || !p.w.chance(p.w.cfg.rates.crashInStep) {
		return p.isCrashed()
	}
	p.crash(where, exec)
	return true
}

// enter waits while the process is frozen and fails once it crashed.
func (p *proc) enter() error {
	for {
		p.mu.Lock()
		if p.crashed {
			p.mu.Unlock()
			return errCrashed
		}
		if !p.paused {
			p.mu.Unlock()
			return nil
		}
		ch := make(chan struct{})
		p.waiters = append(p.waiters, ch)
		p.mu.Unlock()
		<-ch
	}
}

// thaw ends a freeze: the waiting calls go on one at a time, each until
// it blocks again (woken together, they would run in no set order).
func (p *proc) thaw() {
	p.mu.Lock()
	p.paused = false
	waiters := p.waiters
	p.waiters = nil
	p.mu.Unlock()
	for _, ch := range waiters {
		close(ch)
		synctest.Wait()
	}
}

// ioKind classifies a gated call for the fault draws.
type ioKind int

const (
	ioRead  ioKind = iota // a read
	ioWrite               // a write that is not a step's commit
	ioCommit
)

// do runs fn as one I/O of the process, with the faults the settings
// draw: a crash before it, a failure before it (a commit that does not
// land), a crash after it (the answer lost with the process), a failure
// after it (a commit that landed, its answer lost).
func (p *proc) do(op string, kind ioKind, exec string, fn func() error) error {
	if err := p.enter(); err != nil {
		return err
	}
	if debugDraws {
		p.w.tracef("", "io %s %s %s", p.name, op, exec)
	}
	w, r := p.w, p.w.cfg.rates
	if !w.settling {
		switch {
		case w.chance(r.crashAtIO):
			p.crash("before_"+op, exec)
			return errCrashed
		case kind == ioCommit && w.chance(r.commitFail):
			w.fault("commit_fail_before_write")
			w.tracef(exec, "%s %s fails before it lands", p.name, op)
			return errInjected
		case w.chance(r.storeError):
			w.fault("backend_error")
			return errInjected
		}
	}
	if err := p.diskFull(kind); err != nil {
		return err
	}
	err := fn()
	if !w.settling {
		switch {
		case kind != ioRead && w.chance(r.crashAfterIO):
			p.crash("after_"+op, exec)
			return errCrashed
		case kind == ioCommit && err == nil && w.chance(r.commitLost):
			w.fault("commit_answer_lost")
			w.tracef(exec, "%s %s landed, its answer lost", p.name, op)
			return errInjected
		}
	}
	return err
}

// diskFull fails writes while the process's disk is full (embedded).
func (p *proc) diskFull(kind ioKind) error {
	if kind == ioRead {
		return nil
	}
	p.mu.Lock()
	until := p.diskFullUntil
	p.mu.Unlock()
	if time.Now().Before(until) {
		return errDiskFull
	}
	return nil
}

// Observe implements engine.Observer: the simulator follows every
// execution's committed states.
func (p *proc) Observe(_ context.Context, ev engine.Event) {
	if ev.Kind == engine.EventSweepCompleted {
		return
	}
	p.w.observed(p, ev)
}

// newRuntime builds the process's runtime on gated providers.
func (p *proc) newRuntime(reg *pipeline.Registry, prov providers) (*engine.Runtime, error) {
	log := slog.New(&logHandler{p: p})
	deps := engine.Deps{
		Registry:    reg,
		Store:       &gatedStore{p: p, s: prov.state},
		Payloads:    &gatedPayloads{p: p, s: prov.payloads},
		Effects:     &gatedEffects{p: p, l: prov.effects},
		Dispatcher:  &gatedDispatcher{p: p, d: prov.dispatcher},
		DeadLetter:  &gatedPublisher{p: p, d: prov.publisher},
		DeadLetters: prov.lister,
		History:     prov.history,
		Clock:       skewClock{p.skew},
		Logger:      log,
		Observers:   []engine.Observer{p},
		Rand:        p.w.randReader(),
	}
	if p.w.tracer != nil {
		deps.TracerProvider = p.w.tracer
	}
	return engine.New(p.w.cfg.engineConfig(p.name), deps)
}

// providers are the backends one process runs on (before the gates).
type providers struct {
	state      store.Store // also a store.JobStore
	payloads   payload.Store
	effects    effect.Log
	dispatcher dispatch.Dispatcher
	publisher  deadletter.Publisher
	recorder   deadletter.Recorder
	lister     deadletter.Lister
	history    history.Reader
}

// gatedStore is the state store behind the process's fault gate. It keeps
// the job store of the store it wraps (bulk re-drives).
type gatedStore struct {
	p *proc
	s store.Store
}

var (
	_ store.Store    = (*gatedStore)(nil)
	_ store.JobStore = (*gatedStore)(nil)
	_ store.MapStore = (*gatedStore)(nil)
)

func (g *gatedStore) CreateOrGet(ctx context.Context, req store.CreateRequest) (e store.Execution, created bool, err error) {
	err = g.p.do("create", ioCommit, req.Execution.ExecutionID, func() error {
		e, created, err = g.s.CreateOrGet(ctx, req)
		return err
	})
	if err != nil && req.Execution.Parent != nil {
		// A fan-out's failed child create answers a virtual nanosecond
		// late. The engine hands the creates to its workers over a
		// channel and stops handing them out at the first failure it
		// notices: whether it had already handed out the next one when
		// this one failed was left to the Go scheduler (two runs of one
		// seed parted there). Blocked in virtual time, the failure is
		// always noticed after the next create is handed out.
		time.Sleep(time.Nanosecond)
	}
	return e, created, err
}

func (g *gatedStore) Get(ctx context.Context, key store.Key) (e store.Execution, err error) {
	err = g.p.do("get", ioRead, key.ExecutionID, func() error { e, err = g.s.Get(ctx, key); return err })
	return e, err
}

func (g *gatedStore) GetBatch(ctx context.Context, keys []store.Key) (out []store.Execution, err error) {
	err = g.p.do("get_batch", ioRead, "", func() error { out, err = g.s.GetBatch(ctx, keys); return err })
	return out, err
}

func (g *gatedStore) Claim(ctx context.Context, req store.ClaimRequest) (e store.Execution, err error) {
	before, berr := g.p.w.back.view().state.Get(ctx, req.Key)
	err = g.p.do("claim", ioCommit, req.Key.ExecutionID, func() error {
		if e, err = g.s.Claim(ctx, req); err == nil {
			g.p.w.keyClaimLanded(e)
			g.p.w.keyWaitLanded(e)
		}
		return err
	})
	if err == nil && berr == nil && before.Version == req.ExpectVersion {
		g.p.w.claimed(before)
	}
	return e, err
}

func (g *gatedStore) Renew(ctx context.Context, key store.Key, owner string, version int64, until time.Time) error {
	err := g.p.do("renew", ioWrite, key.ExecutionID, func() error { return g.s.Renew(ctx, key, owner, version, until) })
	if err == nil {
		g.p.w.checkNotPausedNow(key, "a lease renewal by "+owner+" landed")
	}
	return err
}

func (g *gatedStore) Update(ctx context.Context, guard store.Guard, next store.Execution) (e store.Execution, err error) {
	err = g.p.do("commit", ioCommit, guard.Key.ExecutionID, func() error {
		if e, err = g.s.Update(ctx, guard, next); err == nil {
			g.p.w.keyWriteLanded(e)
			g.p.w.keyWaitLanded(e)
		}
		return err
	})
	return e, err
}

func (g *gatedStore) Reschedule(ctx context.Context, key store.Key, from, to time.Time, sweeps int) error {
	return g.p.do("reschedule", ioWrite, key.ExecutionID, func() error { return g.s.Reschedule(ctx, key, from, to, sweeps) })
}

func (g *gatedStore) Due(ctx context.Context, q store.DueQuery) (page store.DuePage, err error) {
	err = g.p.do("due", ioRead, "", func() error { page, err = g.s.Due(ctx, q); return err })
	if err == nil {
		g.p.w.checkDuePage(ctx, page)
	}
	return page, err
}

func (g *gatedStore) List(ctx context.Context, q store.ListQuery) (page store.ListPage, err error) {
	err = g.p.do("list", ioRead, "", func() error { page, err = g.s.List(ctx, q); return err })
	return page, err
}

func (g *gatedStore) jobs() store.JobStore { return g.s.(store.JobStore) }

func (g *gatedStore) maps() store.MapStore { return g.s.(store.MapStore) }

// CountChild, FinishGroup and MapCounts are the map counts of fan-out
// steps (every provider keeps them), behind the gate like any I/O: a crash
// before a count, after it, or after the write that finishes a group.
func (g *gatedStore) CountChild(ctx context.Context, m store.MapKey, index int, failed bool, expires time.Time) (n int, err error) {
	err = g.p.do("count_child", ioWrite, m.ParentID, func() error { n, err = g.maps().CountChild(ctx, m, index, failed, expires); return err })
	return n, err
}

func (g *gatedStore) FinishGroup(ctx context.Context, m store.MapKey, group int, expires time.Time) (n int, err error) {
	err = g.p.do("finish_group", ioWrite, m.ParentID, func() error { n, err = g.maps().FinishGroup(ctx, m, group, expires); return err })
	return n, err
}

func (g *gatedStore) MapCounts(ctx context.Context, m store.MapKey, total int) (c store.MapCounts, err error) {
	err = g.p.do("map_counts", ioRead, m.ParentID, func() error { c, err = g.maps().MapCounts(ctx, m, total); return err })
	return c, err
}

func (g *gatedStore) CreateJob(ctx context.Context, j store.Job) error {
	return g.p.do("create_job", ioWrite, "", func() error { return g.jobs().CreateJob(ctx, j) })
}

func (g *gatedStore) GetJob(ctx context.Context, key store.JobKey) (j store.Job, err error) {
	err = g.p.do("get_job", ioRead, "", func() error { j, err = g.jobs().GetJob(ctx, key); return err })
	return j, err
}

func (g *gatedStore) UpdateJob(ctx context.Context, j store.Job, expect int64) (out store.Job, err error) {
	err = g.p.do("update_job", ioWrite, "", func() error { out, err = g.jobs().UpdateJob(ctx, j, expect); return err })
	return out, err
}

func (g *gatedStore) ActiveJobs(ctx context.Context) (out []store.Job, err error) {
	err = g.p.do("active_jobs", ioRead, "", func() error { out, err = g.jobs().ActiveJobs(ctx); return err })
	return out, err
}

func (g *gatedStore) PutJobPage(ctx context.Context, key store.JobKey, n int, ids []string, expires time.Time) error {
	return g.p.do("put_job_page", ioWrite, "", func() error { return g.jobs().PutJobPage(ctx, key, n, ids, expires) })
}

func (g *gatedStore) JobPage(ctx context.Context, key store.JobKey, n int) (ids []string, err error) {
	err = g.p.do("job_page", ioRead, "", func() error { ids, err = g.jobs().JobPage(ctx, key, n); return err })
	return ids, err
}

// gatedPayloads is the payload store behind the gate.
type gatedPayloads struct {
	p *proc
	s payload.Store
}

func (g *gatedPayloads) PutPart(ctx context.Context, part payload.Part) error {
	return g.p.do("put_part", ioWrite, "", func() error { return g.s.PutPart(ctx, part) })
}

func (g *gatedPayloads) GetPart(ctx context.Context, id, name string) (part payload.Part, err error) {
	err = g.p.do("get_part", ioRead, "", func() error { part, err = g.s.GetPart(ctx, id, name); return err })
	return part, err
}

func (g *gatedPayloads) ExtendPart(ctx context.Context, id, name string, until time.Time) error {
	return g.p.do("extend_part", ioWrite, "", func() error { return g.s.ExtendPart(ctx, id, name, until) })
}

func (g *gatedPayloads) DeletePart(ctx context.Context, id, name string) error {
	return g.p.do("delete_part", ioWrite, "", func() error { return g.s.DeletePart(ctx, id, name) })
}

// gatedEffects is the effect log behind the gate.
type gatedEffects struct {
	p *proc
	l effect.Log
}

func (g *gatedEffects) CreateOrGet(ctx context.Context, r effect.Record) (rec effect.Record, created bool, err error) {
	err = g.p.do("effect_create", ioWrite, "", func() error { rec, created, err = g.l.CreateOrGet(ctx, r); return err })
	return rec, created, err
}

func (g *gatedEffects) Get(ctx context.Context, id string) (rec effect.Record, err error) {
	err = g.p.do("effect_get", ioRead, "", func() error { rec, err = g.l.Get(ctx, id); return err })
	return rec, err
}

func (g *gatedEffects) Transition(ctx context.Context, expect int64, next effect.Record) (rec effect.Record, err error) {
	err = g.p.do("effect_transition", ioWrite, "", func() error { rec, err = g.l.Transition(ctx, expect, next); return err })
	return rec, err
}

// gatedDispatcher is the work dispatcher behind the gate.
type gatedDispatcher struct {
	p *proc
	d dispatch.Dispatcher
}

func (g *gatedDispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	exec := ""
	if len(msgs) == 1 {
		exec = msgs[0].Item.ExecutionID
	}
	for _, m := range msgs {
		g.p.w.checkSweepDispatch(ctx, m.Item.ExecutionID)
	}
	return g.p.do("dispatch", ioWrite, exec, func() error { return g.d.Dispatch(ctx, msgs...) })
}

// gatedPublisher is the dead-letter publisher behind the gate.
type gatedPublisher struct {
	p *proc
	d deadletter.Publisher
}

func (g *gatedPublisher) Publish(ctx context.Context, env deadletter.Envelope) error {
	return g.p.do("dlq_publish", ioWrite, env.ExecutionID, func() error { return g.d.Publish(ctx, env) })
}

// gatedRecorder is the dead-letter recorder behind the gate (the dlq
// function's writes).
type gatedRecorder struct {
	p *proc
	r deadletter.Recorder
}

func (g *gatedRecorder) Put(ctx context.Context, r deadletter.Record) (created bool, err error) {
	err = g.p.do("dead_letter_put", ioWrite, r.ExecutionID, func() error { created, err = g.r.Put(ctx, r); return err })
	return created, err
}

func (g *gatedRecorder) Get(ctx context.Context, id string) (r deadletter.Record, err error) {
	err = g.p.do("dead_letter_get", ioRead, "", func() error { r, err = g.r.Get(ctx, id); return err })
	return r, err
}

// logHandler is the runtime's slog handler: it feeds the simulator the
// events it follows (commits for the exactly-once check, a few others for
// the trace) and drops the rest.
type logHandler struct {
	p     *proc
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{p: h.p, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

// tracedEvents are the runtime's log events the trace keeps.
var tracedEvents = map[string]bool{
	"transition_committed": true, "lease_claimed": true, "retry_scheduled": true, "execution_dead_lettered": true,
	"work_item_orphaned": true, "dispatch_failed": true, "commit_failed": true, "lease_lost": true,
	"execution_submitted": true, "execution_deduplicated": true, "execution_redriven": true, "execution_cancelled": true,
	"await_parked": true, "await_completed": true, "await_timed_out": true, "await_completed_late": true,
	"pipeline_version_unavailable": true, "command_replayed": true, "command_ambiguous": true, "command_reconciled": true,
	"lease_released": true, "release_limit_reached": true, "work_item_deferred": true, "dead_letter_recorded": true,
	"execution_rejected": true, "item_rejected": true,
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var ev string
	fields := map[string]string{}
	add := func(a slog.Attr) bool {
		if a.Key == "event" {
			ev = a.Value.String()
		} else {
			fields[a.Key] = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if ev == "" {
		ev = r.Message
	}
	if !tracedEvents[ev] {
		return nil
	}
	exec := fields["execution_id"]
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", h.p.name, ev)
	for _, k := range []string{"step", "attempt", "status", "version", "transition_key", "takeover", "error_code", "reason", "delay", "await_id", "kind", "created", "phase"} {
		if v, ok := fields[k]; ok {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	h.p.w.tracef(exec, "%s", b.String())
	return nil
}
