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
	h := sha256.Sum256(fmt.Appendf(nil, "qasync-child;%d:%s;%d:%s;%d;%d", len(parentID), parentID, len(parentToken), parentToken, step, index))
	token = hex.EncodeToString(h[:8])
	slot := strings.ReplaceAll(parentID, store.IncarnationSep, "-") + "-" + strconv.Itoa(step) + "-" + strconv.Itoa(index)
	return slot + store.IncarnationSep + token, token
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
	if c := row.Children; c != nil && c.StepIndex == row.StepIndex {
		return t.collect(ctx, ms, step, policy)
	}
	var elems []json.RawMessage
	if step.Map.One {
		elems = []json.RawMessage{json.RawMessage(in.Data)}
	} else if err := in.DecodeJSON(&elems); err != nil {
		return t.fail(ctx, pipeline.NonRetryable("invalid_input", fmt.Errorf("step %s: a map's input must be a JSON list: %w", step.Name, err)), policy)
	}
	if len(elems) > pipeline.MaxChildren {
		return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeMapTooLarge,
			fmt.Errorf("step %s: %d elements, more than the %d children a map may have", step.Name, len(elems), pipeline.MaxChildren)), policy)
	}
	child, ok := r.deps.Registry.Get(step.Map.Pipeline)
	if !ok {
		return t.fail(ctx, pipeline.NonRetryable(CodePipelineVersionUnavailable,
			fmt.Errorf("step %s: child pipeline %s is not served here", step.Name, step.Map.Pipeline)), policy)
	}
	if len(elems) == 0 {
		return t.succeed(ctx, mustJSON(pipeline.MapResult{Elements: []pipeline.MapElement{}}), nil, policy)
	}
	inFlight := min(step.Map.InFlight(), len(elems))
	// The creates run under the lease, renewed as for any step.
	var pending []int
	create := pipeline.Step{Name: step.Name, Run: func(ctx context.Context, _ pipeline.StepInfo, _ payload.Payload) (payload.Payload, error) {
		var err error
		pending, err = r.createChildren(ctx, row, child, elems, inFlight)
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
	next.Children = &store.Children{StepIndex: row.StepIndex, Total: len(elems), MaxInFlight: inFlight}
	next.SweepAt, next.Sweeps = now.Add(r.cfg.ChildrenLook), 0
	got, err := t.commit(ctx, next, false, slog.Int("children", len(elems)), slog.Int("max_in_flight", inFlight))
	if err != nil || got == nil {
		return err
	}
	r.execLogger(got).LogAttrs(ctx, slog.LevelInfo, "children_started", slog.String("event", "children_started"),
		slog.String("child_pipeline", child.ID), slog.Int("children", len(elems)), slog.Int("max_in_flight", inFlight))
	// Children may have ended before their pending siblings existed, or
	// all before the park landed: look once now.
	r.afterFanOut(ctx, ms, *got, pending)
	return nil
}

// createChildren creates every child of the map (create-or-get: a re-run
// finds those that exist), the first inFlight QUEUED and dispatched, the
// rest PENDING. It returns the indexes of the children it found or left
// PENDING.
func (r *Runtime) createChildren(ctx context.Context, parent *store.Execution, child *pipeline.Pipeline, elems []json.RawMessage, inFlight int) ([]int, error) {
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
	jobs := make(chan int)
	for range min(r.cfg.FanOutParallel, len(elems)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				e, err := r.createChild(ctx, parent, child, elems[i], i, len(elems), inFlight, now, expires, records)
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
	for i := range elems {
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

// createChild creates (or finds) child i.
func (r *Runtime) createChild(ctx context.Context, parent *store.Execution, child *pipeline.Pipeline, elem json.RawMessage,
	i, total, inFlight int, now, expires, records time.Time) (store.Execution, error) {
	id, token := ChildID(parent.ExecutionID, parent.CreateToken, parent.StepIndex, i)
	in, err := payload.Write(ctx, r.deps.Payloads, payload.Payload{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Data: elem},
		"input/"+store.KeyID(parent.TenantID, id), r.cfg.InlineBudget, records)
	if err != nil {
		return store.Execution{}, fmt.Errorf("engine: store child %d's input: %w", i, err)
	}
	row := store.Execution{
		TenantID: parent.TenantID, ExecutionID: id, PipelineID: child.ID, PipelineVersion: child.VersionID(),
		Status: store.Pending, Version: 1, StepName: child.Steps[0].Name, Attempt: 1, Input: in,
		Fingerprint: "child:" + token, CreateToken: token,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: expires, RecordsExpireAt: records,
		Parent: &store.ParentRef{ExecutionID: parent.ExecutionID, CreateToken: parent.CreateToken, StepIndex: parent.StepIndex,
			Index: i, Total: total, MaxInFlight: inFlight},
	}
	if i < inFlight {
		row.Status, row.NextDueAt, row.SweepAt = store.Queued, now, r.firstLook(now)
	}
	got, _, err := r.deps.Store.CreateOrGet(ctx, store.CreateRequest{Execution: row})
	if err != nil {
		return store.Execution{}, fmt.Errorf("engine: create child %d: %w", i, err)
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
	p := e.Parent
	m := p.Map(e.TenantID)
	exp := r.countsExpire(e.ExpiresAt)
	n, err := ms.CountChild(ctx, m, p.Index, e.Status != store.Succeeded, exp)
	if err != nil {
		return err
	}
	g := p.Index / store.GroupSize
	if n < store.GroupLen(p.Total, g) {
		return nil
	}
	return r.finishGroup(ctx, ms, e.TenantID, p, g, exp)
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
	return r.wakeParent(ctx, store.Key{TenantID: tenant, ExecutionID: p.ExecutionID}, p.CreateToken, p.StepIndex)
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
func (r *Runtime) wakeParent(ctx context.Context, key store.Key, token string, step int) error {
	for try := 0; try < cancelTries; try++ {
		e, err := r.deps.Store.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.Status != store.WaitingChildren || e.CreateToken != token || e.Children == nil || e.Children.StepIndex != step {
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
	counts, err := ms.MapCounts(ctx, store.MapKey{TenantID: e.TenantID, ParentID: e.ExecutionID, StepIndex: c.StepIndex}, c.Total)
	if err != nil {
		return
	}
	if len(counts.Finished) >= store.Groups(c.Total) {
		_ = r.wakeParent(ctx, e.Key(), e.CreateToken, c.StepIndex)
		return
	}
	if len(pending) == 0 || len(counts.Ended) == 0 {
		return
	}
	ended := make(map[int]bool, len(counts.Ended))
	for _, i := range counts.Ended {
		ended[i] = true
	}
	ref := &store.ParentRef{ExecutionID: e.ExecutionID, CreateToken: e.CreateToken, StepIndex: c.StepIndex, Total: c.Total, MaxInFlight: c.MaxInFlight}
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
	id, _ := ChildID(p.ExecutionID, p.CreateToken, p.StepIndex, j)
	e, err := r.deps.Store.Get(ctx, store.Key{TenantID: tenant, ExecutionID: id})
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

// collect is the map step's run after every child has ended: it reads the
// children's rows (in pages of 100), builds the MapResult in input order
// and succeeds with it, or fails with CodeChildrenFailed beyond the
// tolerance. A parent whose cancel was requested ends CANCELLED here.
func (t *transition) collect(ctx context.Context, ms store.MapStore, step pipeline.Step, policy pipeline.RetryPolicy) error {
	r, row := t.r, &t.row
	c := row.Children
	if !row.CancelRequestedAt.IsZero() {
		_, err := r.finishCancel(ctx, *row, "worker")
		if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrConflict) {
			return nil
		}
		return err
	}
	counts, err := ms.MapCounts(ctx, store.MapKey{TenantID: row.TenantID, ParentID: row.ExecutionID, StepIndex: c.StepIndex}, c.Total)
	if err != nil {
		return t.release(ctx, err, "", policy)
	}
	if len(counts.Finished) < store.Groups(c.Total) {
		// Woken early (should not happen): wait again.
		now := r.deps.Clock.Now()
		next := t.base(now)
		next.Status = store.WaitingChildren
		cc := *c
		cc.Done = false
		next.Children = &cc
		next.SweepAt, next.Sweeps = now.Add(r.cfg.ChildrenLook), 0
		_, err := t.commit(ctx, next, false)
		return err
	}
	res := pipeline.MapResult{Total: c.Total, Elements: make([]pipeline.MapElement, c.Total)}
	for start := 0; start < c.Total; start += 100 {
		keys := make([]store.Key, 0, 100)
		for i := start; i < min(start+100, c.Total); i++ {
			id, _ := ChildID(row.ExecutionID, row.CreateToken, c.StepIndex, i)
			keys = append(keys, store.Key{TenantID: row.TenantID, ExecutionID: id})
			res.Elements[i] = pipeline.MapElement{Index: i, ExecutionID: id, Status: "EXPIRED"}
		}
		rows, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return t.release(ctx, err, "", policy)
		}
		for _, e := range rows {
			if e.Parent == nil || e.Parent.ExecutionID != row.ExecutionID {
				continue
			}
			el := &res.Elements[e.Parent.Index]
			el.Status = string(e.Status)
			if e.Error != nil {
				el.ErrorCode, el.ErrorMessage = e.Error.Code, e.Error.Message
			}
			if e.Status == store.Succeeded {
				ref := e.Result
				el.Output = &ref
			}
		}
	}
	for i := range res.Elements {
		el := &res.Elements[i]
		switch {
		case el.Status == string(store.Succeeded):
			res.Succeeded++
		case el.Status == string(store.Cancelled):
			res.Cancelled++
		case el.Status == string(store.Failed) && el.ErrorCode == pipeline.CodeItemRejected:
			el.Rejected = true
			res.Rejected++
		default:
			res.Failed++
		}
	}
	if bad := res.Failed + res.Cancelled; bad > step.Map.Tolerated(c.Total) {
		return t.fail(ctx, pipeline.NonRetryable(pipeline.CodeChildrenFailed,
			fmt.Errorf("step %s: %d of %d children failed or were cancelled, %d tolerated", step.Name, bad, c.Total, step.Map.Tolerated(c.Total))), policy)
	}
	return t.succeed(ctx, mustJSON(res), nil, policy)
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
	m := store.MapKey{TenantID: e.TenantID, ParentID: e.ExecutionID, StepIndex: c.StepIndex}
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
	ref := &store.ParentRef{ExecutionID: e.ExecutionID, CreateToken: e.CreateToken, StepIndex: c.StepIndex, Total: c.Total, MaxInFlight: c.MaxInFlight}
	for start := 0; start < len(cand); start += 100 {
		keys := make([]store.Key, 0, 100)
		for _, i := range cand[start:min(start+100, len(cand))] {
			id, _ := ChildID(e.ExecutionID, e.CreateToken, c.StepIndex, i)
			keys = append(keys, store.Key{TenantID: e.TenantID, ExecutionID: id})
		}
		rows, err := r.deps.Store.GetBatch(ctx, keys)
		if err != nil {
			return r.firstLook(now)
		}
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
		_ = r.wakeParent(ctx, e.Key(), e.CreateToken, c.StepIndex)
	}
	if cancelling {
		return r.firstLook(now) // go on cancelling soon
	}
	return next
}

// ChildCounts are a parent's map counts as its status shows them.
type ChildCounts struct {
	Total, Succeeded, Failed, Running, Pending int
}

// ChildCounts reads the counts of the map e waits for (or last waited
// for): nil when e has none.
func (r *Runtime) ChildCounts(ctx context.Context, e store.Execution) (*ChildCounts, error) {
	c := e.Children
	ms, ok := r.maps()
	if c == nil || !ok {
		return nil, nil
	}
	counts, err := ms.MapCounts(ctx, store.MapKey{TenantID: e.TenantID, ParentID: e.ExecutionID, StepIndex: c.StepIndex}, c.Total)
	if err != nil {
		return nil, err
	}
	ended, failed := len(counts.Ended), len(counts.Failed)
	released := min(c.Total, c.MaxInFlight+ended)
	return &ChildCounts{Total: c.Total, Succeeded: ended - failed, Failed: failed, Running: released - ended, Pending: c.Total - released}, nil
}
