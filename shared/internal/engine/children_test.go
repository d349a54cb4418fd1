package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// num is the element of the fan-out tests' maps.
type num struct {
	N int `json:"n"`
}

// joined is the join step's output: the children's outputs in input
// order, and the counts it was given.
type joined struct {
	Outputs   []int `json:"outputs"`
	Failed    []int `json:"failed"`
	Succeeded int   `json:"succeeded"`
}

// fanPipelines: p.fan maps its list over p.kid (which doubles n, and
// fails non-retryably for a negative n) and joins the outputs; runs counts
// each child's runs by n.
func fanPipelines(o pipeline.MapOptions, runs *sync.Map) []pipeline.Pipeline {
	kid := pipeline.NewStep("double", func(_ context.Context, _ pipeline.StepInfo, in num) (num, error) {
		c, _ := runs.LoadOrStore(fmt.Sprint(in.N), new(int))
		*c.(*int)++
		if in.N < 0 {
			return num{}, pipeline.NonRetryable("negative", errors.New("negative"))
		}
		return num{N: 2 * in.N}, nil
	})
	join := pipeline.NewStep("join", func(ctx context.Context, _ pipeline.StepInfo, r pipeline.MapResult) (joined, error) {
		out := joined{Succeeded: r.Succeeded}
		for i, el := range r.Elements {
			if el.Index != i {
				return joined{}, fmt.Errorf("element %d has index %d", i, el.Index)
			}
			if el.Status != string(store.Succeeded) {
				out.Failed = append(out.Failed, i)
				continue
			}
			var v num
			if err := r.Decode(ctx, i, &v); err != nil {
				return joined{}, err
			}
			out.Outputs = append(out.Outputs, v.N)
		}
		return out, nil
	})
	return []pipeline.Pipeline{
		{ID: "p.kid", Steps: []pipeline.Step{kid}},
		{ID: "p.fan", Steps: []pipeline.Step{pipeline.Map("fan", "p.kid", o), join}},
	}
}

func nums(ns ...int) []num {
	out := make([]num, len(ns))
	for i, n := range ns {
		out[i] = num{N: n}
	}
	return out
}

// children returns the parent's children rows by element index.
func (c *cluster) children(parent store.Execution, step, total int) []store.Execution {
	c.t.Helper()
	out := make([]store.Execution, total)
	for i := range total {
		id, _ := engine.ChildID(parent.ExecutionID, parent.CreateToken, step, i)
		out[i] = c.get(id)
	}
	return out
}

// drainChecked delivers every queued item until the queue is empty,
// checking after each delivery that no more than limit children of
// parent run at once.
func drainChecked(t *testing.T, c *cluster, rt *engine.Runtime, parent store.Execution, total, limit int) {
	t.Helper()
	for round := 0; round < 1000; round++ {
		msgs := c.queue.take()
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			_ = rt.Process(context.Background(), m.Item)
			if total > 0 {
				if n := inFlight(c.children(parent, 0, total)); n > limit {
					t.Fatalf("%d children in flight, limit %d", n, limit)
				}
			}
		}
	}
	t.Fatalf("the queue never drained")
}

// inFlight counts children released and not ended.
func inFlight(kids []store.Execution) int {
	n := 0
	for _, k := range kids {
		if k.Status != store.Pending && !k.Status.Terminal() {
			n++
		}
	}
	return n
}

func output(t *testing.T, c *cluster, e store.Execution) joined {
	t.Helper()
	var j joined
	p, err := payload.Read(context.Background(), c.payloads, e.Result)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.DecodeJSON(&j); err != nil {
		t.Fatal(err)
	}
	return j
}

func ranOnce(t *testing.T, runs *sync.Map, ns ...int) {
	t.Helper()
	for _, n := range ns {
		if got := runsOf(runs, fmt.Sprint(n)); got != 1 {
			t.Errorf("child of %d ran %d times, want once", n, got)
		}
	}
}

// A map of 7 at most 2 in flight: the parent waits WAITING_CHILDREN with
// its counts, 2 children QUEUED and 5 PENDING; each child runs once,
// never more than 2 at a time; the join gets every output in input
// order; the history shows CHILDREN_STARTED and CHILDREN_FINISHED; a
// child links its parent.
func TestMapRunsChildrenAndJoinsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{}, nil, fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3, 4, 5, 6, 7))
		deliver(rt, c.queue) // the fan-out
		parent := c.get(e.ExecutionID)
		if parent.Status != store.WaitingChildren || parent.Children == nil || parent.Children.Total != 7 {
			t.Fatalf("parent %s %+v; want WAITING_CHILDREN of 7", parent.Status, parent.Children)
		}
		counts, err := rt.ChildCounts(context.Background(), parent)
		if err != nil || *counts != (engine.ChildCounts{Total: 7, Running: 2, Pending: 5}) {
			t.Fatalf("counts %+v, %v", counts, err)
		}
		kids := c.children(parent, 0, 7)
		for i, k := range kids {
			want := store.Pending
			if i < 2 {
				want = store.Queued
			}
			if k.Status != want || k.Parent == nil || k.Parent.ExecutionID != e.ExecutionID || k.Parent.Index != i || k.PipelineID != "p.kid" {
				t.Fatalf("child %d: %s %+v; want %s linked to its parent", i, k.Status, k.Parent, want)
			}
		}
		drainChecked(t, c, rt, parent, 7, 2)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded {
			t.Fatalf("parent %s, want SUCCEEDED", done.Status)
		}
		if j := output(t, c, done); fmt.Sprint(j.Outputs) != "[2 4 6 8 10 12 14]" || j.Succeeded != 7 {
			t.Fatalf("join got %+v", j)
		}
		for n := 1; n <= 7; n++ {
			ranOnce(t, &runs, n)
		}
		counts, _ = rt.ChildCounts(context.Background(), done)
		if *counts != (engine.ChildCounts{Total: 7, Succeeded: 7}) {
			t.Fatalf("final counts %+v", counts)
		}
		// The history where the store keeps it in its writes (memory,
		// embedded); the DynamoDB one is fed from the stream.
		if hr, ok := c.store.(history.Reader); ok {
			evs, err := hr.History(context.Background(), e.Key())
			seen := map[history.Type]int{}
			for _, ev := range evs {
				seen[ev.Type]++
			}
			if err != nil || seen[history.ChildrenStarted] != 1 || seen[history.ChildrenFinished] != 1 {
				t.Fatalf("history %v, %v; want CHILDREN_STARTED and CHILDREN_FINISHED once", seen, err)
			}
		}
	})
}

// Failures within the tolerance: the map succeeds and the join sees the
// failed element with its error; beyond it the parent dead-letters with
// children_failed.
func TestMapToleratedFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{}, nil, fanPipelines(pipeline.MapOptions{MaxInFlight: 3, ToleratedFailures: 1}, &runs)...)
		ok := submitTo(t, rt, "p.fan", "ok", nums(1, -2, 3))
		bad := submitTo(t, rt, "p.fan", "bad", nums(-1, -3, 5))
		drainChecked(t, c, rt, ok, 0, 0)
		if got := c.get(ok.ExecutionID); got.Status != store.Succeeded || fmt.Sprint(output(t, c, got).Failed) != "[1]" {
			t.Fatalf("tolerated: %s", got.Status)
		}
		got := c.get(bad.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != pipeline.CodeChildrenFailed {
			t.Fatalf("beyond the tolerance: %s %+v; want DLQ children_failed", got.Status, got.Error)
		}
	})
}

// flakyMaps wraps the cluster's store to fail one operation once: the
// crash points of the design's crash table, as a write that never
// happened (before) or one whose answer was lost (after).
type flakyMaps struct {
	store.Store
	ms store.MapStore
	mu sync.Mutex
	// failCreate fails the n-th child create (from 1) once.
	failCreate, creates int
	// failCount fails the first count of index countIndex once, before
	// its write.
	failCount  bool
	countIndex int
	// failRelease fails the first release (an unleased PENDING -> QUEUED
	// update) once.
	failRelease bool
	// loseFinish makes the write that completes the finished set land and
	// answer an error.
	loseFinish bool
	// forget makes MapCounts read every map empty (its count rows
	// expired).
	forget bool
	// failBatch, while set, fails every GetBatch of an id it prefixes (a
	// collect's reads of its children).
	failBatch string
}

func (f *flakyMaps) GetBatch(ctx context.Context, keys []store.Key) ([]store.Execution, error) {
	f.mu.Lock()
	prefix := f.failBatch
	f.mu.Unlock()
	if prefix != "" && slices.ContainsFunc(keys, func(k store.Key) bool { return strings.HasPrefix(k.ExecutionID, prefix) }) {
		return nil, errInjected
	}
	return f.Store.GetBatch(ctx, keys)
}

var errInjected = fmt.Errorf("injected: %w", store.ErrUnavailable)

func (f *flakyMaps) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	f.mu.Lock()
	if req.Execution.Parent != nil {
		f.creates++
		if f.creates == f.failCreate {
			f.mu.Unlock()
			return store.Execution{}, false, errInjected
		}
	}
	f.mu.Unlock()
	return f.Store.CreateOrGet(ctx, req)
}

func (f *flakyMaps) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	f.mu.Lock()
	if f.failRelease && g.LeaseOwner == "" && next.Parent != nil && next.Status == store.Queued {
		f.failRelease = false
		f.mu.Unlock()
		return store.Execution{}, errInjected
	}
	f.mu.Unlock()
	return f.Store.Update(ctx, g, next)
}

func (f *flakyMaps) CountChild(ctx context.Context, m store.MapKey, index int, failed bool, exp time.Time) (int, error) {
	f.mu.Lock()
	if f.failCount && index == f.countIndex {
		f.failCount = false
		f.mu.Unlock()
		return 0, errInjected
	}
	f.mu.Unlock()
	return f.ms.CountChild(ctx, m, index, failed, exp)
}

func (f *flakyMaps) FinishGroup(ctx context.Context, m store.MapKey, g int, exp time.Time) (int, error) {
	n, err := f.ms.FinishGroup(ctx, m, g, exp)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.loseFinish {
		f.loseFinish = false
		return 0, errInjected
	}
	return n, err
}

func (f *flakyMaps) MapCounts(ctx context.Context, m store.MapKey, total int) (store.MapCounts, error) {
	f.mu.Lock()
	forget := f.forget
	f.mu.Unlock()
	if forget {
		return store.MapCounts{}, nil
	}
	return f.ms.MapCounts(ctx, m, total)
}

// untilEnded delivers everything queued and sweeps every ChildrenLook
// (the default, 5 minutes of the bubble's clock), at most rounds times,
// until e is terminal.
func untilEnded(t *testing.T, c *cluster, rt *engine.Runtime, e store.Execution, rounds int) {
	t.Helper()
	for range rounds {
		drainChecked(t, c, rt, e, 0, 0)
		if c.get(e.ExecutionID).Status.Terminal() {
			return
		}
		time.Sleep(5 * time.Minute)
		if _, err := rt.SweepOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// crashRow runs a map of 5 (2 in flight) with one crash point injected
// by arm, delivering everything queued and sweeping every ChildrenLook
// until the parent ends; it checks that the parent succeeded with every
// output in order and every child ran once.
func crashRow(t *testing.T, arm func(f *flakyMaps)) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		f := &flakyMaps{Store: c.store, ms: c.store.(store.MapStore)}
		arm(f)
		rt := c.workerOn("w", engine.Config{}, nil, f, fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3, 4, 5))
		untilEnded(t, c, rt, e, 20)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 4 6 8 10]" {
			t.Fatalf("parent %s %+v", done.Status, done.Error)
		}
		ranOnce(t, &runs, 1, 2, 3, 4, 5)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.failCount || f.failRelease || f.loseFinish || f.creates < f.failCreate {
			t.Fatalf("the injected crash never happened: %+v", f)
		}
	})
}

// A child's slot holds no incarnation separator, nested children's
// too: a store's index answers with bare slots (DynamoDB's due and list
// indexes), and a bare slot with a '.' reads as an id of the parent's
// slot, so a lost child was never found (the DynamoDB provider failed
// TestMapCrashDuringFanOut about half of its runs).
func TestChildSlotIsBare(t *testing.T) {
	id := "5a5f4520-db1e-8b8d-a0a9-5f746c776d64.055c5acde2f2b04d"
	for depth := range pipeline.MaxNesting {
		child, token := engine.ChildID(id, store.Incarnation(id), depth, 7)
		slot := store.Slot(child)
		if store.Incarnation(slot) != "" || store.Incarnation(child) != token {
			t.Fatalf("depth %d: child %q has slot %q", depth, child, slot)
		}
		if !store.Answers(slot, child) || store.Answers(store.Slot(id), child) {
			t.Fatalf("depth %d: the slot %q does not name the child %q alone", depth, slot, child)
		}
		id = child
	}
}

// The work items of a fan-out lost: one sweep past the grace re-sends
// every released child (found through the sweep index, which on DynamoDB
// answers with bare slots), and the map completes.
func TestMapSweepResendsLostChildren(t *testing.T) {
	lossyDispatch(t)
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{}, nil, fanPipelines(pipeline.MapOptions{MaxInFlight: 3}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3, 4))
		deliver(rt, c.queue) // the fan-out: children 0-2 queued
		if lost := len(c.queue.take()); lost != 3 {
			t.Fatalf("the fan-out sent %d work items, want 3", lost)
		}
		time.Sleep(time.Minute) // past the sweep grace, before the parent's look
		res, err := rt.SweepOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Redispatched != 3 {
			t.Fatalf("the sweep re-sent %d work items (%+v), want the 3 released children", res.Redispatched, res)
		}
		drainChecked(t, c, rt, e, 4, 3)
		if done := c.get(e.ExecutionID); done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 4 6 8]" {
			t.Fatalf("parent %s %+v", done.Status, done.Error)
		}
		ranOnce(t, &runs, 1, 2, 3, 4)
	})
}

// Crash table: during the fan-out, some children created: the map step
// runs again and its creates find those that exist.
func TestMapCrashDuringFanOut(t *testing.T) {
	crashRow(t, func(f *flakyMaps) { f.failCreate = 3 })
}

// Crash table: after a child's terminal commit, before its count: the
// parent's sweep look counts it from its row and releases its sibling.
func TestMapCrashBeforeTheCount(t *testing.T) {
	crashRow(t, func(f *flakyMaps) { f.failCount, f.countIndex = true, 0 })
}

// Crash table: after the count, before the release: the parent's sweep
// look releases the pending sibling.
func TestMapCrashBeforeTheRelease(t *testing.T) {
	crashRow(t, func(f *flakyMaps) { f.failRelease = true })
}

// Crash table: the write completing the parent's set lands, its answer
// lost: the parent's sweep look finds every group finished and queues it.
func TestMapFinishAnswerLost(t *testing.T) {
	crashRow(t, func(f *flakyMaps) { f.loseFinish = true })
}

// Crash table: a parent cancelled while children run: running children
// are cancelled, pending ones never run, the parent ends CANCELLED once
// they have all ended.
func TestMapCancelCancelsChildren(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{}, nil, fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3, 4, 5, 6))
		deliver(rt, c.queue) // the fan-out; children 0 and 1 queued, not run
		if _, changed, err := rt.Cancel(context.Background(), e.Key(), "stop"); err != nil || !changed {
			t.Fatalf("Cancel = %v, %v", changed, err)
		}
		for range 5 {
			drainChecked(t, c, rt, e, 0, 0)
			if c.get(e.ExecutionID).Status.Terminal() {
				break
			}
			time.Sleep(5 * time.Minute)
			if _, err := rt.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.get(e.ExecutionID); got.Status != store.Cancelled {
			t.Fatalf("parent %s, want CANCELLED", got.Status)
		}
		for i, k := range c.children(e, 0, 6) {
			if k.Status != store.Cancelled {
				t.Errorf("child %d %s, want CANCELLED", i, k.Status)
			}
		}
		for n := 1; n <= 6; n++ {
			if runsOf(&runs, fmt.Sprint(n)) != 0 {
				t.Errorf("child of %d ran after its parent's cancel", n)
			}
		}
	})
}

// Registration refuses a map without its child pipeline, limits outside
// their range, and maps nested deeper than pipeline.MaxNesting.
func TestMapRegistrationLimits(t *testing.T) {
	kid := pipeline.Pipeline{ID: "k0", Steps: []pipeline.Step{pipeline.NewStep("s", func(_ context.Context, _ pipeline.StepInfo, in num) (num, error) { return in, nil })}}
	mapOf := func(id, child string, o pipeline.MapOptions) pipeline.Pipeline {
		return pipeline.Pipeline{ID: id, Steps: []pipeline.Step{pipeline.Map("m", child, o)}}
	}
	for name, ps := range map[string][]pipeline.Pipeline{
		"unknown child":  {mapOf("p", "nope", pipeline.MapOptions{})},
		"in flight 1001": {kid, mapOf("p", "k0", pipeline.MapOptions{MaxInFlight: 1001})},
		"percent 101":    {kid, mapOf("p", "k0", pipeline.MapOptions{ToleratedFailurePercent: 101})},
		"depth 4":        {kid, mapOf("k1", "k0", pipeline.MapOptions{}), mapOf("k2", "k1", pipeline.MapOptions{}), mapOf("k3", "k2", pipeline.MapOptions{}), mapOf("k4", "k3", pipeline.MapOptions{})},
		"cycle":          {mapOf("a", "b", pipeline.MapOptions{}), mapOf("b", "a", pipeline.MapOptions{})},
	} {
		if _, err := pipeline.NewRegistry(ps...); err == nil {
			t.Errorf("%s: registered", name)
		}
	}
	if _, err := pipeline.NewRegistry(kid, mapOf("k1", "k0", pipeline.MapOptions{}), mapOf("k2", "k1", pipeline.MapOptions{}), mapOf("k3", "k2", pipeline.MapOptions{})); err != nil {
		t.Errorf("depth 3 refused: %v", err)
	}
}

// serialWrites is a state store that answers one write at a time
// (DynamoDB Local does) while slow: the creates of the children from
// index stall on, each holding the store until its caller gives up, so
// the fan-out's lease renewal queues behind them; the creates before
// index land at once.
type serialWrites struct {
	mapsStore
	turn  chan struct{} // held through each slow write (a channel: synctest sees a wait on it)
	stall int
	slow  atomic.Bool
}

// wait takes the store's turn; stall holds it until ctx ends.
func (s *serialWrites) wait(ctx context.Context, stall bool) error {
	if !s.slow.Load() {
		return nil
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.turn }()
	if stall {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *serialWrites) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	if p := req.Execution.Parent; p != nil && p.Index >= s.stall {
		if err := s.wait(ctx, true); err != nil {
			return store.Execution{}, false, err
		}
	}
	return s.mapsStore.CreateOrGet(ctx, req)
}

// mapsStore is a state store that keeps map counts, as every provider's does.
type mapsStore interface {
	store.Store
	store.MapStore
}

func (s *serialWrites) Renew(ctx context.Context, k store.Key, owner string, version int64, until time.Time) error {
	if err := s.wait(ctx, false); err != nil {
		return err
	}
	return s.mapsStore.Renew(ctx, k, owner, version, until)
}

// Found by the wiring's fan-out cost test (a map of 200 on DynamoDB Local,
// a 1.5 s lease): on a store answering one write at a time, the parent's
// lease renewal queued behind the fan-out's 25 creates and the lease
// lapsed by the worker's clock. The map step returned without a word
// (it now says lease_lost as any step does). Worse, after the sweep's
// re-dispatch the released children ran before the re-run created their
// pending siblings, so their releases found nothing, and the re-run left
// those siblings PENDING until the parent's sweep look (ChildrenLook, 5
// minutes by default; never without a sweeper). The fan-out now releases,
// once its children all exist, each pending child whose predecessor is
// counted ended: the map completes in one drain, each child run once.
func TestMapFanOutSlowerThanItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		cfg := engine.Config{Lease: 30 * time.Second, SweepGrace: 10 * time.Second, ClockSkewTolerance: 2 * time.Second, Retry: fastRetry}
		st := &serialWrites{mapsStore: c.store.(mapsStore), stall: 3, turn: make(chan struct{}, 1)}
		rt := c.workerOn("w", cfg, nil, st, fanPipelines(pipeline.MapOptions{MaxInFlight: 3}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
		st.slow.Store(true) // children 0-2 created, 3-9 stalled, the renewal behind them
		deliver(rt, c.queue)
		st.slow.Store(false)
		if got := c.get(e.ExecutionID); got.Status != store.Running {
			t.Fatalf("after the slow fan-out the parent is %s (%+v), want RUNNING (its lease lost); logs:\n%s", got.Status, got.Error, c.logs.String())
		}
		lost := 0
		for _, l := range c.logs.Lines() {
			if strings.Contains(l, `"event":"lease_lost"`) && strings.Contains(l, `"phase":"fan_out"`) && strings.Contains(l, e.ExecutionID) {
				lost++
			}
		}
		if lost != 1 {
			t.Fatalf("%d lease_lost events of the fan-out, want 1; logs:\n%s", lost, c.logs.String())
		}
		time.Sleep(cfg.Lease + cfg.ClockSkewTolerance + cfg.SweepGrace)
		if _, err := rt.SweepOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		drainChecked(t, c, rt, e, 0, 0) // not every child exists yet
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 4 6 8 10 12 14 16 18 20]" {
			var kids []string
			for _, k := range c.children(e, 0, 10) {
				kids = append(kids, string(k.Status))
			}
			t.Fatalf("after one drain the parent is %s %+v, its children %v", done.Status, done.Error, kids)
		}
		ranOnce(t, &runs, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	})
}

// A per-item flow: the map is the pipeline's last step (no join) and each
// child ends either with its own result or as a rejected item (a zero):
// rejected children go to the Item Reject Sink, end FAILED with reason
// rejected and no dead letter, and count as rejected, not failed, so a
// map that tolerates no failure still succeeds; its MapResult (the
// parent's result, what an Output would publish) says which were
// rejected.
func TestMapRejectedItemsAreTolerated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		sink := reject.NewMemory()
		kid := pipeline.NewStep("check", func(ctx context.Context, info pipeline.StepInfo, in num) (num, error) {
			if in.N == 0 {
				info.Rejects = &reject.Sink{Publisher: sink}
				return num{}, reject.Reject(ctx, info, in, errors.New("zero is not a payment"))
			}
			return in, nil
		})
		rt := c.worker("w", engine.Config{}, nil,
			pipeline.Pipeline{ID: "p.item", Steps: []pipeline.Step{kid}},
			pipeline.Pipeline{ID: "p.items", Steps: []pipeline.Step{pipeline.Map("items", "p.item", pipeline.MapOptions{MaxInFlight: 2})}})
		e := submitTo(t, rt, "p.items", "k", nums(1, 0, 2, 0))
		drainChecked(t, c, rt, e, 0, 0)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded {
			for i, k := range c.children(done, 0, 4) {
				t.Logf("child %d: %s %+v", i, k.Status, k.Error)
			}
			t.Fatalf("parent %s %+v, want SUCCEEDED (rejects are tolerated)", done.Status, done.Error)
		}
		var res pipeline.MapResult
		p, err := payload.Read(context.Background(), c.payloads, done.Result)
		if err != nil || p.DecodeJSON(&res) != nil {
			t.Fatalf("result: %v", err)
		}
		if res.Total != 4 || res.Succeeded != 2 || res.Rejected != 2 || res.Failed != 0 {
			t.Fatalf("result counts %+v", res)
		}
		for i, el := range res.Elements {
			if el.Rejected != (i%2 == 1) {
				t.Fatalf("element %d rejected=%v", i, el.Rejected)
			}
		}
		for i, k := range c.children(done, 0, 4) {
			if i%2 == 0 {
				continue
			}
			if k.Status != store.Failed || k.DLQPending || k.Error == nil || k.Error.Code != pipeline.CodeItemRejected ||
				k.Error.TerminalReason != store.ReasonRejected || !k.SweepAt.IsZero() {
				t.Fatalf("rejected child %d: %s dlqPending=%v %+v sweepAt=%v", i, k.Status, k.DLQPending, k.Error, k.SweepAt)
			}
		}
		if n := len(c.dlq.published()); n != 0 {
			t.Fatalf("%d dead letters, want none (rejects go to the reject sink)", n)
		}
		if envs := sink.Envelopes(); len(envs) != 2 || envs[0].ErrorCode != "item_rejected" {
			t.Fatalf("reject sink got %+v, want the 2 zeros", envs)
		}
	})
}

// A map that failed beyond its tolerance is re-driven: only its failed
// elements run again (round 1, new child executions; the failed round-0
// children stay as they ended, the succeeded ones are not run again), and
// the join gets every element's output in input order. A round that fails
// again is re-driven as round 2. Rejected items are never run again.
func TestMapRedriveRunsOnlyFailedChildren(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		var healed atomic.Int32 // negatives fail until healed reaches their attempt count
		kid := pipeline.NewStep("double", func(ctx context.Context, info pipeline.StepInfo, in num) (num, error) {
			cnt, _ := runs.LoadOrStore(fmt.Sprint(in.N), new(int))
			*cnt.(*int)++
			switch {
			case in.N == 0:
				return num{}, reject.Reject(ctx, info, in, errors.New("zero"))
			case in.N < 0 && int(healed.Load()) < -in.N:
				return num{}, pipeline.NonRetryable("negative", errors.New("not yet"))
			}
			return num{N: 2 * in.N}, nil
		})
		pipes := fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)
		pipes[0].Steps = []pipeline.Step{kid}
		rt := c.worker("w", engine.Config{}, nil, pipes...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, -2, 3, -4, 0, 5))
		drainChecked(t, c, rt, e, 0, 0)
		got := c.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != pipeline.CodeChildrenFailed {
			t.Fatalf("round 0: %s %+v, want DLQ children_failed", got.Status, got.Error)
		}
		round0 := c.children(got, 0, 6)

		// Re-drive with -2 healed but not -4: round 1 runs the two failed
		// elements only and fails again on -4.
		healed.Store(2)
		if _, err := rt.Redrive(context.Background(), got.Key(), "heal 2", nil); err != nil {
			t.Fatal(err)
		}
		drainChecked(t, c, rt, e, 0, 0)
		got = c.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Children == nil || got.Children.Round != 1 || got.Children.Total != 2 {
			t.Fatalf("round 1: %s %+v, want DLQ after a round of 2", got.Status, got.Children)
		}
		counts, err := rt.ChildCounts(context.Background(), got)
		if err != nil || *counts != (engine.ChildCounts{Total: 6, Succeeded: 4, Failed: 2, Round: 1}) {
			t.Fatalf("round 1 counts %+v, %v", counts, err)
		}

		healed.Store(4)
		if _, err := rt.Redrive(context.Background(), got.Key(), "heal 4", nil); err != nil {
			t.Fatal(err)
		}
		drainChecked(t, c, rt, e, 0, 0)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded || done.Children.Round != 2 || done.Children.Total != 1 {
			t.Fatalf("round 2: %s %+v, want SUCCEEDED after a round of 1", done.Status, done.Children)
		}
		if j := output(t, c, done); fmt.Sprint(j.Outputs) != "[2 -4 6 -8 10]" || fmt.Sprint(j.Failed) != "[4]" || j.Succeeded != 5 {
			t.Fatalf("join got %+v; want every output in order, the rejected zero apart", j)
		}
		ranOnce(t, &runs, 1, 3, 5, 0)
		if n := runsOf(&runs, "-2"); n != 2 {
			t.Errorf("-2 ran %d times, want 2 (round 0, round 1)", n)
		}
		if n := runsOf(&runs, "-4"); n != 3 {
			t.Errorf("-4 ran %d times, want 3 (rounds 0, 1, 2)", n)
		}
		// Round 0's children are as they ended; the later rounds' are new
		// executions of their own.
		for i, k := range c.children(done, 0, 6) {
			if k.Version != round0[i].Version || k.Status != round0[i].Status {
				t.Errorf("round-0 child %d moved: %s v%d, was %s v%d", i, k.Status, k.Version, round0[i].Status, round0[i].Version)
			}
		}
		id, _ := engine.RoundChildID(done.ExecutionID, done.CreateToken, 0, 2, 0)
		if k := c.get(id); k.Status != store.Succeeded || k.Parent == nil || k.Parent.Round != 2 || k.Parent.Element != 3 {
			t.Fatalf("round-2 child: %s %+v; want SUCCEEDED, element 3 of round 2", k.Status, k.Parent)
		}
		counts, _ = rt.ChildCounts(context.Background(), done)
		if *counts != (engine.ChildCounts{Total: 6, Succeeded: 5, Failed: 1, Round: 2}) {
			t.Fatalf("final counts %+v (the rejected zero counts failed)", counts)
		}
	})
}

// A step whose output is over pipeline.MaxOutputBytes fails
// non-retryably with output_too_large (nothing of it stored), once.
func TestStepOutputOverTheLimitFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs atomic.Int32
		huge := pipeline.Step{Name: "huge", Run: func(context.Context, pipeline.StepInfo, payload.Payload) (payload.Payload, error) {
			runs.Add(1)
			return payload.Payload{Encoding: payload.EncodingRaw, ContentType: "application/octet-stream",
				Data: make([]byte, pipeline.MaxOutputBytes+1)}, nil
		}}
		rt := c.worker("w", engine.Config{}, nil, pipeline.Pipeline{ID: "p.huge", Steps: []pipeline.Step{huge}})
		e := submitTo(t, rt, "p.huge", "k", num{N: 1})
		drainChecked(t, c, rt, e, 0, 0)
		got := c.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != pipeline.CodeOutputTooLarge || runs.Load() != 1 {
			t.Fatalf("%s %+v after %d runs; want DLQ output_too_large after one", got.Status, got.Error, runs.Load())
		}
	})
}

// A child whose row is gone while its parent waits (a map that ran longer
// than the retention; here its row's expiry is moved into the past) is
// counted as failed by the parent's sweep look, which releases the next
// sibling: the map ends, its join seeing the element EXPIRED, instead of
// waiting forever for a child that no longer exists.
func TestMapChildGoneIsCountedExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		rt := c.worker("w", engine.Config{}, nil, fanPipelines(pipeline.MapOptions{MaxInFlight: 1, ToleratedFailures: 1}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3))
		deliver(rt, c.queue) // the fan-out: child 0 QUEUED, 1 and 2 PENDING
		parent := c.get(e.ExecutionID)
		kids := c.children(parent, 0, 3)
		gone := kids[0]
		gone.ExpiresAt = time.Now().Add(-time.Second)
		if _, err := c.store.Update(context.Background(), store.Guard{Key: gone.Key(), Version: gone.Version}, gone); err != nil {
			t.Fatal(err)
		}
		untilEnded(t, c, rt, e, 5)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded {
			t.Fatalf("parent %s %+v, want SUCCEEDED (one expired child tolerated)", done.Status, done.Error)
		}
		if j := output(t, c, done); fmt.Sprint(j.Outputs) != "[4 6]" || fmt.Sprint(j.Failed) != "[0]" {
			t.Fatalf("join got %+v, want element 0 failed (expired) and the others' outputs", j)
		}
		if !strings.Contains(c.logs.String(), `"event":"child_expired"`) {
			t.Fatal("no child_expired logged")
		}
	})
}

// A parent woken after its children all ended collects their outcomes
// from their rows even when its count rows are gone by then (found by the
// simulator: a parent re-driven at its map step after the counts expired
// was parked WAITING_CHILDREN again, for children that would never end
// again, until it expired).
func TestMapCollectsAfterItsCountsExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		f := &flakyMaps{Store: c.store, ms: c.store.(store.MapStore)}
		rt := c.workerOn("w", engine.Config{}, nil, f, fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3))
		for range 10 {
			if p := c.get(e.ExecutionID); p.Children != nil && p.Children.Done {
				break
			}
			deliver(rt, c.queue)
		}
		woken := c.get(e.ExecutionID)
		if woken.Status != store.Queued || woken.Children == nil || !woken.Children.Done {
			t.Fatalf("parent %s %+v, want QUEUED after its children", woken.Status, woken.Children)
		}
		f.mu.Lock()
		f.forget = true
		f.mu.Unlock()
		drainChecked(t, c, rt, e, 0, 0)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 4 6]" {
			t.Fatalf("parent %s %+v, want SUCCEEDED with every output", done.Status, done.Children)
		}
	})
}

// A map whose children together run longer than the retention: three
// children one at a time, each napping 1h, under a 2h retention. Today
// the parent kept the expiry it was parked with and expired while it
// waited (and so did the children still PENDING, counted EXPIRED).
// Waiting is not idleness: the parent and its pending children must stay
// while the map runs, and the map succeeds with every output.
func TestMapOutlastsRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		kid := pipeline.NewStep("double", func(_ context.Context, _ pipeline.StepInfo, in num) (num, error) {
			return num{N: 2 * in.N}, nil
		})
		join := fanPipelines(pipeline.MapOptions{}, new(sync.Map))[1].Steps[1]
		pipes := []pipeline.Pipeline{
			{ID: "p.kid", Steps: []pipeline.Step{pipeline.Sleep("nap", time.Hour), kid}},
			{ID: "p.fan", Steps: []pipeline.Step{pipeline.Map("fan", "p.kid", pipeline.MapOptions{MaxInFlight: 1}), join}},
		}
		rt := c.worker("w", engine.Config{ExecutionTTL: 2 * time.Hour}, nil, pipes...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3))
		untilEnded(t, c, rt, e, 100) // 5-minute rounds: 8h 20m at most
		done, err := c.store.Get(context.Background(), e.Key())
		if err != nil {
			t.Fatalf("parent: %v (expired while its map ran)", err)
		}
		if done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 4 6]" {
			t.Fatalf("parent %s %+v %+v, want SUCCEEDED with every output", done.Status, done.Error, done.Children)
		}
	})
}

// A map parent handed back in the middle of its fan-out (a child's
// create failed: QUEUED at the map step, some children created) and
// paused then is not parked PAUSED: a paused row keeps nothing of its
// children alive, so its first children ended and expired while it was
// paused, and the fan-out run after the resume created them again and
// ran them a second time (the simulation, seed 3 on DynamoDB: a child's
// transitions committed twice, a rejected item run again, more children
// in flight than the map's limit). The pause is a request, as for a
// parent waiting for its children: the fan-out and the collect run, and
// the step after the map parks it (here the join ends it). The same when
// the worker running the fan-out again died (its lease lapsed): the pause
// does not park it, the takeover runs the fan-out on.
func TestMapPauseMidFanOutWaitsForTheMap(t *testing.T) {
	for _, died := range []bool{false, true} {
		t.Run(fmt.Sprintf("worker_died=%v", died), func(t *testing.T) { pauseMidFanOut(t, died) })
	}
}

func pauseMidFanOut(t *testing.T, died bool) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		f := &flakyMaps{Store: c.store, ms: c.store.(store.MapStore), failCreate: 2}
		ttl := 2 * time.Hour
		cfg := engine.Config{ExecutionTTL: ttl, FanOutParallel: 1}
		rt := c.workerOn("w", cfg, nil, f, fanPipelines(pipeline.MapOptions{MaxInFlight: 2}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3))
		deliver(rt, c.queue) // the fan-out: the second create fails, the parent is handed back
		row := c.get(e.ExecutionID)
		if row.Status != store.Queued || row.Releases != 1 {
			t.Fatalf("parent %s releases %d, want QUEUED after a failed fan-out", row.Status, row.Releases)
		}
		want := store.Queued
		if died {
			// Another worker claims the fan-out again and dies.
			now := time.Now()
			if _, err := c.store.Claim(context.Background(), store.ClaimRequest{Key: row.Key(), ExpectVersion: row.Version, Owner: "ghost",
				Now: now, DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(30 * time.Second), Attempt: row.Attempt, Releases: row.Releases}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Minute) // its lease lapses
			want = store.Running
		}
		got, changed, err := rt.Pause(context.Background(), e.Key(), pauseOpts("hold the map"))
		if err != nil || !changed || got.Status != want || got.PauseRequestedAt.IsZero() {
			t.Errorf("Pause = %s requested %v changed %v, %v; want a request on the %s row", got.Status, got.PauseRequestedAt, changed, err, want)
		}
		first, _ := engine.ChildID(e.ExecutionID, e.CreateToken, 0, 0)
		for range 20 { // the sweeper finds the first child and runs it
			if c.get(first).Status.Terminal() || c.get(e.ExecutionID).Status.Terminal() {
				break
			}
			time.Sleep(time.Minute)
			if _, err := rt.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			drainChecked(t, c, rt, e, 0, 0)
		}
		if c.get(e.ExecutionID).Status == store.Paused {
			time.Sleep(ttl + time.Hour) // what ended expires
			if _, err := rt.Resume(context.Background(), e.Key(), pauseOpts("")); err != nil {
				t.Fatal(err)
			}
		}
		untilEnded(t, c, rt, e, 50)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 4 6]" {
			t.Fatalf("parent %s %+v, want SUCCEEDED with every output", done.Status, done.Error)
		}
		ranOnce(t, &runs, 1, 2, 3)
	})
}

// A map that failed beyond its tolerance (a child's retry ran an hour
// after its siblings succeeded, so the parent ended an hour after them)
// and is re-driven once its succeeded children's rows expired, its own
// row still there: the re-drive runs only the failed element again (the
// outcomes the map kept say which succeeded, and keep their outputs'
// references), never the succeeded ones, and the join gets every output.
func TestMapRedriveAfterItsChildrenExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		var healed atomic.Bool
		kid := pipeline.NewStep("double", func(_ context.Context, _ pipeline.StepInfo, in num) (num, error) {
			cnt, _ := runs.LoadOrStore(fmt.Sprint(in.N), new(int))
			*cnt.(*int)++
			if in.N < 0 && !healed.Load() {
				return num{}, pipeline.Retryable("negative", errors.New("not yet"))
			}
			return num{N: 2 * in.N}, nil
		})
		kid.Retry = &pipeline.RetryPolicy{MaxRetries: 1, Delay: 50 * time.Minute, Multiplier: 1, MaxDelay: 50 * time.Minute}
		pipes := fanPipelines(pipeline.MapOptions{MaxInFlight: 3}, &runs)
		pipes[0].Steps = []pipeline.Step{kid}
		ttl := 2 * time.Hour
		rt := c.worker("w", engine.Config{ExecutionTTL: ttl}, nil, pipes...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, -2, 3))
		untilEnded(t, c, rt, e, 30)
		failed := c.get(e.ExecutionID)
		if failed.Status != store.DLQ || failed.Error == nil || failed.Error.Code != pipeline.CodeChildrenFailed {
			t.Fatalf("parent %s %+v, want DLQ children_failed", failed.Status, failed.Error)
		}
		kids := c.children(failed, 0, 3)
		if !kids[0].ExpiresAt.Before(failed.ExpiresAt) {
			t.Fatalf("child 0 expires %s, the parent %s: no window", kids[0].ExpiresAt, failed.ExpiresAt)
		}
		time.Sleep(time.Until(kids[0].ExpiresAt) + time.Minute) // the succeeded children expire, the parent stays
		for _, i := range []int{0, 2} {
			if _, err := c.store.Get(context.Background(), kids[i].Key()); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("child %d: %v, want expired", i, err)
			}
		}
		healed.Store(true)
		if _, err := rt.Redrive(context.Background(), failed.Key(), "healed", nil); err != nil {
			t.Fatal(err)
		}
		untilEnded(t, c, rt, e, 30)
		done := c.get(e.ExecutionID)
		if done.Status != store.Succeeded || fmt.Sprint(output(t, c, done).Outputs) != "[2 -4 6]" {
			t.Fatalf("parent %s %+v, want SUCCEEDED with every output", done.Status, done.Error)
		}
		ranOnce(t, &runs, 1, 3)
		if n := runsOf(&runs, "-2"); n != 3 {
			t.Errorf("-2 ran %d times, want 3 (two attempts, then the re-drive's round)", n)
		}
	})
}

// A map parent that dead-lettered in its collect, every child ended (the
// state store failing its reads until the release limit and the retries
// ran out), is re-driven after its children's rows expired, its own row
// still there: its outcomes were never kept, only the children's rows
// held them. Today the re-drive collected the gone children as EXPIRED
// and failed the map (children_failed, the succeeded children listed as
// failures), so that the next re-drive ran them again. The re-drive is
// refused instead (ErrChildrenExpired), naming why; nothing runs.
func TestMapRedriveOfACollectAfterItsChildrenExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		f := &flakyMaps{Store: c.store, ms: c.store.(store.MapStore)}
		ttl := 2 * time.Hour
		cfg := engine.Config{ExecutionTTL: ttl, ReleaseLimit: 1, Retry: pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}}
		rt := c.workerOn("w", cfg, nil, f, fanPipelines(pipeline.MapOptions{MaxInFlight: 3}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3))
		for range 10 {
			if p := c.get(e.ExecutionID); p.Children != nil && p.Children.Done {
				break
			}
			deliver(rt, c.queue)
		}
		f.mu.Lock()
		f.failBatch = strings.ReplaceAll(e.ExecutionID, store.IncarnationSep, "-") + "-" // the children's ids
		f.mu.Unlock()
		for range 50 {
			if c.get(e.ExecutionID).Status.Terminal() {
				break
			}
			deliver(rt, c.queue)
			time.Sleep(5 * time.Minute)
			_, _ = rt.SweepOnce(context.Background()) // its looks fail too
		}
		f.mu.Lock()
		f.failBatch = ""
		f.mu.Unlock()
		failed := c.get(e.ExecutionID)
		if failed.Status != store.DLQ || failed.Children == nil || !failed.Children.Done || failed.Children.Retry {
			t.Fatalf("parent %s %+v %+v, want DLQ in its collect", failed.Status, failed.Error, failed.Children)
		}
		kids := c.children(failed, 0, 3)
		if !kids[0].ExpiresAt.Before(failed.ExpiresAt) {
			t.Fatalf("child 0 expires %s, the parent %s: no window", kids[0].ExpiresAt, failed.ExpiresAt)
		}
		time.Sleep(time.Until(kids[2].ExpiresAt) + time.Minute) // the children expire, the parent stays
		if _, err := c.store.Get(context.Background(), kids[0].Key()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("child 0: %v, want expired", err)
		}
		got, err := rt.Redrive(context.Background(), failed.Key(), "again", nil)
		if !errors.Is(err, engine.ErrChildrenExpired) || got.Version != failed.Version {
			untilEnded(t, c, rt, e, 30)
			done := c.get(e.ExecutionID)
			t.Fatalf("Redrive: %v; the parent then ended %s %+v; want the re-drive refused (ErrChildrenExpired), the row unchanged",
				err, done.Status, done.Error)
		}
		if n := len(c.queue.take()); n != 0 {
			t.Fatalf("%d work items sent by a refused re-drive", n)
		}
		ranOnce(t, &runs, 1, 2, 3)
	})
}

// A map parent that dead-letters in its fan-out after some of its
// children were created and ended (a create failed: handed back; its
// next attempt's worker lost, the last attempt: DLQ worker_lost, no park
// recorded) and is re-driven after those children's rows expired (they
// expire a retention after their end, the parent's row a retention after
// its later one): the re-driven fan-out created the gone children again,
// under the same ids, and ran them a second time. Now such a re-drive,
// more than a retention after the parent's submission, is refused
// (ErrChildrenExpired), the row unchanged and nothing run again.
func TestMapRedriveOfAFanOutAfterItsChildrenExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var runs sync.Map
		f := &flakyMaps{Store: c.store, ms: c.store.(store.MapStore), failCreate: 2}
		cfg := engine.Config{ExecutionTTL: 2 * time.Hour, FanOutParallel: 1,
			Retry: pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}}
		rt := c.workerOn("w", cfg, nil, f, fanPipelines(pipeline.MapOptions{MaxInFlight: 1}, &runs)...)
		e := submitTo(t, rt, "p.fan", "k", nums(1, 2, 3))
		deliver(rt, c.queue) // the fan-out: child 0 created, the second create fails, the parent handed back
		first, _ := engine.ChildID(e.ExecutionID, e.CreateToken, 0, 0)
		for range 5 { // the sweeper sends child 0, which runs; the parent's items are lost
			time.Sleep(time.Minute)
			_, _ = rt.SweepOnce(context.Background())
			for _, m := range c.queue.take() {
				if m.Item.ExecutionID != e.ExecutionID {
					_ = rt.Process(context.Background(), m.Item)
				}
			}
		}
		row := c.get(e.ExecutionID)
		if row.Status != store.Queued || c.get(first).Status != store.Succeeded {
			t.Fatalf("parent %s, child 0 %s; want QUEUED mid-fan-out, child 0 SUCCEEDED", row.Status, c.get(first).Status)
		}
		// A worker claims the fan-out again and dies; the takeover finds
		// the last attempt gone.
		now := time.Now()
		if _, err := c.store.Claim(context.Background(), store.ClaimRequest{Key: row.Key(), ExpectVersion: row.Version, Owner: "ghost",
			Now: now, DueBy: now, TakeoverBy: now, LeaseUntil: now.Add(30 * time.Second), Attempt: row.Attempt, Releases: row.Releases}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Minute)
		_, _ = rt.SweepOnce(context.Background())
		deliver(rt, c.queue)
		failed := c.get(e.ExecutionID)
		if failed.Status != store.DLQ {
			t.Fatalf("parent %s %+v, want DLQ", failed.Status, failed.Error)
		}
		time.Sleep(time.Until(c.get(first).ExpiresAt) + time.Minute) // child 0 expires, the parent stays
		got, err := rt.Redrive(context.Background(), failed.Key(), "again", nil)
		if !errors.Is(err, engine.ErrChildrenExpired) || got.Version != failed.Version {
			untilEnded(t, c, rt, e, 30)
			t.Fatalf("Redrive: %v; want it refused (ErrChildrenExpired), the row unchanged", err)
		}
		if n := len(c.queue.take()); n != 0 {
			t.Fatalf("%d work items sent by a refused re-drive", n)
		}
		ranOnce(t, &runs, 1)
	})
}
