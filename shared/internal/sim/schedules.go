package sim

// Schedules in the simulation: operators create a few schedules (cron and
// @every specs, time zones whose clocks change inside the virtual span,
// every overlap policy, small catch-up limits), pause, resume and delete
// them, while processes crash, sweeps are duplicated and clocks skew.
// The real sweeper drives them (lambdahandlers.Sweeper calls
// Runtime.DriveSchedules after its sweeps).
//
// The invariant (invScheduleOnce): for every fire time of a schedule
// that fell while it was active and unpaused, exactly one execution
// exists under the fire's idempotency key, or the time is counted skipped
// by its overlap or catch-up policy; no execution exists for a time at
// which it was paused or deleted; and the record counts no more fires and
// skips than there were fire times. The expected fire times come from
// package schedule (the policy, tested on its own); the executions are
// found by their fire key's execution slot (engine.ExecutionSlot), which
// is also how the simulator learns the executions schedules started, so
// that every other invariant follows them too.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/schedule"
	"github.com/qasync/qasync/shared/store"
)

// invScheduleOnce: a schedule fires once per time (see above).
const invScheduleOnce = "a schedule fires once per time"

// simSchedule is one schedule the simulated operators made.
type simSchedule struct {
	n       int
	id      string
	spec    string
	zone    string
	overlap schedule.Overlap
	catchup int
	c       *schedule.Cron
	// spans are the true times it was active and unpaused: [from, to),
	// to zero while open.
	spans [][2]time.Time
	// deleted: the operator deleted it (its record is gone).
	deleted bool
	// found are the fire times whose execution was seen, by fire time.
	found map[time.Time]string
	// scanned is when its fire times were last looked up (those not
	// found are looked up again for scheduleLookback).
	scanned time.Time
}

// scheduleZones are the time zones the schedules use, with the clock
// changes of the simulation's year (synctest's clock starts on 1 January
// 2000 UTC) that fall inside a run of a month or a few: a gap (clocks go
// forward, or a zone moves east) or a repeated hour.
var scheduleZones = []struct {
	zone   string
	change time.Time
	hour   int // the local hour of the gap or the repeat
}{
	{"Africa/Khartoum", time.Date(2000, 1, 15, 10, 0, 0, 0, time.UTC), 12},
	{"America/Sao_Paulo", time.Date(2000, 2, 27, 2, 0, 0, 0, time.UTC), 23},
	{"Europe/Berlin", time.Date(2000, 3, 26, 1, 0, 0, 0, time.UTC), 2},
	{"America/New_York", time.Date(2000, 4, 2, 7, 0, 0, 0, time.UTC), 2},
}

// planSchedules draws the schedules of a run: one per clock change in
// the span (active from a day before it to a day after), and a few
// others at random times; each lives a few days, is now and then paused
// and resumed, and some are deleted before the end. Those left are paused
// when the load ends (a schedule never settles otherwise).
func (w *world) planSchedules() {
	span := time.Duration(w.o.VirtualDays) * day
	end := w.start.Add(span)
	type plan struct {
		at, until time.Time
		zone      string
		spec      string
	}
	var plans []plan
	for _, z := range scheduleZones {
		if z.change.After(w.start.Add(time.Hour)) && z.change.Add(day).Before(end) {
			spec := []string{fmt.Sprintf("30 %d * * *", z.hour), "*/30 * * * *", fmt.Sprintf("0,20,40 %d * * *", z.hour)}[w.intn(3)]
			plans = append(plans, plan{at: z.change.Add(-w.between(6*time.Hour, day)), until: z.change.Add(w.between(6*time.Hour, day)), zone: z.zone, spec: spec})
		}
	}
	for range 2 + w.intn(3) {
		at := w.start.Add(w.between(time.Minute, span*3/4))
		spec := []string{"@every 15m", "@every 1h", "*/10 * * * *", "0 * * * *", "5 9-17 * * MON-FRI", "@every 5m"}[w.intn(6)]
		zone := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"}[w.intn(4)]
		plans = append(plans, plan{at: at, until: at.Add(w.between(6*time.Hour, 3*day)), zone: zone, spec: spec})
	}
	for i, pl := range plans {
		s := &simSchedule{n: i + 1, spec: pl.spec, zone: pl.zone, found: map[time.Time]string{},
			overlap: []schedule.Overlap{schedule.Skip, schedule.BufferOne, schedule.AllowAll}[w.intn(3)], catchup: w.intn(3)}
		c, err := schedule.Parse(s.spec, s.zone)
		if err != nil {
			w.violate(invSetup, "", "schedule %q in %s: %v", s.spec, s.zone, err)
			return
		}
		s.c = c
		w.scheds = append(w.scheds, s)
		w.at(pl.at, "schedule_create", func() { w.scheduleOp(s, "create") })
		for range w.intn(3) {
			// A pause and its resume, both inside the schedule's life (a
			// resume after its last pause would keep it firing to the end).
			at := pl.at.Add(w.between(time.Hour, pl.until.Sub(pl.at)-20*time.Minute))
			resume := at.Add(w.between(10*time.Minute, 6*time.Hour))
			if !resume.Before(pl.until) {
				resume = pl.until.Add(-time.Minute)
			}
			w.at(at, "schedule_pause", func() { w.scheduleOp(s, "pause") })
			w.at(resume, "schedule_resume", func() { w.scheduleOp(s, "resume") })
		}
		if w.chance(0.3) && pl.until.Before(end) {
			w.at(pl.until, "schedule_delete", func() { w.scheduleOp(s, "delete") })
		} else if pl.until.Before(end) {
			w.at(pl.until, "schedule_pause", func() { w.scheduleOp(s, "pause") })
		}
	}
	// Now and then two sweeper invocations at once (an EventBridge
	// delivery twice, a retried invocation): both drive the schedules.
	w.poisson(2*time.Hour, "sweep_twice", end, w.sweepTwice)
}

// sweepTwice runs the sweeper on two live processes, the second within
// a second of the first (at one instant, two invocations woken together
// would run in no set order, and a seed would not repeat its run).
func (w *world) sweepTwice() {
	w.fault("sweep_duplicated")
	w.runSweep(w.liveProc())
	w.after(w.between(0, time.Second), "sweep_twice", func() { w.runSweep(w.liveProc()) })
}

// scheduleOp is an operator's call on a schedule, retried while the
// process it went to crashed or the store was unavailable.
func (w *world) scheduleOp(s *simSchedule, op string) {
	p := w.liveProc()
	retry := func() { w.after(w.between(time.Second, time.Minute), "schedule_"+op, func() { w.scheduleOp(s, op) }) }
	if p == nil {
		retry()
		return
	}
	if s.deleted || (op != "create" && s.id == "") {
		return
	}
	ctx, now := context.Background(), time.Now()
	var err error
	switch op {
	case "create":
		var in []byte
		in, err = json.Marshal(doc{Nonce: fmt.Sprintf("sch%d", s.n), Amount: 1, Path: []string{},
			Script: script{NapFor: w.between(0, 20*time.Minute).Milliseconds()}})
		if err != nil {
			w.violate(invSetup, "", "schedule input: %v", err)
			return
		}
		limit := s.catchup
		var got engine.Schedule
		got, err = p.rt.CreateSchedule(ctx, tenant, engine.ScheduleSpec{PipelineID: pipeNap, Spec: s.spec, TimeZone: s.zone,
			Overlap: s.overlap, CatchupLimit: &limit, Input: in})
		if err == nil {
			s.id = got.ID
			s.spans = append(s.spans, [2]time.Time{now})
		}
	case "pause":
		_, err = p.rt.PauseSchedule(ctx, tenant, s.id)
		if err == nil && s.open() {
			s.spans[len(s.spans)-1][1] = now
		}
	case "resume":
		if w.settling {
			return
		}
		_, err = p.rt.ResumeSchedule(ctx, tenant, s.id)
		if err == nil && !s.open() {
			s.spans = append(s.spans, [2]time.Time{now})
		}
	case "delete":
		err = p.rt.DeleteSchedule(ctx, tenant, s.id)
		if err == nil {
			w.scanSchedule(s, true) // the last look while it can be told apart
			s.deleted = true
			if s.open() {
				s.spans[len(s.spans)-1][1] = now
			}
		}
	}
	switch {
	case err == nil:
		w.fault("schedule_" + op)
		w.tracef("", "operator %s schedule %d %s (%q in %s, %s, catch-up %d)", op, s.n, s.id, s.spec, s.zone, s.overlap, s.catchup)
	case p.isCrashed() || errors.Is(err, store.ErrUnavailable) || errors.Is(err, errCrashed) || errors.Is(err, store.ErrConflict) ||
		errors.Is(err, errDiskFull):
		// A full disk (embedded) refuses the write before it lands, as
		// the other failures here may: an operator sees the error and
		// tries again (seed 3 on embedded: a resume at a full disk was
		// reported as a fault of the simulator's setup).
		if op == "create" {
			// The answer may be lost after the record was written: a real
			// client would list; the simulator just makes another.
			if ok := w.adoptSchedule(s); ok {
				return
			}
		}
		retry()
	default:
		w.violate(invSetup, "", "operator %s schedule %d: %v", op, s.n, err)
	}
}

// adoptSchedule finds a schedule whose create answer was lost (the
// tenant's list has one with its spec and zone the simulator does not
// know) and takes it as s's.
func (w *world) adoptSchedule(s *simSchedule) bool {
	p := w.liveProc()
	if p == nil {
		return false
	}
	list, err := p.rt.ListSchedules(context.Background(), tenant)
	if err != nil {
		return false
	}
	known := map[string]bool{}
	for _, o := range w.scheds {
		known[o.id] = true
	}
	for _, g := range list {
		if !known[g.ID] && g.Spec == s.spec && g.TimeZone == s.zone && g.Overlap == s.overlap {
			s.id = g.ID
			s.spans = append(s.spans, [2]time.Time{g.CreatedAt.Add(-w.cfg.rates.skew)})
			w.tracef("", "operator adopts schedule %d %s (its create's answer was lost)", s.n, s.id)
			return true
		}
	}
	return false
}

func (s *simSchedule) open() bool { return len(s.spans) > 0 && s.spans[len(s.spans)-1][1].IsZero() }

// times returns the spec's fire times in [from, to).
func (s *simSchedule) times(from, to time.Time) []time.Time {
	var out []time.Time
	for t := s.c.First(from); !t.IsZero() && t.Before(to); t = s.c.Next(t) {
		out = append(out, t)
	}
	return out
}

// scheduleSlack is how late a fire time may be handled: a few sweep
// intervals, a crashed process's restart, a claim's in-flight grace,
// and the processes' clock skew.
func (w *world) scheduleSlack() time.Duration {
	return 4*w.cfg.sweepInterval + 2*time.Minute + w.cfg.rates.skew
}

// scheduleDueSoon reports whether a schedule may have a fire time due
// by by: the sweeps must run then (quiet must not skip them).
func (w *world) scheduleDueSoon(by time.Time) bool {
	for _, s := range w.scheds {
		if s.id == "" || s.deleted || !s.open() {
			continue
		}
		if t := s.c.First(time.Now().Add(-w.scheduleSlack())); !t.IsZero() && !t.After(by) {
			return true
		}
	}
	return false
}

// scanSchedules looks up the executions of every schedule's fire times
// since its last look (each audit: long before they could expire).
func (w *world) scanSchedules() {
	for _, s := range w.scheds {
		if s.id != "" && !s.deleted {
			w.scanSchedule(s, false)
		}
	}
}

// scheduleLookback is how long before its last look a schedule's fire
// times without an execution are looked up again.
const scheduleLookback = 2 * time.Hour

// scanSchedule looks up, by fire key, the executions of s's fire times
// not found yet (since a while before its last look; full: all of them),
// and registers each one found.
func (w *world) scanSchedule(s *simSchedule, full bool) {
	if len(s.spans) == 0 {
		return
	}
	slack := w.scheduleSlack()
	from := s.spans[0][0].Add(-slack)
	// A fire time not found yet is looked up again for a while: an
	// outage (a full disk, every process down) may delay its submit
	// well past the slack. The final check looks at every one.
	if back := s.scanned.Add(-scheduleLookback); !full && back.After(from) {
		from = back
	}
	to := time.Now()
	if !to.After(from) {
		return
	}
	v := w.back.view()
	for _, t := range s.times(from, to) {
		if _, ok := s.found[t]; ok {
			continue
		}
		e, err := v.state.Get(context.Background(), store.Key{TenantID: tenant, ExecutionID: engine.ExecutionSlot(tenant, schedule.IdempotencyKey(s.id, t))})
		if err != nil {
			continue
		}
		s.found[t] = e.ExecutionID
		w.created(nil, e, false)
		w.tracef(e.ExecutionID, "schedule %d %s started it for %s", s.n, s.id, t.UTC().Format(time.RFC3339))
	}
	s.scanned = to
}

// checkSchedules is the final check of invScheduleOnce.
func (w *world) checkSchedules() {
	slack := w.scheduleSlack()
	for _, s := range w.scheds {
		if s.id == "" {
			continue
		}
		if !s.deleted {
			w.scanSchedule(s, true)
		}
		w.check(invScheduleOnce)
		// loose: the fire times it could fire; strict: those it must have
		// handled (away from the edges of its active spans).
		loose, strict := map[time.Time]bool{}, map[time.Time]bool{}
		for _, sp := range s.spans {
			to := sp[1]
			if to.IsZero() {
				to = time.Now()
			}
			for _, t := range s.times(sp[0].Add(-w.cfg.rates.skew), to.Add(w.cfg.rates.skew+time.Nanosecond)) {
				loose[t] = true
			}
			for _, t := range s.times(sp[0].Add(w.cfg.rates.skew), to.Add(-slack)) {
				strict[t] = true
			}
		}
		var outside []string
		for t, exec := range s.found {
			if !loose[t] {
				outside = append(outside, t.UTC().Format(time.RFC3339)+" ("+exec+")")
			}
		}
		sort.Strings(outside)
		if len(outside) > 0 {
			w.violate(invScheduleOnce, "", "schedule %d %s (%q in %s) started executions for times at which it was not active: %v", s.n, s.id, s.spec, s.zone, outside)
		}
		missing := 0
		for t := range strict {
			if _, ok := s.found[t]; !ok {
				missing++
			}
		}
		if s.deleted {
			continue // its counts went with its record
		}
		p := w.liveProc()
		if p == nil {
			continue
		}
		rec, err := p.rt.GetSchedule(context.Background(), tenant, s.id)
		if err != nil {
			w.violate(invScheduleOnce, "", "schedule %d %s: read at the end: %v", s.n, s.id, err)
			continue
		}
		switch {
		case rec.Fired != len(s.found):
			w.violate(invScheduleOnce, "", "schedule %d %s (%q in %s, %s): its record counts %d fires, %d fire times have an execution under their key",
				s.n, s.id, s.spec, s.zone, s.overlap, rec.Fired, len(s.found))
		case missing > rec.Skipped:
			w.violate(invScheduleOnce, "", "schedule %d %s (%q in %s, %s, catch-up %d): %d due fire times have no execution and only %d were counted skipped (%d fired of %d due)",
				s.n, s.id, s.spec, s.zone, s.overlap, s.catchup, missing, rec.Skipped, rec.Fired, len(strict))
		case rec.Fired+rec.Skipped > len(loose):
			w.violate(invScheduleOnce, "", "schedule %d %s: %d fired and %d skipped, of at most %d fire times while active", s.n, s.id, rec.Fired, rec.Skipped, len(loose))
		}
		w.tracef("", "schedule %d %s (%q in %s, %s, catch-up %d): %d due, %d fired, %d skipped", s.n, s.id, s.spec, s.zone, s.overlap, s.catchup, len(strict), rec.Fired, rec.Skipped)
	}
}

// pauseSchedulesAtSettle pauses every schedule still active when the
// load ends.
func (w *world) pauseSchedulesAtSettle() {
	for _, s := range w.scheds {
		if s.id != "" && !s.deleted && s.open() {
			w.scheduleOp(s, "pause")
		}
	}
}
