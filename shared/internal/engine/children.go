// Fan-out with join (pipeline.Map, pipeline.Child): the map step's first
// run creates the children and parks the parent WAITING_CHILDREN; each
// child's end counts itself in its group's row and releases the next
// pending sibling; the write that finishes the last group queues the
// parent at its map step again, whose second run collects the outcomes
// into a pipeline.MapResult. The parent's sweep look repairs what a crash
// lost (a count, a release, the wake-up) and carries a cancel on to the
// children. See docs/design-fan-out.md.

package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// lookBudget bounds the child rows one sweep look of a parent reads (and
// the children one look cancels), so that a look of a map of 10,000
// stays a bounded piece of work; the next look goes on.
const lookBudget = 1000

// parentCancelPrefix starts the cancel reason of a child cancelled with
// its parent: its end then cancels its pending sibling instead of
// releasing it.
const parentCancelPrefix = "parent cancelled: "

// ChildID is the execution id of element index of the map at step of
// the parent with execution id parentID and create token parentToken:
// "<parent slot>-<parent incarnation>-<step>-<index>.<incarnation>", the
// incarnation derived from all four, so that a re-run of the fan-out
// names the same child and its create is a create-or-get. The slot is
// unique per parent incarnation, step and element, and holds no
// store.IncarnationSep (the parent's is replaced by '-'): a store's
// index answers with bare slots (the DynamoDB due and list indexes), and
// a bare slot with a '.' in it would read as an id of another slot (the
// parent's), so the sweeper would never find a lost child. It returns the
// id and the incarnation, the child's create token.
func ChildID(parentID, parentToken string, step, index int) (id, token string) {
	return RoundChildID(parentID, parentToken, step, 0, index)
}

// RoundChildID is the execution id of child index of round round of the
// map (ChildID is round 0's): a later round's ids are
// "<parent slot>-<parent incarnation>-<step>r<round>-<index>.<incarnation>",
// so a re-drive of the map's failed children creates new executions, each
// with its own row, history and retention, never another incarnation's.
func RoundChildID(parentID, parentToken string, step, round, index int) (id, token string) {
	seed := fmt.Appendf(nil, "qasync-child;%d:%s;%d:%s;%d;%d", len(parentID), parentID, len(parentToken), parentToken, step, index)
	stepPart := strconv.Itoa(step)
	if round > 0 {
		seed = fmt.Appendf(seed, ";r%d", round)
		stepPart += "r" + strconv.Itoa(round)
	}
	h := sha256.Sum256(seed)
	token = hex.EncodeToString(h[:8])
	slot := strings.ReplaceAll(parentID, store.IncarnationSep, "-") + "-" + stepPart + "-" + strconv.Itoa(index)
	return slot + store.IncarnationSep + token, token
}

// roundKey returns the key of the map round the parent e waits for.
func roundKey(e *store.Execution) store.MapKey {
	c := e.Children
	return store.MapKey{TenantID: e.TenantID, ParentID: e.ExecutionID, StepIndex: c.StepIndex, Round: c.Round}
}

// roundRef is the parent reference the children of e's map round carry
// (without their own index).
func roundRef(e *store.Execution) *store.ParentRef {
	c := e.Children
	return &store.ParentRef{ExecutionID: e.ExecutionID, CreateToken: e.CreateToken, StepIndex: c.StepIndex, Round: c.Round,
		Total: c.Total, MaxInFlight: c.MaxInFlight}
}

// childOf is the id of child index of the round p names.
func childOf(p *store.ParentRef, index int) string {
	id, _ := RoundChildID(p.ExecutionID, p.CreateToken, p.StepIndex, p.Round, index)
	return id
}

func (r *Runtime) maps() (store.MapStore, bool) {
	ms, ok := r.deps.Store.(store.MapStore)
	return ms, ok
}

// mapStep runs a map step: the first run fans out and parks the parent;
// the run after every child has ended collects the outcomes.
func (t *transition) mapStep(ctx context.Context, step pipeline.Step, in payload.Payload, policy pipeline.RetryPolicy) error {
	r, row := t.r, &t.row
	ms, ok := r.maps()
	if !ok {
		return t.fail(ctx, pipeline.NonRetryable("map_not_supported", errors.New("the state store keeps no map counts (store.MapStore)")), policy)
	}
	c := row.Children
	if c != nil && c.StepIndex == row.StepIndex && !c.Retry {
		return t.collect(ctx, step, policy)
	}
	elems, err := step.MapElements(in)
	if err != nil {
		return t.fail(ctx, err, policy)
	}
	child, ok := r.deps.Registry.Get(step.Map.Pipeline)
	if !ok {
		return t.fail(ctx, pipeline.NonRetryable(CodePipelineVersionUnavailable,
			fmt.Errorf("step %s: child pipeline %s is not served here", step.Name, step.Map.Pipeline)), policy)
	}
	if len(elems) == 0 {
		return t.succeed(ctx, mustJSON(pipeline.MapResult{Elements: []pipeline.MapElement{}}), nil, policy)
	}
	// The round: 0 runs every element; a re-drive of a map that failed
	// beyond its tolerance runs its failed elements again as the next.
	park := store.Children{StepIndex: row.StepIndex, Total: len(elems)}
	members := make([]int, len(elems))
	for i := range members {
		members[i] = i
	}
	if c != nil && c.StepIndex == row.StepIndex && c.Retry {
		prior, err := r.priorResult(ctx, c)
		if err != nil {
			return t.fail(ctx, pipeline.NonRetryable(CodePayloadUnreadable, fmt.Errorf("step %s: the map's earlier outcomes: %w", step.Name, err)), policy)
		}
		if len(prior.Elements) != len(elems) {
			return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeMapInputInvalid, fmt.Errorf("step %s: the map's input has %d elements, its earlier round %d",
				step.Name, len(elems), len(prior.Elements))), policy)
		}
		members = members[:0]
		for _, el := range prior.Elements {
			switch {
			case rerun(el):
				members = append(members, el.Index)
			case el.Status == string(store.Succeeded):
				park.KeptSucceeded++
			default:
				park.KeptOther++
			}
		}
		park.Round, park.Prior, park.Total = c.Round+1, c.Prior, len(members)
		if len(members) == 0 {
			// Nothing to run again (the failures were cancels): decide on
			// the outcomes as they are.
			return t.judge(ctx, step, prior, policy)
		}
	}
	park.MaxInFlight = min(step.Map.InFlight(), park.Total)
	// The creates run under the lease, renewed as for any step.
	var pending []int
	create := pipeline.Step{Name: step.Name, Run: func(ctx context.Context, _ pipeline.StepInfo, _ payload.Payload) (payload.Payload, error) {
		var err error
		pending, err = r.createChildren(ctx, row, &park, child, elems, members)
		return payload.Payload{}, err
	}}
	_, cause, err := t.invoke(ctx, create, in)
	switch {
	case errors.Is(cause, ErrCancelled):
		t.log.LogAttrs(ctx, slog.LevelWarn, "step_cancelled", slog.String("event", "step_cancelled"), slog.String("phase", "fan_out"))
		return nil // the execution was ended CANCELLED when the cancel was seen
	case cause != nil:
		// Said as for any step: a fan-out slower than its renewals (a store
		// that serializes writes, its lease renewal queued behind the
		// creates) otherwise leaves no trace until the sweeper's takeover.
		t.log.LogAttrs(ctx, slog.LevelWarn, "lease_lost", slog.String("event", "lease_lost"), slog.String("phase", "fan_out"))
		return nil // the sweeper re-dispatches; the re-run's creates find what exists
	case err != nil && ctx.Err() != nil:
		return t.release(ctx, err, "", policy)
	case err != nil:
		return t.release(ctx, err, "", policy) // a backend failed: the re-run's creates find what exists
	}
	now := r.deps.Clock.Now()
	next := t.base(now)
	next.Status = store.WaitingChildren
	next.Children = &park
	next.SweepAt, next.Sweeps = now.Add(r.cfg.ChildrenLook), 0
	got, err := t.commit(ctx, next, false, slog.Int("children", park.Total), slog.Int("max_in_flight", park.MaxInFlight), slog.Int("round", park.Round))
	if err != nil || got == nil {
		return err
	}
	r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "children_started", slog.String("event", "children_started"),
		slog.String("child_pipeline", child.ID), slog.Int("children", park.Total), slog.Int("max_in_flight", park.MaxInFlight),
		slog.Int("round", park.Round))
	// Children may have ended before their pending siblings existed, or
	// all before the park landed: look once now.
	r.afterFanOut(ctx, ms, *got, pending)
	return nil
}

// childrenKept checks, before a re-drive of e, that e does not need
// children that are gone: a parent that ended at its map step after it
// parked there (Children of that step, not a failed round's outcomes
// kept for a re-drive) has yet to collect its round's outcomes from the
// children's rows. A child's row lives a retention past its end, the
// parent's a retention past its own (later) end and its dead-lettering,
// so the children of a parent that failed in its collect (its reads
// failing until its retries ran out, its worker lost on the last
// attempt) may be gone while it can still be re-driven: collected then,
// a gone child counts as failed, its success lost, and the re-drive of
// that failure ran it again. Such a re-drive is refused
// (ErrChildrenExpired) instead, naming the first gone child. A map that
// failed beyond its tolerance keeps its outcomes (Children.Prior, with
// the outputs' references) and needs no child row: nothing is read.
//
// Cost: nothing for any other re-drive; one read per 100 children for a
// parent re-driven in its collect.
func (r *Runtime) childrenKept(ctx context.Context, e *store.Execution) error {
	c := e.Children
	if fanOutMayHaveRun(r, e, c) && !r.deps.Clock.Now().Before(e.CreatedAt.Add(r.cfg.ExecutionTTL)) {
		// It failed in its fan-out, before it recorded its wait (a worker
		// lost after some creates): children it created may have ended and
		// expired, and a re-driven fan-out would create and run them again
		// under the same ids. None can have expired within a retention of
		// the parent's submission (a child is created after it and expires
		// a retention after its own end); past that, refuse.
		return fmt.Errorf("%w: it failed in the fan-out of map step %d without recording its children, more than a retention (%s) after its submission; children it created may be gone: submit it again",
			ErrChildrenExpired, e.StepIndex, r.cfg.ExecutionTTL)
	}
	if c == nil || c.StepIndex != e.StepIndex || c.Retry {
		return nil
	}
	ref := roundRef(e)
	for start := 0; start < c.Total; start += 100 {
		keys := make([]store.Key, 0, 100)
		for i := start; i < min(start+100, c.Total); i++ {
			keys = append(keys, store.Key{TenantID: e.TenantID, ExecutionID: childOf(ref, i)})
		}
		rows, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return err
		}
		if len(rows) == len(keys) {
			continue
		}
		found := make(map[string]bool, len(rows))
		for _, ch := range rows {
			found[ch.ExecutionID] = true
		}
		for i, k := range keys {
			if !found[k.ExecutionID] {
				return fmt.Errorf("%w: child %d of round %d (%s) is gone", ErrChildrenExpired, start+i, c.Round, k.ExecutionID)
			}
		}
	}
	return nil
}

// fanOutMayHaveRun reports whether e stands at a map step of its
// definition without a record of that step's children (c: none, or an
// earlier step's): its fan-out may have created some before it failed.
func fanOutMayHaveRun(r *Runtime, e *store.Execution, c *store.Children) bool {
	p, ok := r.deps.Registry.Version(e.PipelineID, e.PipelineVersion)
	if !ok || e.StepIndex >= len(p.Steps) || p.Steps[e.StepIndex].Map == nil {
		return false
	}
	return c == nil || c.StepIndex != e.StepIndex
}

// rerun reports whether a re-drive of the map runs element el again: a
// child that failed (FAILED, DLQ, or gone), not a rejected item nor a
// cancelled one.
func rerun(el pipeline.MapElement) bool {
	return el.Status != string(store.Succeeded) && el.Status != string(store.Cancelled) && !el.Rejected
}

// priorResult reads the outcomes the map's earlier rounds left.
func (r *Runtime) priorResult(ctx context.Context, c *store.Children) (pipeline.MapResult, error) {
	var res pipeline.MapResult
	if c.Prior == nil {
		return res, errors.New("engine: the map keeps no earlier outcomes")
	}
	p, err := payload.Read(ctx, r.deps.Payloads, *c.Prior)
	if err != nil {
		return res, err
	}
	return res, p.DecodeJSON(&res)
}

// createChildren creates the children of the round park describes, one
// per element of members (create-or-get: a re-run finds those that
// exist), the first park.MaxInFlight QUEUED and dispatched, the rest
// PENDING. It returns the round indexes of the children it found or left
// PENDING.
func (r *Runtime) createChildren(ctx context.Context, parent *store.Execution, park *store.Children, child *pipeline.Pipeline,
	elems []json.RawMessage, members []int) ([]int, error) {
	now := r.deps.Clock.Now()
	expires := now.Add(r.cfg.ExecutionTTL)
	records := r.recordsExpire(expires)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		queued   []store.Execution
		pending  []int
	)
	ref := store.ParentRef{ExecutionID: parent.ExecutionID, CreateToken: parent.CreateToken, StepIndex: park.StepIndex,
		Round: park.Round, Total: park.Total, MaxInFlight: park.MaxInFlight}
	jobs := make(chan int)
	for range min(r.cfg.FanOutParallel, len(members)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				p := ref
				p.Index, p.Element = i, members[i]
				e, err := r.createChild(ctx, parent, &p, child, elems[p.Element], now, expires, records)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil && e.Status == store.Queued {
					queued = append(queued, e)
				}
				if err == nil && e.Status == store.Pending {
					pending = append(pending, i)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range members {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range queued {
		r.handOver(ctx, &queued[i], 0)
	}
	return pending, nil
}

// createChild creates (or finds) the child p names, element elem.
func (r *Runtime) createChild(ctx context.Context, parent *store.Execution, p *store.ParentRef, child *pipeline.Pipeline, elem json.RawMessage,
	now, expires, records time.Time) (store.Execution, error) {
	tenant := parent.TenantID
	id, token := RoundChildID(p.ExecutionID, p.CreateToken, p.StepIndex, p.Round, p.Index)
	in, err := payload.Write(ctx, r.deps.Payloads, payload.Payload{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Data: elem},
		"input/"+store.KeyID(tenant, id), r.cfg.InlineBudget, records)
	if err != nil {
		return store.Execution{}, fmt.Errorf("engine: store child %d's input: %w", p.Element, err)
	}
	input := payload.Payload{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Data: elem}
	rateLimit, rateKey, err := rateOf(child, input)
	if err != nil {
		// An element whose key cannot be computed shares the limit's "" bucket.
		rateKey = ""
	}
	row := store.Execution{
		RateLimit: rateLimit, RateKey: rateKey,
		TenantID: tenant, ExecutionID: id, PipelineID: child.ID, PipelineVersion: child.VersionID(),
		Status: store.Pending, Version: 1, StepName: child.Steps[0].Name, Attempt: 1, Input: in,
		Fingerprint: "child:" + token, CreateToken: token,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: expires, RecordsExpireAt: records,
		Parent: p,
	}
	// The child inherits its parent's priority (a row written before
	// priorities: the child pipeline's default), ranked as submitted now.
	prio := parent.Priority
	if prio == 0 {
		prio = pipeline.PriorityOf(child, 0)
	}
	r.prioritize(&row, prio)
	if p.Index < p.MaxInFlight {
		row.Status, row.NextDueAt, row.SweepAt = store.Queued, now, r.firstLook(now)
	}
	got, _, err := r.deps.Store.CreateOrGet(ctx, store.CreateRequest{Execution: row})
	if err != nil {
		return store.Execution{}, fmt.Errorf("engine: create child %d: %w", p.Element, err)
	}
	return got, nil
}

// childEnded is what follows a child's terminal commit: count it in its
// group, finish the group when it is full (and wake the parent when that
// was the last group), then release the next pending sibling. A failure
// is left to the parent's sweep look, which repairs counts and releases.
func (r *Runtime) childEnded(ctx context.Context, e store.Execution) {
	p := e.Parent
	if p == nil || !e.Status.Terminal() {
		return
	}
	ms, ok := r.maps()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DispatchTimeout+5*time.Second)
	defer cancel()
	log := r.execLogger(&e)
	if err := r.countChild(ctx, ms, e); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "child_count_failed", slog.String("event", "child_count_failed"), slog.String("error", err.Error()))
		return
	}
	if err := r.releaseNext(ctx, e.TenantID, p, p.Index, strings.HasPrefix(e.CancelReason, parentCancelPrefix) && e.Status == store.Cancelled); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "child_release_failed", slog.String("event", "child_release_failed"), slog.String("error", err.Error()))
	}
}

// countChild counts a terminal child, finishes its group when the count
// fills it, and wakes the parent when that finished the last group.
func (r *Runtime) countChild(ctx context.Context, ms store.MapStore, e store.Execution) error {
	return r.countIndex(ctx, ms, e.TenantID, e.Parent, e.Parent.Index, e.Status != store.Succeeded, r.countsExpire(e.ExpiresAt))
}

// countIndex counts child index of the round p names as ended (and
// failed), and finishes its group when the count fills it.
func (r *Runtime) countIndex(ctx context.Context, ms store.MapStore, tenant string, p *store.ParentRef, index int, failed bool, exp time.Time) error {
	n, err := ms.CountChild(ctx, p.Map(tenant), index, failed, exp)
	if err != nil {
		return err
	}
	g := index / store.GroupSize
	if n < store.GroupLen(p.Total, g) {
		return nil
	}
	return r.finishGroup(ctx, ms, tenant, p, g, exp)
}

// finishGroup adds group g to the map's finished set and wakes the
// parent when that completed it.
func (r *Runtime) finishGroup(ctx context.Context, ms store.MapStore, tenant string, p *store.ParentRef, g int, exp time.Time) error {
	fin, err := ms.FinishGroup(ctx, p.Map(tenant), g, exp)
	if err != nil {
		return err
	}
	if fin < store.Groups(p.Total) {
		return nil
	}
	return r.wakeParent(ctx, store.Key{TenantID: tenant, ExecutionID: p.ExecutionID}, p.CreateToken, p.StepIndex, p.Round)
}

// countsExpire is the expiry of a map's count rows written when a child
// ends: a retention past the child's own row, so that the parent's join
// and status find them while any child of the map lives.
func (r *Runtime) countsExpire(childExpires time.Time) time.Time {
	return childExpires.Add(r.cfg.ExecutionTTL)
}

// wakeParent queues a parent whose every child has ended at its map step
// again (Children.Done), and dispatches it: the step's next run collects.
// A parent that is not waiting for this map (woken already, another
// incarnation) is left alone.
func (r *Runtime) wakeParent(ctx context.Context, key store.Key, token string, step, round int) error {
	for try := 0; try < cancelTries; try++ {
		e, err := r.deps.Store.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.Status != store.WaitingChildren || e.CreateToken != token || e.Children == nil || e.Children.StepIndex != step || e.Children.Round != round {
			return nil
		}
		now := r.deps.Clock.Now()
		next := e
		c := *e.Children
		c.Done = true
		next.Children = &c
		next.Status, next.NextDueAt, next.UpdatedAt = store.Queued, now, now
		next.SweepAt, next.Sweeps = r.firstLook(now), 0
		next.ExpiresAt = r.keepAlive(&e, now)
		// A pause requested while the children ran stays a request: the
		// parent collects their outcomes first (the join reads the
		// children's rows, which a paused parent does not keep alive), and
		// parks at the join's hand-over (pauseOnCommit).
		got, err := r.update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
		if errors.Is(err, store.ErrConflict) {
			continue // the parent moved meanwhile (a look, a cancel): decide again
		}
		if err != nil {
			return err
		}
		r.execLogger(&got).LogAttrs(ctx, slog.LevelInfo, "children_finished", slog.String("event", "children_finished"),
			slog.Int("children", c.Total))
		r.handOver(ctx, &got, 0)
		return nil
	}
	return nil
}

// afterFanOut is the parent's one look at its map's counts once its
// children all exist and it is parked. A child that ended before its
// pending sibling existed released nothing (a re-run of the fan-out
// after a lost lease or a crash, or the sweeper dispatching a QUEUED
// child of a long fan-out): pending lists the children left PENDING, and
// each whose predecessor (index - MaxInFlight) is counted ended is
// released here. A predecessor counted after this read counted after
// the sibling existed, so its own release finds it. When every child
// ended before the park landed (their wake-up found the parent still
// running), it wakes the parent. What fails here the sweep look repairs.
func (r *Runtime) afterFanOut(ctx context.Context, ms store.MapStore, e store.Execution, pending []int) {
	c := e.Children
	counts, err := ms.MapCounts(ctx, roundKey(&e), c.Total)
	if err != nil {
		return
	}
	if len(counts.Finished) >= store.Groups(c.Total) {
		_ = r.wakeParent(ctx, e.Key(), e.CreateToken, c.StepIndex, c.Round)
		return
	}
	if len(pending) == 0 || len(counts.Ended) == 0 {
		return
	}
	ended := make(map[int]bool, len(counts.Ended))
	for _, i := range counts.Ended {
		ended[i] = true
	}
	ref := roundRef(&e)
	for _, j := range pending {
		if i := j - c.MaxInFlight; i >= 0 && ended[i] {
			if err := r.releaseNext(ctx, e.TenantID, ref, i, !e.CancelRequestedAt.IsZero()); err != nil {
				r.execLogger(&e).LogAttrs(ctx, slog.LevelWarn, "child_release_failed", slog.String("event", "child_release_failed"),
					slog.Int("index", j), slog.String("error", err.Error()))
			}
		}
	}
}

// releaseNext releases the sibling child index+MaxInFlight when it is
// PENDING (QUEUED, due now, in the sweep index, dispatched), or cancels
// it when cancel is set (the ending child was cancelled with its parent).
func (r *Runtime) releaseNext(ctx context.Context, tenant string, p *store.ParentRef, index int, cancel bool) error {
	j := index + p.MaxInFlight
	if j >= p.Total {
		return nil
	}
	e, err := r.deps.Store.Get(ctx, store.Key{TenantID: tenant, ExecutionID: childOf(p, j)})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return r.release(ctx, e, cancel, "")
}

// release moves a PENDING child on: QUEUED and dispatched, or, with
// cancel, CANCELLED (reason names the parent's cancel).
func (r *Runtime) release(ctx context.Context, e store.Execution, cancel bool, reason string) error {
	if e.Status != store.Pending {
		return nil
	}
	if cancel {
		if reason == "" {
			reason = parentCancelPrefix + "the map's parent was cancelled"
		}
		e.CancelReason = store.Truncate(reason, store.MaxErrorMessage)
		_, err := r.finishCancel(ctx, e, "parent")
		if errors.Is(err, store.ErrConflict) {
			return nil
		}
		return err
	}
	now := r.deps.Clock.Now()
	next := e
	next.Status, next.NextDueAt, next.UpdatedAt = store.Queued, now, now
	next.SweepAt, next.Sweeps = r.firstLook(now), 0
	got, err := r.deps.Store.Update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next)
	if errors.Is(err, store.ErrConflict) {
		return nil // released (or cancelled) by someone else
	}
	if err != nil {
		return err
	}
	r.handOver(ctx, &got, 0)
	return nil
}

// collect is the map step's run after every child of its round has
// ended: it reads the round's children rows (in pages of 100), puts their
// outcomes in input order (over the earlier rounds' in a later round) and
// judges them. A parent whose cancel was requested ends CANCELLED here.
func (t *transition) collect(ctx context.Context, step pipeline.Step, policy pipeline.RetryPolicy) error {
	r, row := t.r, &t.row
	c := row.Children
	if !row.CancelRequestedAt.IsZero() {
		_, err := r.finishCancel(ctx, *row, "worker")
		if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrConflict) {
			return nil
		}
		return err
	}
	// Done is the wake-up's record that every child of the round ended,
	// written once the counts said so: the outcomes are read from the
	// children's rows, never from the counts again (a parent re-driven
	// after its count rows expired must not wait again for children that
	// will never end again).
	if !c.Done {
		// Queued without its wake-up (should not happen): wait again; the
		// parent's look wakes it once the counts are complete.
		now := r.deps.Clock.Now()
		next := t.base(now)
		next.Status = store.WaitingChildren
		next.SweepAt, next.Sweeps = now.Add(r.cfg.ChildrenLook), 0
		_, err := t.commit(ctx, next, false)
		return err
	}
	var (
		res pipeline.MapResult
		err error
	)
	if c.Round > 0 {
		if res, err = r.priorResult(ctx, c); err != nil {
			return t.fail(ctx, pipeline.NonRetryable(CodePayloadUnreadable, fmt.Errorf("step %s: the map's earlier outcomes: %w", step.Name, err)), policy)
		}
	} else {
		res = pipeline.MapResult{Total: c.Total, Elements: make([]pipeline.MapElement, c.Total)}
	}
	ref := roundRef(row)
	for start := 0; start < c.Total; start += 100 {
		keys := make([]store.Key, 0, 100)
		for i := start; i < min(start+100, c.Total); i++ {
			id := childOf(ref, i)
			keys = append(keys, store.Key{TenantID: row.TenantID, ExecutionID: id})
			if c.Round == 0 {
				res.Elements[i] = pipeline.MapElement{Index: i, ExecutionID: id, Status: "EXPIRED"}
			}
		}
		rows, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return t.release(ctx, err, "", policy)
		}
		for _, e := range rows {
			p := e.Parent
			if p == nil || p.ExecutionID != row.ExecutionID || p.Round != c.Round || p.Element < 0 || p.Element >= len(res.Elements) {
				continue
			}
			el := pipeline.MapElement{Index: p.Element, ExecutionID: e.ExecutionID, Status: string(e.Status)}
			if e.Error != nil {
				el.ErrorCode, el.ErrorMessage = e.Error.Code, e.Error.Message
				el.Rejected = e.Status == store.Failed && e.Error.TerminalReason == store.ReasonRejected
			}
			if e.Status == store.Succeeded {
				ref := e.Result
				el.Output = &ref
			}
			res.Elements[p.Element] = el
		}
	}
	return t.judge(ctx, step, res, policy)
}

// judge counts the map's outcomes and succeeds with them, or, beyond the
// tolerance, keeps them as the map's earlier outcomes (for a re-drive to
// run the failed elements again) and fails with CodeChildrenFailed.
func (t *transition) judge(ctx context.Context, step pipeline.Step, res pipeline.MapResult, policy pipeline.RetryPolicy) error {
	r, row := t.r, &t.row
	res.Total, res.Succeeded, res.Failed, res.Cancelled, res.Rejected = len(res.Elements), 0, 0, 0, 0
	for i := range res.Elements {
		el := &res.Elements[i]
		switch {
		case el.Status == string(store.Succeeded):
			res.Succeeded++
		case el.Status == string(store.Cancelled):
			res.Cancelled++
		case el.Rejected:
			res.Rejected++
		default:
			res.Failed++
		}
	}
	bad, tolerated := res.Failed+res.Cancelled, step.Map.Tolerated(res.Total)
	if bad <= tolerated {
		return t.succeed(ctx, mustJSON(res), nil, policy)
	}
	cause := pipeline.NonRetryable(pipeline.CodeChildrenFailed,
		fmt.Errorf("step %s: %d of %d children failed or were cancelled, %d tolerated", step.Name, bad, res.Total, tolerated))
	round := 0
	if row.Children != nil {
		round = row.Children.Round
	}
	prior, err := payload.Write(ctx, r.deps.Payloads, mustJSON(res),
		fmt.Sprintf("map/%s/%d/r%d", store.KeyID(row.TenantID, row.ExecutionID), row.StepIndex, round), r.cfg.InlineBudget,
		r.recordsExpire(r.deps.Clock.Now().Add(r.cfg.ExecutionTTL)))
	if err != nil {
		return t.release(ctx, fmt.Errorf("engine: keep the map's outcomes: %w", err), "", policy)
	}
	c := store.Children{StepIndex: row.StepIndex, Total: res.Total}
	if row.Children != nil {
		c = *row.Children
	}
	c.Retry, c.Prior, c.Done = true, &prior, true
	t.row.Children = &c
	return t.fail(ctx, cause, policy)
}

func mustJSON(v any) payload.Payload {
	p, err := payload.JSON(v)
	if err != nil {
		panic(err) // a MapResult always encodes
	}
	return p
}

// lookAtChildren is the sweeper's look at a parent waiting for its
// children: it counts children that ended uncounted, releases pending
// siblings a lost release left waiting, finishes full groups left
// unfinished, wakes the parent when every group is finished, and, when
// the parent's cancel was requested, cancels children (up to lookBudget
// a look). It returns when to look next.
func (r *Runtime) lookAtChildren(ctx context.Context, e store.Execution) time.Time {
	now := r.deps.Clock.Now()
	next := now.Add(r.cfg.ChildrenLook)
	ms, ok := r.maps()
	c := e.Children
	if !ok || c == nil {
		return next
	}
	m := roundKey(&e)
	counts, err := ms.MapCounts(ctx, m, c.Total)
	if err != nil {
		return r.firstLook(now)
	}
	ended := make(map[int]bool, len(counts.Ended))
	for _, i := range counts.Ended {
		ended[i] = true
	}
	cancelling := !e.CancelRequestedAt.IsZero()
	// The children that may be running as far as the counts know: not
	// counted, and released (among the first MaxInFlight, or their
	// predecessor counted). When cancelling, every uncounted child.
	var cand []int
	for i := 0; i < c.Total && len(cand) < lookBudget; i++ {
		if !ended[i] && (cancelling || i < c.MaxInFlight || ended[i-c.MaxInFlight]) {
			cand = append(cand, i)
		}
	}
	ref := roundRef(&e)
	for start := 0; start < len(cand); start += 100 {
		keys := make([]store.Key, 0, 100)
		for _, i := range cand[start:min(start+100, len(cand))] {
			keys = append(keys, store.Key{TenantID: e.TenantID, ExecutionID: childOf(ref, i)})
		}
		rows, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return r.firstLook(now)
		}
		r.countExpired(ctx, ms, &e, cand[start:min(start+100, len(cand))], rows)
		for _, ch := range rows {
			switch {
			case ch.Parent == nil:
			case ch.Status.Terminal():
				r.childEnded(ctx, ch) // its count was lost: count and release now
			case cancelling:
				_, _, _ = r.cancelOnce(ctx, ch, parentCancelPrefix+e.CancelReason)
			case ch.Status == store.Pending:
				_ = r.release(ctx, ch, false, "") // its release was lost
			}
		}
	}
	// Full groups whose finishing write was lost; then the wake-up.
	counts, err = ms.MapCounts(ctx, m, c.Total)
	if err != nil {
		return r.firstLook(now)
	}
	perGroup := map[int]int{}
	for _, i := range counts.Ended {
		perGroup[i/store.GroupSize]++
	}
	finished := map[int]bool{}
	for _, g := range counts.Finished {
		finished[g] = true
	}
	exp := r.countsExpire(now.Add(r.cfg.ExecutionTTL))
	for g := range store.Groups(c.Total) {
		if !finished[g] && perGroup[g] == store.GroupLen(c.Total, g) {
			_ = r.finishGroup(ctx, ms, e.TenantID, ref, g, exp)
			finished[g] = true
		}
	}
	if len(finished) == store.Groups(c.Total) {
		_ = r.wakeParent(ctx, e.Key(), e.CreateToken, c.StepIndex, c.Round)
	}
	if cancelling {
		return r.firstLook(now) // go on cancelling soon
	}
	return next
}

// countExpired counts as failed the children of the parked parent e
// among want (round indexes) that GetBatch found no row for. Every child
// exists before its parent parks, so a missing one outlived its
// retention (a map running longer than it): counted so, the map still
// ends (its join sees the element EXPIRED) instead of waiting for a child
// that is gone.
func (r *Runtime) countExpired(ctx context.Context, ms store.MapStore, e *store.Execution, want []int, rows []store.Execution) {
	if len(rows) == len(want) {
		return
	}
	found := make(map[string]bool, len(rows))
	for _, ch := range rows {
		found[ch.ExecutionID] = true
	}
	ref := roundRef(e)
	exp := r.countsExpire(r.deps.Clock.Now().Add(r.cfg.ExecutionTTL))
	for _, i := range want {
		if found[childOf(ref, i)] {
			continue
		}
		r.execLogger(e).LogAttrs(ctx, slog.LevelWarn, "child_expired", slog.String("event", "child_expired"),
			slog.Int("index", i), slog.Int("round", ref.Round))
		if r.countIndex(ctx, ms, e.TenantID, ref, i, true, exp) != nil {
			return // the next look tries again
		}
		_ = r.releaseNext(ctx, e.TenantID, ref, i, !e.CancelRequestedAt.IsZero())
	}
}

// ChildCounts are a parent's map counts as its status shows them: over
// every element of the map (Failed includes rejected items); Round is the
// map's round (0, or the number of re-drives of its failed children).
type ChildCounts struct {
	Total, Succeeded, Failed, Running, Pending int
	Round                                      int
}

// ChildCounts reads the counts of the map e waits for (or last waited
// for): nil when e has none.
func (r *Runtime) ChildCounts(ctx context.Context, e store.Execution) (*ChildCounts, error) {
	c := e.Children
	ms, ok := r.maps()
	if c == nil || !ok {
		return nil, nil
	}
	counts, err := ms.MapCounts(ctx, roundKey(&e), c.Total)
	if err != nil {
		return nil, err
	}
	ended, failed := len(counts.Ended), len(counts.Failed)
	released := min(c.Total, c.MaxInFlight+ended)
	// A later round runs the failed elements again: the others count as
	// the earlier rounds left them.
	return &ChildCounts{Total: c.Total + c.KeptSucceeded + c.KeptOther, Succeeded: ended - failed + c.KeptSucceeded,
		Failed: failed + c.KeptOther, Running: released - ended, Pending: c.Total - released, Round: c.Round}, nil
}

// renewMap keeps a parent waiting for its map, and the children of the
// map's round, alive while the map runs: a map may run longer than the
// retention (one child at a time, each long), and waiting is not
// idleness. Once the parent's expiry is less than half a retention away,
// the look extends every child row of the round whose expiry is that
// close (PENDING children not yet released, children that ended early
// and whose outcomes the join will read; running ones extend themselves
// at each commit) to a retention from now, then the parent, moving its
// next look to look in the same write. The children go first, so that a
// crash between the two leaves the parent in its window and the next
// look finishes. At most lookBudget children are written per look; a
// look that stops short leaves the parent for the next.
//
// Cost: nothing until a parent has waited half a retention (15 days by
// default); then, once per half retention, one read per 100 children, a
// write per child and one write of the parent.
//
// It reports whether it wrote the parent (and so moved its next look);
// false leaves the look to the caller.
func (r *Runtime) renewMap(ctx context.Context, e store.Execution, look time.Time) bool {
	now := r.deps.Clock.Now()
	c := e.Children
	soon := now.Add(r.cfg.ExecutionTTL / 2)
	if c == nil || e.Status != store.WaitingChildren || !e.ExpiresAt.Before(soon) {
		return false
	}
	until := now.Add(r.cfg.ExecutionTTL)
	ref := roundRef(&e)
	written := 0
	for start := 0; start < c.Total; start += 100 {
		keys := make([]store.Key, 0, 100)
		for i := start; i < min(start+100, c.Total); i++ {
			keys = append(keys, store.Key{TenantID: e.TenantID, ExecutionID: childOf(ref, i)})
		}
		rows, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return false
		}
		for _, ch := range rows {
			if p := ch.Parent; p == nil || p.ExecutionID != e.ExecutionID || p.Round != c.Round || !ch.ExpiresAt.Before(soon) {
				continue
			}
			if written == lookBudget {
				return false // the next look goes on
			}
			next := ch
			next.ExpiresAt = until
			next.SweepAt, next.Sweeps = ch.SweepAt, ch.Sweeps
			if _, err := r.update(ctx, store.Guard{Key: ch.Key(), Version: ch.Version}, next); err != nil && !errors.Is(err, store.ErrConflict) {
				return false // a child that moved extends itself; any other failure: the next look
			}
			written++
		}
	}
	next := e
	next.ExpiresAt = until
	next.SweepAt, next.Sweeps = look, 0
	if _, err := r.update(ctx, store.Guard{Key: e.Key(), Version: e.Version}, next); err != nil {
		return false // woken or cancelled meanwhile: the caller's reschedule decides
	}
	r.execLogger(&e).LogAttrs(ctx, slog.LevelInfo, "map_kept_alive", slog.String("event", "map_kept_alive"),
		slog.Int("children_extended", written), slog.Time("expires_at", until))
	return true
}
