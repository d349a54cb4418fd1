package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// The simulated pipelines. Every step appends its name to the document's
// path, so a result whose path is not exactly its definition's steps, in
// order, each once, shows a transition committed twice or skipped.
const (
	pipePay     = "sim.pay"     // validate, charge (a command step), settle; v2 adds screen
	pipeApprove = "sim.approve" // prepare, approve (an await step), finish
	pipeFlaky   = "sim.flaky"   // fetch (fails its first attempts, retried hours apart), store
	pipeChain   = "sim.chain"   // twelve steps
	pipeFail    = "sim.fail"    // check (fails non-retryably until re-driven enough), done
	pipeLong    = "sim.long"    // forty steps: a long life of hand-overs
	pipeNap     = "sim.nap"     // doze (sets the wake-up), nap (a durable sleep until it), rise
	pipeMap     = "sim.map"     // spread (the children's documents), fan (a map over sim.kid), join
	pipeKid     = "sim.kid"     // a map's child: k1, k2 (fails non-retryably or rejects its item when scripted to)
)

// pipelineIDs are the pipelines clients submit (and bulk re-drives pick):
// sim.kid runs only as a map's child.
var pipelineIDs = []string{pipePay, pipeApprove, pipeFlaky, pipeChain, pipeFail, pipeLong, pipeNap, pipeMap}

// chainNames are the names of n numbered steps.
func chainNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i+1)
	}
	return out
}

// doc is the JSON document every simulated step takes and returns.
type doc struct {
	// Nonce names the body: the submission that wrote it (identical
	// bodies share it).
	Nonce  string `json:"nonce"`
	Amount int    `json:"amount"`
	// Customer is a keyed pipeline's concurrency key (keys.go).
	Customer string   `json:"customer,omitempty"`
	Path     []string `json:"path"`
	Script   script   `json:"script"`
	// Pad makes some bodies larger than the inline budget (their input
	// and results then live in the payload store).
	Pad string `json:"pad,omitempty"`
	// WakeAt is when the nap pipeline's sleep ends (unix ms, true time),
	// set by its doze step.
	WakeAt   int64     `json:"wakeAt,omitempty"`
	Charged  *charge   `json:"charged,omitempty"`
	Approval *approval `json:"approval,omitempty"`
}

// script tells the steps how to behave for this body.
type script struct {
	// FailFirst: the flaky step fails (retryably) its first FailFirst attempts.
	FailFirst int `json:"failFirst,omitempty"`
	// FailUntil: the check step fails non-retryably while attempt <= FailUntil.
	FailUntil int `json:"failUntil,omitempty"`
	// NapFor: the nap pipeline sleeps this long (ms) after its doze step.
	NapFor int64 `json:"napFor,omitempty"`
	// Kids is how many children the map pipeline's spread step makes;
	// KidFails lists the ones whose k2 step fails non-retryably,
	// KidRejects those whose k2 step rejects its item (reject.Reject).
	Kids       int   `json:"kids,omitempty"`
	KidFails   []int `json:"kidFails,omitempty"`
	KidRejects []int `json:"kidRejects,omitempty"`
	// KidHeals lists the children whose k2 step fails non-retryably in
	// the map's first round only: a re-drive of the parent runs them
	// again (a later round) and they succeed.
	KidHeals []int `json:"kidHeals,omitempty"`
	// KidNap: every child naps this long (ms) after its first step, so
	// that a map whose children run a few at a time outlasts the
	// retention: its parent and its pending children must stay meanwhile.
	KidNap int64 `json:"kidNap,omitempty"`
	// Fail: a child's k2 step fails non-retryably. Reject: it rejects
	// its item (the child ends FAILED as rejected, without a dead letter).
	Fail   bool `json:"fail,omitempty"`
	Reject bool `json:"reject,omitempty"`
	// Heal: a child's k2 step fails non-retryably when it runs as First
	// (its round-0 execution).
	Heal  bool   `json:"heal,omitempty"`
	First string `json:"first,omitempty"`
}

// charge is what the bank's charge returns.
type charge struct {
	Amount int    `json:"amount"`
	Nonce  string `json:"nonce"`
	// At is the virtual time of the charge (unix ms): an execution's
	// result carrying a charge older than the execution replays another
	// execution's effect.
	At int64 `json:"at"`
}

// approval is what the partner's completion adds.
type approval struct {
	Nonce string `json:"nonce"`
	At    int64  `json:"at"`
}

// registry builds the pipelines a process serves: version 1 or 2 of
// sim.pay (version 2 keeps version 1 draining unless dropOld).
func (p *proc) registry(version int, dropOld bool) (*pipeline.Registry, error) {
	s := p.w.cfg
	plain := func(name string) pipeline.Step { return p.plainStep(name) }
	payV1 := pipeline.Pipeline{ID: pipePay, Steps: []pipeline.Step{plain("validate"), p.chargeStep(), plain("settle")}}
	payV2 := pipeline.Pipeline{ID: pipePay, Version: "v2", Steps: []pipeline.Step{plain("validate"), plain("screen"), p.chargeStep(), plain("settle")}}
	steps := func(names []string) []pipeline.Step {
		out := make([]pipeline.Step, len(names))
		for i, n := range names {
			out[i] = plain(n)
		}
		return out
	}
	ps := []pipeline.Pipeline{
		{ID: pipeApprove, Steps: []pipeline.Step{plain("prepare"), p.approveStep(s.awaitTimeout), plain("finish")}},
		{ID: pipeFlaky, Steps: []pipeline.Step{p.flakyStep(s.longRetry), plain("store")}},
		{ID: pipeChain, Steps: steps(chainNames("c", 12))},
		{ID: pipeLong, Steps: steps(chainNames("l", 40))},
		{ID: pipeFail, Steps: []pipeline.Step{p.checkStep(), plain("done")}},
		{ID: pipeNap, Steps: []pipeline.Step{p.dozeStep(), napStep(), p.riseStep()}},
		{ID: pipeKid, Steps: []pipeline.Step{p.kidStartStep(), napStep(), p.kidStep()}},
		{ID: pipeMap, Steps: []pipeline.Step{p.spreadStep(), pipeline.Map("fan", pipeKid, s.mapOptions()), p.joinStep()}},
	}
	ps = append(ps, p.keyedPipelines()...)
	ps = append(ps, p.ratedPipelines()...)
	switch {
	case version == 1:
		ps = append(ps, payV1)
	case dropOld:
		ps = append(ps, payV2)
	default:
		payV1.Draining = true
		ps = append(ps, payV1, payV2)
	}
	return pipeline.NewRegistry(ps...)
}

// stepPrologue is what every simulated step does first: maybe crash the
// process, maybe take long (renewing its lease meanwhile).
func (p *proc) stepPrologue(ctx context.Context, info pipeline.StepInfo) error {
	p.w.rejectedRan(info)
	p.w.checkStepNotPaused(info)
	if p.maybeCrash("step_start", info.ExecutionID) {
		return errCrashed
	}
	if p.w.chance(p.w.cfg.rates.slowStep) {
		d := p.w.between(p.w.cfg.lease/3, 3*p.w.cfg.lease)
		p.w.fault("slow_step")
		p.w.tracef(info.ExecutionID, "%s step %s attempt %d runs for %s", p.name, info.StepName, info.Attempt, d.Round(time.Millisecond))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if p.isCrashed() {
		// The process died while its step was in progress: a real crash
		// ends the step's code with it, so the step reaches no outside
		// system (the bank, the partner) after the crash. Without this,
		// a step of a dead embedded process charged after the restarted
		// one had broken its lease and taken it over.
		return errCrashed
	}
	return nil
}

func (p *proc) plainStep(name string) pipeline.Step {
	return pipeline.NewStep(name, func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		return p.plain(ctx, info, in, name)
	})
}

// plain is a plain step's run: the prologue, now and then a hand-back,
// and the step's name on the path.
func (p *proc) plain(ctx context.Context, info pipeline.StepInfo, in doc, name string) (doc, error) {
	if err := p.stepPrologue(ctx, info); err != nil {
		return doc{}, err
	}
	if !p.w.settling && p.w.chance(p.w.cfg.rates.handBack) {
		// A downstream that throttles: the step hands itself back.
		p.w.fault("step_hand_back")
		return doc{}, pipeline.HandBack("downstream_throttled", errors.New("the downstream asked to slow down"))
	}
	in.Path = append(in.Path, name)
	return in, nil
}

// kidStartStep is a map child's first step, k1: a plain step that, for a
// child scripted to nap (NapFor), sets the wake-up of the nap after it
// from the child's own start, so that children released one after
// another nap one after another and the map runs for as long as they do
// together (past the retention, now and then).
func (p *proc) kidStartStep() pipeline.Step {
	return pipeline.NewStep("k1", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		out, err := p.plain(ctx, info, in, "k1")
		if err == nil && in.Script.NapFor > 0 {
			out.WakeAt = time.Now().Add(time.Duration(in.Script.NapFor) * time.Millisecond).UnixMilli()
		}
		return out, err
	})
}

// chargeStep is a command step with the default command id (the step's
// idempotency key): the bank's charge happens once per execution.
func (p *proc) chargeStep() pipeline.Step {
	return command.Step("charge", command.Spec[doc, doc]{
		Reconcile: func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, bool, error) {
			c, ok := p.w.bank.find(info.IdempotencyKey, in.Nonce)
			if !ok {
				return doc{}, false, nil
			}
			in.Charged = &c
			in.Path = append(in.Path, "charge")
			return in, true, nil
		},
	}, func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		c := p.w.bank.charge(info, in)
		if p.maybeCrash("after_effect", info.ExecutionID) {
			return doc{}, errCrashed
		}
		in.Charged = &c
		in.Path = append(in.Path, "charge")
		return in, nil
	})
}

// approveStep hands its token to the partner and parks the execution.
func (p *proc) approveStep(timeout time.Duration) pipeline.Step {
	return await.Step("approve", await.Spec{Timeout: timeout}, func(ctx context.Context, req await.Request) error {
		if err := p.stepPrologue(ctx, req.Info); err != nil {
			return err
		}
		var in doc
		if err := req.Input.DecodeJSON(&in); err != nil {
			return pipeline.NonRetryable("invalid_input", err)
		}
		p.w.partner.issued(req.Info, req.AwaitID, req.Token, in, timeout)
		return nil
	})
}

// flakyStep fails its first attempts, retried on a long policy.
func (p *proc) flakyStep(policy pipeline.RetryPolicy) pipeline.Step {
	return pipeline.NewStep("fetch", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		if info.Attempt <= in.Script.FailFirst {
			return doc{}, pipeline.Retryable("upstream_busy", fmt.Errorf("attempt %d of %d planned failures", info.Attempt, in.Script.FailFirst))
		}
		in.Path = append(in.Path, "fetch")
		return in, nil
	}, pipeline.WithRetry(policy))
}

// checkStep fails non-retryably until the execution was re-driven enough.
func (p *proc) checkStep() pipeline.Step {
	return pipeline.NewStep("check", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		if info.Attempt <= in.Script.FailUntil {
			return doc{}, pipeline.NonRetryable("check_refused", errors.New("refused until an operator re-drives"))
		}
		in.Path = append(in.Path, "check")
		return in, nil
	})
}

// dozeStep sets the document's wake-up time: its napFor from the true
// time it runs (the committed run's time counts).
func (p *proc) dozeStep() pipeline.Step {
	return pipeline.NewStep("doze", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		in.WakeAt = time.Now().Add(time.Duration(in.Script.NapFor) * time.Millisecond).UnixMilli()
		in.Path = append(in.Path, "doze")
		return in, nil
	})
}

// napStep sleeps until the document's wake-up time (past the retention,
// now and then: the step dead-letters, and a re-drive later sleeps). A
// map child not scripted to nap has none: it wakes at once.
func napStep() pipeline.Step {
	return pipeline.SleepUntil("nap", func(in doc) time.Time { return time.UnixMilli(in.WakeAt) })
}

// riseStep runs after the sleep: never before the wake-up time, less the
// clock-skew tolerance and the skew a worker's clock may have.
func (p *proc) riseStep() pipeline.Step {
	return pipeline.NewStep("rise", func(ctx context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if err := p.stepPrologue(ctx, info); err != nil {
			return doc{}, err
		}
		w := p.w
		w.check(invSleepOnTime)
		if early := time.UnixMilli(in.WakeAt).Sub(time.Now()); early > w.cfg.tolerance+w.cfg.rates.skew {
			w.violate(invSleepOnTime, info.ExecutionID, "the step after the sleep ran %s before its wake-up at +%s (attempt %d on %s)",
				early, fmtDur(time.UnixMilli(in.WakeAt).Sub(w.start)), info.Attempt, p.name)
		}
		in.Path = append(in.Path, "rise")
		return in, nil
	})
}

// stepNames lists the steps of a definition the way the path records them.
func stepNames(pipelineID string, version string) []string {
	switch pipelineID {
	case pipePay:
		if version != "" && version[0] == 'v' {
			return []string{"validate", "screen", "charge", "settle"}
		}
		return []string{"validate", "charge", "settle"}
	case pipeApprove:
		return []string{"prepare", "approve", "finish"}
	case pipeFlaky:
		return []string{"fetch", "store"}
	case pipeChain:
		return chainNames("c", 12)
	case pipeLong:
		return chainNames("l", 40)
	case pipeFail:
		return []string{"check", "done"}
	case pipeNap:
		return []string{"doze", "rise"}
	case pipeMap:
		return []string{"spread", "join"}
	case pipeKid:
		return []string{"k1", "k2"}
	case pipeKey1, pipeKey2:
		return []string{"doze", "rise", "kdone"}
	case pipeRate:
		return []string{"r1", "call", "r2"}
	}
	return nil
}

// bank is the external system the charge step calls.
type bank struct {
	w *world
	// charges by command idempotency key.
	charges map[string][]charge
}

func (b *bank) charge(info pipeline.StepInfo, in doc) charge {
	c := charge{Amount: in.Amount, Nonce: in.Nonce, At: time.Now().UnixMilli()}
	b.w.mu.Lock()
	b.charges[info.IdempotencyKey] = append(b.charges[info.IdempotencyKey], c)
	b.w.mu.Unlock()
	b.w.tracef(info.ExecutionID, "bank charged %d for %s (attempt %d)", in.Amount, in.Nonce, info.Attempt)
	return c
}

// find is the bank's answer to a reconcile: the charge made under key for
// nonce, if any.
func (b *bank) find(key, nonce string) (charge, bool) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	cs := b.charges[key]
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].Nonce == nonce {
			return cs[i], true
		}
	}
	return charge{}, false
}

// chargesSince counts the charges under key made at or after t.
func (b *bank) chargesSince(key string, t time.Time) int {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	n := 0
	for _, c := range b.charges[key] {
		if c.At >= t.UnixMilli() {
			n++
		}
	}
	return n
}

// approvalPayload is the completion the partner sends for in.
func approvalPayload(in doc, now time.Time) payload.Payload {
	in.Path = append(in.Path, "approve")
	in.Approval = &approval{Nonce: in.Nonce, At: now.UnixMilli()}
	p, _ := payload.JSON(in) // cannot fail
	return p
}
