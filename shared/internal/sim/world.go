package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/lambdahandlers"
)

// startProcs starts the worker processes, all serving version 1.
func (w *world) startProcs() error {
	w.procs = make([]*proc, w.cfg.procs)
	for i := range w.procs {
		p, err := w.newProc(i, 1, 1, false)
		if err != nil {
			return err
		}
		w.procs[i] = p
	}
	return nil
}

// newProc builds generation gen of process slot: a runtime on the
// backend's providers behind the process's gates, and the real Lambda
// handlers on it.
func (w *world) newProc(slot, gen, version int, dropOld bool) (*proc, error) {
	p := &proc{w: w, slot: slot, gen: gen, name: fmt.Sprintf("w%d.%d", slot, gen), version: version, dropOld: dropOld}
	w.mu.Lock()
	if w.cfg.rates.skew > 0 {
		p.skew = time.Duration(w.rng.Int64N(int64(2*w.cfg.rates.skew))) - w.cfg.rates.skew
	}
	w.mu.Unlock()
	reg, err := p.registry(version, dropOld)
	if err != nil {
		return nil, err
	}
	prov, err := w.back.providers(p)
	if err != nil {
		return nil, err
	}
	rt, err := p.newRuntime(reg, prov)
	if err != nil && strings.Contains(err.Error(), "retention") {
		// A configuration that cannot hold (a retry or an await longer
		// than the retention) must be refused: that is the check. Run on
		// with one that can.
		w.check(invConfigRefused)
		w.fault("config_refused")
		w.tracef("", "%s refused the configuration: %v", p.name, err)
		w.mu.Lock()
		w.cfg.longRetry.MaxDelay = w.cfg.ttl / 2
		w.cfg.longRetry.Delay = min(w.cfg.longRetry.Delay, w.cfg.longRetry.MaxDelay)
		if w.cfg.awaitTimeout > w.cfg.ttl {
			w.cfg.awaitTimeout = w.cfg.ttl
		}
		w.mu.Unlock()
		if reg, err = p.registry(version, dropOld); err != nil {
			return nil, err
		}
		rt, err = p.newRuntime(reg, prov)
	}
	if err != nil {
		return nil, err
	}
	p.rt = rt
	log := rt.Logger()
	var opts []lambdahandlers.WorkerOption
	if w.work != nil {
		opts = append(opts, lambdahandlers.WithDeferrer(func(_ context.Context, source, receipt string, d time.Duration) error {
			return w.queueOf(source).changeVisibility(receipt, d)
		}), lambdahandlers.WithRequeue(&gatedDispatcher{p: p, d: &queueDispatcher{w: w, q: w.work}}))
	}
	p.worker = lambdahandlers.Worker(rt, w.cfg.lease, log, opts...)
	p.dlq = lambdahandlers.DLQ(rt, &gatedRecorder{p: p, r: prov.recorder}, nil, log)
	p.sweeper = lambdahandlers.Sweeper(rt, 10*time.Second, log)
	return p, nil
}

// liveProcLocked picks a random process that neither crashed nor is
// frozen (nil when none). Callers hold w.mu.
func (w *world) liveProcLocked() *proc {
	var live []*proc
	for _, p := range w.procs {
		if p == nil {
			continue
		}
		p.mu.Lock()
		ok := !p.crashed && !p.paused
		p.mu.Unlock()
		if ok {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	w.draws++
	return live[w.rng.IntN(len(live))]
}

func (w *world) liveProc() *proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.liveProcLocked()
}

// procCrashed replaces a dead process after a restart delay (a new Lambda
// execution environment, or the service manager restarting qasync serve).
func (w *world) procCrashed(p *proc) {
	w.back.processCrashed(p)
	delay := w.between(time.Second, 30*time.Second)
	if w.o.Store == StoreEmbedded {
		w.outage(time.Now(), time.Now().Add(delay+time.Millisecond))
	}
	w.after(delay, "restart", func() { w.restart(p.slot, p.version, p.dropOld) })
}

// restart starts the next generation of a process slot.
func (w *world) restart(slot, version int, dropOld bool) {
	old := w.procs[slot]
	if old != nil && !old.isCrashed() {
		old.mu.Lock()
		old.crashed = true // the old generation is stopped (a deploy)
		old.mu.Unlock()
		w.back.processCrashed(old)
	}
	gen := 1
	if old != nil {
		gen = old.gen + 1
	}
	p, err := w.newProc(slot, gen, version, dropOld)
	if err != nil {
		w.violate(invSetup, "", "restart process %d: %v", slot, err)
		return
	}
	w.procs[slot] = p
	w.tracef("", "%s started (sim.pay version %d%s)", p.name, version, map[bool]string{true: ", version 1 dropped"}[dropOld])
}

// deploy rolls version 2 of sim.pay out: each process is replaced at a
// random moment of the deploy window. Now and then the new definition
// forgets to keep version 1 draining beside it.
func (w *world) deploy() {
	dropOld := w.chance(0.1)
	w.tracef("", "DEPLOY sim.pay version 2 begins (version 1 %s)", map[bool]string{true: "dropped", false: "kept draining"}[dropOld])
	w.fault("deploy")
	for slot := range w.procs {
		w.after(w.between(0, w.cfg.deployWindow), "deploy", func() { w.restart(slot, 2, dropOld) })
	}
}

// freeze pauses a random process for a while: its I/O waits (renewals
// too, so its leases lapse), then it wakes and carries on.
func (w *world) freeze() {
	p := w.liveProc()
	if p == nil || w.o.Store == StoreEmbedded {
		return
	}
	d := w.between(w.cfg.lease, 4*w.cfg.lease)
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
	w.fault("pause")
	w.tracef("", "PAUSE %s for %s", p.name, d.Round(time.Second))
	w.after(d, "unpause", func() {
		w.tracef("", "%s wakes up", p.name)
		p.thaw()
	})
}

// sweep runs the sweeper function on a live process: at every interval,
// but for the sweeps that would find nothing (no row of the sweep index
// due, no bulk re-drive), of which it runs only every tenth: an idle month
// then costs the simulation little, and nothing a sweep would do is
// skipped.
func (w *world) sweep() {
	if w.quiet() {
		w.mu.Lock()
		w.idleSweeps++
		skip := w.idleSweeps%10 != 0
		w.mu.Unlock()
		if skip {
			return
		}
	}
	w.runSweep(w.liveProc())
}

// runSweep invokes the sweeper function on p (nil: none).
func (w *world) runSweep(p *proc) {
	if p == nil {
		return
	}
	w.async(func() {
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), sweepStarted{}, time.Now()), time.Minute)
		defer cancel()
		rep, err := p.sweeper(ctx, events.EventBridgeEvent{})
		if err == nil && (rep.Redispatched > 0 || rep.AwaitsTimedOut > 0 || rep.DeadLettersPublished > 0 || rep.Cancelled > 0) {
			w.tracef("", "%s sweep: due=%d redispatched=%d awaits_timed_out=%d dead_letters_published=%d cancelled=%d",
				p.name, rep.Due, rep.Redispatched, rep.AwaitsTimedOut, rep.DeadLettersPublished, rep.Cancelled)
		}
	})
}

// quiet reports whether a sweep now would find nothing: no row of the
// sweep index due before the next interval, no bulk re-drive to drive.
// An answer holds until anything else happens (an event of the workload,
// an invocation running), so the index is asked once per quiet spell.
func (w *world) quiet() bool {
	now := time.Now()
	w.mu.Lock()
	busy := w.running > 0 || now.Before(w.jobsUntil)
	known := !busy && now.Before(w.quietUntil)
	w.mu.Unlock()
	switch {
	case busy, w.scheduleDueSoon(now.Add(10 * w.cfg.sweepInterval)):
		return false
	case known:
		return true
	}
	ahead := 10 * w.cfg.sweepInterval
	if !w.back.nothingDue(now.Add(ahead)) {
		return false
	}
	w.mu.Lock()
	w.quietUntil = now.Add(ahead - w.cfg.sweepInterval)
	w.mu.Unlock()
	return true
}

// pump starts the embedded store's deliveries that are due (at most the
// process's concurrency at once), and plans the next.
func (w *world) pump() {
	eb, ok := w.back.(*embeddedBackend)
	if !ok || eb.disp == nil {
		return
	}
	{
		p := w.procs[0]
		if p == nil || p.isCrashed() {
			return
		}
		w.mu.Lock()
		busy := w.delivering[p] >= w.cfg.concurrency
		w.mu.Unlock()
		next := eb.disp.NextAvailable()
		if next.IsZero() {
			return
		}
		if busy {
			// Every delivery slot is taken: the first to end wakes the main
			// loop, which pumps again. An event at the entry's time instead
			// would, once that time had passed, run again and again at one
			// instant while the deliveries wait for time to move.
			return
		}
		if next.After(time.Now()) {
			w.onceAt(next.Add(time.Millisecond), "pump", func() {})
			return
		}
		disp := eb.disp
		w.mu.Lock()
		w.delivering[p]++
		w.mu.Unlock()
		w.async(func() {
			disp.DeliverOne()
			w.mu.Lock()
			if w.delivering[p]--; w.delivering[p] == 0 {
				delete(w.delivering, p)
			}
			w.mu.Unlock()
			w.wakeMain()
		})
		// One delivery per instant: two started at one instant would wake
		// from their equal waits (a commit's backoff) at one instant too,
		// and run in no set order.
		w.after(0, "pump", func() {})
		return
	}
}

// wakeMain tells the sleeping main loop to look again.
func (w *world) wakeMain() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// shutdown stops the processes and closes the backend.
func (w *world) shutdown() {
	for _, p := range w.procs {
		if p != nil {
			p.mu.Lock()
			p.crashed = true
			p.mu.Unlock()
			p.thaw()
		}
	}
	// Let every invocation still running see the crash and end.
	for range 100 {
		time.Sleep(time.Hour)
	}
	w.back.close()
}
