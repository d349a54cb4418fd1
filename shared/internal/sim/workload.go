package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

const day = 24 * time.Hour

// plan draws the workload and schedules it: the submissions (with key
// reuse, body resubmits and client retries), the periodic sweeps and
// audits, deploys, pauses, bulk re-drives, the embedded store's faults,
// and the end of the load phase.
func (w *world) plan() {
	span := time.Duration(w.o.VirtualDays) * day
	end := w.start.Add(span)
	w.stopAt = end.Add(3*w.cfg.ttl + 10*day) // a hard stop, should settling never end
	// Deploys roll out over a window of their own; some traffic falls in
	// it (what meets workers of both versions).
	var deploys []time.Time
	for range w.cfg.rates.deploysPerRun {
		deploys = append(deploys, w.start.Add(w.between(span/10, span*9/10)))
	}
	subs := make([]*submission, w.o.Executions)
	for i := range subs {
		at := w.start.Add(w.between(time.Minute, span))
		if len(deploys) > 0 && w.chance(0.05) {
			at = deploys[w.intn(len(deploys))].Add(w.between(0, w.cfg.deployWindow))
		}
		subs[i] = &submission{n: i + 1, at: at}
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].at.Before(subs[j].at) })
	for i, s := range subs {
		s.n = i + 1
		w.drawSubmission(s, subs[:i])
		if sc := s.body.Script; s.pipeline == pipeMap && sc.KidNap > 0 {
			// Its children nap one round of in-flight children after another
			// (and again after a re-drive): the hard stop leaves it time to
			// end, or seeds whose maps run few at a time stop it mid-nap.
			rounds := (sc.Kids + w.cfg.mapInFlight - 1) / w.cfg.mapInFlight
			if need := s.at.Add(time.Duration(2*(rounds+1))*time.Duration(sc.KidNap)*time.Millisecond + 3*w.cfg.ttl + 10*day); need.After(w.stopAt) {
				w.stopAt = need
			}
		}
		w.subs = append(w.subs, s)
		w.at(s.at, "submit", func() { w.submit(s) })
	}
	w.every(w.cfg.sweepInterval, "sweep", time.Time{}, w.sweep)
	w.every(10*time.Minute, "audit", time.Time{}, w.audit)
	for _, at := range deploys {
		w.at(at, "deploy", w.deploy)
	}
	w.poisson(30*time.Minute, "pause", end, w.freeze)
	if w.cfg.rates.bulkRedriveDay > 0 {
		w.poisson(time.Duration(float64(day)/w.cfg.rates.bulkRedriveDay), "bulk_redrive", end, w.bulkRedrive)
	}
	w.poisson(6*time.Hour, "sign_out", end, w.signOut)
	w.planPauses(end)
	if w.o.Store == StoreEmbedded {
		w.poisson(time.Duration(float64(time.Hour)/w.cfg.rates.diskFull), "disk_full", end, w.diskFull)
		w.poisson(time.Duration(float64(time.Hour)/w.cfg.rates.backupStall), "backup_stall", end, w.backupStall)
	}
	w.planSchedules()
	w.at(end, "settle", w.settle)
}

// every runs fn every d (plus a jitter) until until (zero: for ever).
func (w *world) every(d time.Duration, name string, until time.Time, fn func()) {
	var tick func()
	tick = func() {
		fn()
		if until.IsZero() || time.Now().Before(until) {
			w.after(d, name, tick)
		}
	}
	w.after(d, name, tick)
}

// poisson runs fn at random times, mean gap d, until until.
func (w *world) poisson(d time.Duration, name string, until time.Time, fn func()) {
	var tick func()
	tick = func() {
		if w.settling {
			return
		}
		fn()
		if time.Now().Before(until) {
			w.after(w.between(d/10, 2*d), name, tick)
		}
	}
	w.after(w.between(d/10, 2*d), name, tick)
}

// drawSubmission draws a submission's pipeline, key and body; some reuse
// an earlier key (within or after its retention, with the same or
// another body) or repeat an earlier key-less body.
func (w *world) drawSubmission(s *submission, earlier []*submission) {
	r := w.cfg.rates
	if len(earlier) > 0 && w.chance(r.keyReuse+r.bodyResubmit) {
		old := earlier[w.intn(len(earlier))]
		s.reuseOf, s.pipeline = old, old.pipeline
		s.key, s.body, s.tenant = old.key, old.body, old.tenant
		if old.key != "" && w.chance(0.5) {
			s.body.Nonce = fmt.Sprintf("n%d", s.n)
			s.body.Amount = old.body.Amount + 1 + w.intn(100)
		}
		// Often only after the retention: the old execution is gone by then.
		gap := w.between(time.Hour, w.cfg.ttl/2)
		if w.chance(0.6) {
			gap = w.cfg.ttl + w.between(day, 3*w.cfg.ttl)
		}
		if at := old.at.Add(gap); at.After(s.at) {
			s.at = at
		}
		return
	}
	s.pipeline = []string{pipePay, pipePay, pipeApprove, pipeApprove, pipeFlaky, pipeChain, pipeChain, pipeFail, pipeLong, pipeNap, pipeMap}[w.intn(11)]
	if w.cfg.policy == engine.ClientKeyRequired || w.chance(0.7) {
		s.key = fmt.Sprintf("key-%d", s.n)
	}
	s.body = doc{Nonce: fmt.Sprintf("n%d", s.n), Amount: 1 + w.intn(1000), Path: []string{}}
	w.drawKeyed(s)
	w.drawRated(s)
	switch s.pipeline {
	case pipeFlaky:
		s.body.Script.FailFirst = w.intn(4)
	case pipeFail:
		s.body.Script.FailUntil = 1 + w.intn(3)
	case pipeNap:
		// Seconds (the queue's delay), hours (past the queue's delay limit),
		// days (the sweeper's due index), now and then past the retention.
		nap := []time.Duration{w.between(time.Second, time.Minute), w.between(20*time.Minute, 12*time.Hour),
			w.between(day, w.cfg.ttl*11/10)}[w.intn(3)]
		s.body.Script.NapFor = nap.Milliseconds()
	case pipeMap:
		// Up to maxKids children; about one in seven fails (the map's
		// tolerance decides whether the join runs or the parent
		// dead-letters), and one in twenty rejects its item (tolerated).
		s.body.Script.Kids = 1 + w.intn(maxKids(w.o.Executions))
		for i := range s.body.Script.Kids {
			switch {
			case w.chance(0.15):
				s.body.Script.KidFails = append(s.body.Script.KidFails, i)
			case w.chance(0.06):
				s.body.Script.KidRejects = append(s.body.Script.KidRejects, i)
			case w.chance(0.08):
				s.body.Script.KidHeals = append(s.body.Script.KidHeals, i) // fails in round 0 only
			}
		}
		if w.chance(0.2) {
			// Children that nap a quarter to 60% of the retention each,
			// a few at a time: the map outlasts the retention.
			s.body.Script.KidNap = w.between(w.cfg.ttl/4, w.cfg.ttl*6/10).Milliseconds()
		}
	}
	switch {
	case w.chance(0.01):
		s.body.Pad = strings.Repeat("p", 300*1024)
	case w.chance(0.2):
		s.body.Pad = strings.Repeat("p", 300+w.intn(3000))
	}
}

// maxKids is the most children a map of a run of executions has: 30,
// and for a short run a twentieth of its executions, at least 10. A
// map's children are executions of their own (rows, steps, histories,
// audits): at 30, the maps of a run of 300 executions made more
// executions than all its submissions, and a short run (make simulate's
// default, make test's budget) spent most of its time on them.
func maxKids(executions int) int {
	return min(30, max(10, executions/20))
}

// submit sends a submission through a live process's runtime (the submit
// function), as a client would: retried on an error or a lost answer.
func (w *world) submit(s *submission) {
	p := w.liveProc()
	if p == nil {
		w.after(time.Second, "submit", func() { w.submit(s) })
		return
	}
	s.tries++
	in, err := payload.JSON(s.body)
	if err != nil {
		w.violate(invSetup, "", "encode body: %v", err)
		return
	}
	partsBefore := w.back.parts()
	res, err := p.rt.Submit(context.Background(), engine.SubmitRequest{TenantID: cmp.Or(s.tenant, tenant), PipelineID: s.pipeline, IdempotencyKey: s.key, Input: in, Priority: s.priority})
	e := res.Execution
	switch {
	case p.isCrashed() || (err != nil && (errors.Is(err, store.ErrUnavailable) || errors.Is(err, errCrashed))):
		w.tracef(e.ExecutionID, "submit #%d (%s key=%q) got no answer: %v", s.n, s.pipeline, s.key, err)
		if s.tries < 8 {
			w.after(w.between(time.Second, 20*time.Second), "submit", func() { w.submit(s) })
		}
		return
	case errors.Is(err, store.ErrKeyMismatch):
		s.outcome = "refused"
		w.tracef("", "submit #%d (%s key=%q nonce=%s) refused: the key is bound to another request", s.n, s.pipeline, s.key, s.body.Nonce)
		w.check(invRefusedStoresNothing)
		if after := w.back.parts(); after != partsBefore {
			w.violate(invRefusedStoresNothing, "", "submit #%d was refused (key %q bound to another request) and stored %d payload parts", s.n, s.key, after-partsBefore)
		}
		return
	case err != nil:
		s.outcome = "error"
		w.tracef("", "submit #%d (%s) failed: %v", s.n, s.pipeline, err)
		return
	}
	var inc *incarnation
	if res.Duplicate {
		s.outcome = "duplicate"
		inc = w.incOf(&e)
		if inc == nil || inc.sub == nil {
			// An earlier try of this submission created it, its answer lost.
			inc = w.created(s, e, false)
		}
		w.tracef(e.ExecutionID, "submit #%d (%s key=%q nonce=%s) answered duplicate of %s", s.n, s.pipeline, s.key, s.body.Nonce, e.ExecutionID)
		w.check(invKeylessIsNew)
		if s.key == "" && w.cfg.policy != engine.ServerKeyOnly && !w.isRetryOf(s, inc) {
			w.violate(invKeylessIsNew, e.ExecutionID, "submit #%d without a client key (policy %s) answered duplicate of an execution created %s earlier: nothing runs for it",
				s.n, w.cfg.policy, fmtDur(time.Since(e.CreatedAt)))
		}
	} else {
		s.outcome = "created"
		inc = w.created(s, e, true)
		w.tracef(e.ExecutionID, "submit #%d (%s key=%q nonce=%s amount=%d) created %s", s.n, s.pipeline, s.key, s.body.Nonce, s.body.Amount, e.ExecutionID)
	}
	s.inc = inc
	if s.tries == 1 && w.chance(w.cfg.rates.clientRetry) {
		// The client did not see the answer and sends the same request again.
		w.after(w.between(0, 5*time.Second), "client_retry", func() {
			w.tracef(e.ExecutionID, "client sends submit #%d again", s.n)
			w.submit(s)
		})
	}
	if !res.Duplicate && w.chance(w.cfg.rates.cancel) {
		w.after(w.between(0, 30*time.Minute), "cancel", func() { w.cancel(inc) })
	}
}

// isRetryOf reports whether inc is what s itself created (a client retry
// of the same submission resolves to its own execution).
func (w *world) isRetryOf(s *submission, inc *incarnation) bool {
	return inc != nil && inc.sub == s
}

// cancel is an operator cancelling an execution.
func (w *world) cancel(inc *incarnation) {
	p := w.liveProc()
	if p == nil {
		return
	}
	e, changed, err := p.rt.Cancel(context.Background(), inc.storeKey(), "sim: operator cancel")
	if err == nil {
		w.saw(e)
	}
	if err == nil && changed && w.incOf(&e) == inc {
		w.mu.Lock()
		inc.cancelled = true
		w.mu.Unlock()
		w.tracef(inc.exec, "operator cancel accepted (status %s)", e.Status)
	}
}

// onDeadLettered plans an operator's re-drive of a DLQ execution: the
// failing check step needs one per planned failure; others get one now
// and then. Re-drives come late in the retention, where a lifetime that
// does not follow the row shows.
func (w *world) onDeadLettered(inc *incarnation, e store.Execution) {
	if w.settling || e.Parent != nil {
		return // a map's child is not re-driven alone (not built: issue 19)
	}
	w.mu.Lock()
	want := 0
	switch {
	case inc.pipeline == pipeFail && inc.sub != nil:
		want = inc.sub.body.Script.FailUntil
	case w.rng.Float64() < w.cfg.rates.redrive:
		want = 1
	}
	plan := inc.redrives < want
	if plan {
		inc.redrives++
	}
	w.mu.Unlock()
	if !plan {
		return
	}
	gap := w.between(time.Hour, w.cfg.ttl*9/10)
	w.after(gap, "redrive", func() { w.redrive(inc) })
}

func (w *world) redrive(inc *incarnation) {
	p := w.liveProc()
	if p == nil {
		w.after(time.Minute, "redrive", func() { w.redrive(inc) })
		return
	}
	e, err := p.rt.RedriveWith(context.Background(), inc.storeKey(), engine.RedriveOptions{Reason: "sim: operator re-drive"})
	switch {
	case err == nil:
		w.saw(e)
		w.tracef(inc.exec, "operator re-drive accepted (attempt %d)", e.Attempt)
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, errCrashed):
		w.after(w.between(time.Second, time.Minute), "redrive", func() { w.redrive(inc) })
	default:
		w.tracef(inc.exec, "operator re-drive refused: %v", err)
	}
}

// bulkRedrive starts a bulk re-drive of one pipeline's DLQ executions;
// half of them with an idempotency key, and of those half sent again by
// the operator's client as after a lost answer (a while later, from
// another process): the retry must answer the first start's job.
func (w *world) bulkRedrive() {
	p := w.liveProc()
	if p == nil {
		return
	}
	pid := pipelineIDs[w.intn(len(pipelineIDs))]
	opts := engine.RedrivesOptions{Filter: engine.RedriveFilter{PipelineID: pid, Statuses: []store.Status{store.DLQ}},
		Reason: "sim: bulk re-drive", RatePerSecond: 50}
	if w.chance(0.5) {
		w.mu.Lock()
		w.bulkKeys++
		opts.IdempotencyKey = fmt.Sprintf("bulk-%d", w.bulkKeys)
		w.mu.Unlock()
	}
	job, err := p.rt.StartRedrivesWith(context.Background(), tenant, opts)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.jobsUntil = time.Now().Add(time.Hour)
	w.mu.Unlock()
	w.fault("bulk_redrive")
	w.tracef("", "bulk re-drive %s of %s started (key %q): %d matched", job.ID, pid, opts.IdempotencyKey, job.Matched)
	if opts.IdempotencyKey == "" || !w.chance(0.5) {
		return
	}
	w.fault("bulk_redrive_retried")
	w.after(w.between(time.Second, 10*time.Minute), "bulk_redrive_retry", func() { w.bulkRedriveRetry(opts, job.ID) })
}

// bulkRedriveRetry sends a keyed bulk re-drive start again: it must
// answer the job first started (its job lives a retention; the retry
// comes within minutes).
func (w *world) bulkRedriveRetry(opts engine.RedrivesOptions, first string) {
	p := w.liveProc()
	if p == nil {
		w.after(time.Minute, "bulk_redrive_retry", func() { w.bulkRedriveRetry(opts, first) })
		return
	}
	job, err := p.rt.StartRedrivesWith(context.Background(), tenant, opts)
	switch {
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, errCrashed):
		w.after(w.between(time.Second, time.Minute), "bulk_redrive_retry", func() { w.bulkRedriveRetry(opts, first) })
		return
	case err != nil:
		w.violate(invOneJobPerKey, "", "bulk re-drive %s sent again with key %q: %v", first, opts.IdempotencyKey, err)
		return
	}
	w.check(invOneJobPerKey)
	w.tracef("", "bulk re-drive sent again with key %q: job %s (duplicate %v)", opts.IdempotencyKey, job.ID, job.Duplicate)
	if job.ID != first || !job.Duplicate {
		w.violate(invOneJobPerKey, "", "bulk re-drive sent again with key %q started job %s (duplicate %v), want the first start's %s",
			opts.IdempotencyKey, job.ID, job.Duplicate, first)
	}
}

// diskFull fills the embedded process's disk for a while: its writes fail.
func (w *world) diskFull() {
	p := w.procs[0]
	if p == nil || p.isCrashed() {
		return
	}
	d := w.between(w.cfg.lease, 10*time.Minute)
	p.mu.Lock()
	p.diskFullUntil = time.Now().Add(d)
	p.mu.Unlock()
	w.outage(time.Now(), time.Now().Add(d))
	w.fault("disk_full")
	w.tracef("", "DISK FULL on %s for %s", p.name, d.Round(time.Second))
}

// settle ends the load phase: no more faults or submissions; the run goes
// on until every execution settled.
func (w *world) settle() {
	w.mu.Lock()
	w.settling = true
	w.mu.Unlock()
	w.tracef("", "SETTLE: faults off")
	w.pauseSchedulesAtSettle()
	for _, p := range w.procs {
		if p != nil {
			p.mu.Lock()
			p.diskFullUntil = time.Time{}
			p.mu.Unlock()
		}
	}
}
