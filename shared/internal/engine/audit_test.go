package engine_test

// Scenario tests of the audit (issue 18): each reproduces what was seen
// from outside, on the provider under test (memory, embedded, DynamoDB on
// the model: QASYNC_ENGINE_PROVIDER).

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

const day = 24 * time.Hour

type order struct {
	Amount int    `json:"amount"`
	Pad    string `json:"pad,omitempty"`
}

type charged struct {
	Charged int `json:"charged"`
}

// runAll delivers work items until none is left (at most n rounds).
func runAll(t *testing.T, rt *engine.Runtime, q *queue) {
	t.Helper()
	for range 20 {
		if len(q.msgs) == 0 {
			return
		}
		deliver(rt, q)
	}
}

// result decodes a SUCCEEDED execution's result into v.
func result(t *testing.T, rt *engine.Runtime, e store.Execution, v any) {
	t.Helper()
	got, p, err := rt.Result(context.Background(), e.Key())
	if err != nil {
		t.Fatalf("Result of %s (%s, error %+v): %v", e.ExecutionID, got.Status, got.Error, err)
	}
	if err := p.DecodeJSON(v); err != nil {
		t.Fatal(err)
	}
}

// Item 1: a key reused after its execution's retention, with another
// body, ran as the old execution: same id, the command step found the old
// effect record and returned {"charged":10}; the charge of 99 was never
// made. Now the reuse is a new execution with its own id and effects.
func TestKeyReusedAfterRetentionRunsAnew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var charges []int
		pay := pipeline.Pipeline{ID: "p.pay", Steps: []pipeline.Step{
			command.Step("charge", command.Spec[order, charged]{}, func(_ context.Context, _ pipeline.StepInfo, in order) (charged, error) {
				mu.Lock()
				defer mu.Unlock()
				charges = append(charges, in.Amount)
				return charged{Charged: in.Amount}, nil
			}),
		}}
		rt := c.worker("w", engine.Config{ExecutionTTL: day, Retry: fastRetry}, nil, pay)
		first := submitTo(t, rt, "p.pay", "order-1", order{Amount: 10})
		runAll(t, rt, c.queue)
		var out charged
		result(t, rt, first, &out)
		if out.Charged != 10 {
			t.Fatalf("first execution charged %d, want 10", out.Charged)
		}
		time.Sleep(day + time.Hour) // its row has expired: the key is free
		second := submitTo(t, rt, "p.pay", "order-1", order{Amount: 99})
		if second.ExecutionID == first.ExecutionID {
			t.Fatalf("the reused key got the old execution's id %s", second.ExecutionID)
		}
		runAll(t, rt, c.queue)
		result(t, rt, second, &out)
		mu.Lock()
		defer mu.Unlock()
		if out.Charged != 99 || len(charges) != 2 || charges[1] != 99 {
			t.Fatalf("the reused key's execution returned a charge of %d (charges made: %v); want its own charge of 99", out.Charged, charges)
		}
		if _, err := c.store.Get(context.Background(), first.Key()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the old execution's id still reads: %v", err)
		}
	})
}

// Item 3: a reused key's execution that dead-lettered at the same step
// and attempt had its dead letter keyed as the old one's: nothing new was
// recorded, no created=true alert, the list still showed the old failure.
func TestReusedKeyDeadLettersAnew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		refuse := pipeline.Pipeline{ID: "p.refuse", Steps: []pipeline.Step{
			pipeline.NewStep("check", func(context.Context, pipeline.StepInfo, order) (order, error) {
				return order{}, pipeline.NonRetryable("refused", errors.New("no"))
			}),
		}}
		rt := c.worker("w", engine.Config{ExecutionTTL: day, Retry: fastRetry}, nil, refuse)
		records := memory.NewDeadLetters(nil)
		record := func(e store.Execution) bool {
			t.Helper()
			envs := c.dlq.published()
			env := envs[len(envs)-1]
			if env.ExecutionID != e.ExecutionID {
				t.Fatalf("the last dead letter is %s's, want %s's", env.ExecutionID, e.ExecutionID)
			}
			created, err := records.Put(context.Background(), deadletter.ExecutionRecord(env, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			return created
		}
		first := submitTo(t, rt, "p.refuse", "k", order{Amount: 1})
		runAll(t, rt, c.queue)
		if !record(first) {
			t.Fatal("the first dead letter was not recorded")
		}
		time.Sleep(day + time.Hour)
		second := submitTo(t, rt, "p.refuse", "k", order{Amount: 1})
		runAll(t, rt, c.queue)
		if got := c.get(second.ExecutionID); got.Status != store.DLQ {
			t.Fatalf("second execution %s, want DLQ", got.Status)
		}
		if !record(second) {
			t.Fatal("the reused key's dead letter has the old record's id: nothing new recorded, no alert")
		}
	})
}

// Item 4: a repeated delivery of an old execution's await completion (its
// token) completed the await of the execution a reused key made: an
// approval for order A completed order B.
func TestStaleResumeTokenCompletesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		type handed struct{ exec, await, token string }
		var mu sync.Mutex
		var tokens []handed
		approve := pipeline.Pipeline{ID: "p.approve", Steps: []pipeline.Step{
			await.Step("approve", await.Spec{}, func(_ context.Context, req await.Request) error {
				mu.Lock()
				defer mu.Unlock()
				tokens = append(tokens, handed{req.Info.ExecutionID, req.AwaitID, req.Token})
				return nil
			}),
		}}
		rt := c.worker("w", engine.Config{ExecutionTTL: day, Retry: fastRetry, AwaitSecret: "s"}, nil, approve)
		ok := payload.Raw("application/json", []byte(`{"approved":true}`))
		a := submitTo(t, rt, "p.approve", "order", order{Amount: 1})
		runAll(t, rt, c.queue)
		ta := tokens[0]
		if _, _, err := rt.CompleteAwait(context.Background(), ta.exec, ta.await, ta.token, ok); err != nil {
			t.Fatal(err)
		}
		runAll(t, rt, c.queue)
		if got := c.get(a.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("A %s, want SUCCEEDED", got.Status)
		}
		time.Sleep(day + time.Hour)
		b := submitTo(t, rt, "p.approve", "order", order{Amount: 2})
		runAll(t, rt, c.queue)
		// A's approval delivered again: it must complete nothing.
		if got, _, err := rt.CompleteAwait(context.Background(), ta.exec, ta.await, ta.token, ok); err == nil {
			t.Fatalf("A's token completed an await of %s (%s): an approval for one order completed another", got.ExecutionID, got.Status)
		}
		if got := c.get(b.ExecutionID); got.Status != store.WaitingExternal {
			t.Fatalf("B %s after A's token, want WAITING_EXTERNAL", got.Status)
		}
		tb := tokens[1]
		if _, dup, err := rt.CompleteAwait(context.Background(), tb.exec, tb.await, tb.token, ok); err != nil || dup {
			t.Fatalf("B's own token: dup %v, %v", dup, err)
		}
	})
}

// Item 5: a retry delay longer than the retention (a step's WithRetry, or
// retry-max-delay) was accepted; the row waiting for the retry expired
// before it came and the execution vanished. Such a configuration is now
// refused at startup, and a row waiting for a retry is kept a retention
// past its retry time, however late the worker comes.
func TestRetryBeyondRetentionRefused(t *testing.T) {
	c := newCluster(t)
	long := pipeline.RetryPolicy{MaxRetries: 2, Delay: time.Hour, Multiplier: 4, MaxDelay: 2 * day}
	reg, _ := pipeline.NewRegistry(pipeline.Pipeline{ID: "p.long", Steps: []pipeline.Step{appendStep("a")}})
	_, err := engine.New(engine.Config{ExecutionTTL: day, Retry: long}, engine.Deps{Registry: reg, Store: c.store, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq})
	if err == nil || !strings.Contains(err.Error(), "pipeline.orchestrator.retry-max-delay") {
		t.Fatalf("a default retry delay of 2 days with a 1-day retention: %v, want a refusal naming the key", err)
	}
	reg, _ = pipeline.NewRegistry(pipeline.Pipeline{ID: "p.long", Steps: []pipeline.Step{
		pipeline.NewStep("a", func(context.Context, pipeline.StepInfo, order) (order, error) { return order{}, nil }, pipeline.WithRetry(long)),
	}})
	_, err = engine.New(engine.Config{ExecutionTTL: day}, engine.Deps{Registry: reg, Store: c.store, Payloads: c.payloads, Dispatcher: c.queue, DeadLetter: c.dlq})
	if err == nil || !strings.Contains(err.Error(), "step a") || !strings.Contains(err.Error(), "execution-ttl-days") {
		t.Fatalf("a step retrying 2 days later with a 1-day retention: %v, want a refusal naming the step and the retention", err)
	}
}

func TestRetryWaitOutlivesTheRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		policy := pipeline.RetryPolicy{MaxRetries: 1, Delay: 23 * time.Hour, Multiplier: 1, MaxDelay: 23 * time.Hour}
		failOnce := pipeline.Pipeline{ID: "p.slow", Steps: []pipeline.Step{
			pipeline.NewStep("a", func(_ context.Context, info pipeline.StepInfo, in order) (order, error) {
				if info.Attempt == 1 {
					return order{}, pipeline.Retryable("busy", errors.New("later"))
				}
				return in, nil
			}, pipeline.WithRetry(policy)),
		}}
		rt := c.worker("w", engine.Config{ExecutionTTL: day}, nil, failOnce)
		e := submitTo(t, rt, "p.slow", "k", order{Amount: 1})
		deliver(rt, c.queue)
		if got := c.get(e.ExecutionID); got.Status != store.WaitRetry {
			t.Fatalf("%s, want WAIT_RETRY", got.Status)
		}
		retry := c.queue.take() // the retry's item, delayed
		// The worker comes late: well past a retention after the failure.
		time.Sleep(day + 6*time.Hour)
		for _, m := range retry {
			_ = rt.Process(context.Background(), m.Item)
		}
		runAll(t, rt, c.queue)
		if got, err := c.store.Get(context.Background(), e.Key()); err != nil || got.Status != store.Succeeded {
			t.Fatalf("the row waiting for its retry: %+v, %v; want it kept and SUCCEEDED", got.Status, err)
		}
	})
}

// Item 6: a step's checkpoint (its input, a previous step's output) was
// written with a fixed expiry, never extended when the row was: three
// re-drives of a dead letter, each within the row's retention, ended DLQ
// payload_unreadable, never runnable again.
func TestCheckpointOutlivesRedrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var read []int
		check := pipeline.Pipeline{ID: "p.check", Steps: []pipeline.Step{
			pipeline.NewStep("check", func(_ context.Context, info pipeline.StepInfo, in order) (order, error) {
				mu.Lock()
				read = append(read, in.Amount)
				mu.Unlock()
				if info.Attempt <= 3 {
					return order{}, pipeline.NonRetryable("refused", errors.New("until an operator re-drives"))
				}
				return in, nil
			}),
		}}
		rt := c.worker("w", engine.Config{ExecutionTTL: day, Retry: fastRetry}, nil, check)
		e := submitTo(t, rt, "p.check", "k", order{Amount: 7, Pad: strings.Repeat("x", 1000)}) // stored, not inline
		runAll(t, rt, c.queue)
		for i := range 3 {
			time.Sleep(day - 2*time.Hour) // each re-drive within the row's retention
			if _, err := rt.Redrive(context.Background(), e.Key(), "again", nil); err != nil {
				t.Fatalf("re-drive %d: %v", i+1, err)
			}
			runAll(t, rt, c.queue)
		}
		got := c.get(e.ExecutionID)
		if got.Status != store.Succeeded {
			t.Fatalf("after three re-drives: %s %+v, want SUCCEEDED (the input readable every time)", got.Status, got.Error)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(read) != 4 || read[3] != 7 {
			t.Fatalf("the step read %v, want its input four times", read)
		}
	})
}

// Item 6, the await case: an await whose timeout equals the retention,
// timed out and retried twice: the step's checkpoint (the previous step's
// output) had expired by the second retry.
func TestAwaitRetriedAtItsRetentionKeepsItsCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		var mu sync.Mutex
		var waits int
		flow := pipeline.Pipeline{ID: "p.wait", Steps: []pipeline.Step{
			pipeline.NewStep("a", func(_ context.Context, _ pipeline.StepInfo, in order) (order, error) {
				in.Pad = strings.Repeat("y", 1000) // a stored checkpoint
				return in, nil
			}),
			await.Step("approve", await.Spec{Timeout: day}, func(context.Context, await.Request) error {
				mu.Lock()
				waits++
				mu.Unlock()
				return nil
			}, pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 3, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second})),
		}}
		rt := c.worker("w", engine.Config{ExecutionTTL: day, AwaitSecret: "s", SweepGrace: time.Second}, nil, flow)
		e := submitTo(t, rt, "p.wait", "k", order{Amount: 1})
		runAll(t, rt, c.queue)
		for range 3 {
			time.Sleep(day + time.Minute)
			if _, err := rt.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second) // the retry's delay
			runAll(t, rt, c.queue)
		}
		got := c.get(e.ExecutionID)
		mu.Lock()
		defer mu.Unlock()
		if got.Status != store.WaitingExternal || waits != 4 {
			t.Fatalf("after three timeouts: %s %+v, %d waits; want the fourth await waiting (its input readable)", got.Status, got.Error, waits)
		}
	})
}

// Item 10: the sweeper's count of re-dispatches was never reset by
// progress, so the wait for a work item lost late in an execution's life
// grew from a grace to 15 minutes. After progress (the claim that came
// through), a lost item is found within a lease, the tolerance and the
// grace of the claim, as on any execution, whatever came before.
func TestLostItemAfterProgressIsSweptAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		grace := 10 * time.Second
		rt := c.worker("w", engine.Config{SweepGrace: grace, ChainMaxSteps: 1, Retry: fastRetry}, nil, threeSteps())
		e := submitTo(t, rt, "p.three", "k", map[string]any{"path": []string{}})
		// Its first item is lost again and again: the sweeper re-dispatches
		// it, spacing its looks (grace x 2^n).
		for range 5 {
			c.queue.take()
			time.Sleep(20 * time.Minute)
			if _, err := rt.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.get(e.ExecutionID); got.Sweeps < 4 {
			t.Fatalf("sweeps %d after five lost items, want at least 4", got.Sweeps)
		}
		deliver(rt, c.queue)                            // step a commits and hands b over
		bound := 30*time.Second + 2*time.Second + grace // the default lease and tolerance, the grace
		if got := c.get(e.ExecutionID); got.StepIndex != 1 || got.Sweeps != 0 || got.SweepAt.After(time.Now().Add(bound)) {
			t.Fatalf("after progress: step %d, sweeps %d, next look in %s; want step 1, no sweeps counted, a look within %s",
				got.StepIndex, got.Sweeps, got.SweepAt.Sub(time.Now()), bound)
		}
		c.queue.take() // b's item is lost
		time.Sleep(bound + time.Second)
		res, err := rt.SweepOnce(context.Background())
		if err != nil || res.Redispatched != 1 {
			t.Fatalf("a sweep a grace after the loss re-dispatched %d (%v), want 1", res.Redispatched, err)
		}
	})
}

// countingPayloads counts the parts written, and keeps the set of those
// written and not deleted since.
type countingPayloads struct {
	payload.Store
	mu   sync.Mutex
	put  int
	kept map[string]bool
}

func (c *countingPayloads) PutPart(ctx context.Context, p payload.Part) error {
	c.mu.Lock()
	c.put++
	if c.kept == nil {
		c.kept = map[string]bool{}
	}
	c.kept[p.PayloadID+"/"+p.Name] = true
	c.mu.Unlock()
	return c.Store.PutPart(ctx, p)
}

func (c *countingPayloads) DeletePart(ctx context.Context, id, name string) error {
	c.mu.Lock()
	delete(c.kept, id+"/"+name)
	c.mu.Unlock()
	return c.Store.DeletePart(ctx, id, name)
}

func (c *countingPayloads) stored() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.kept)
}

// missOnce hides the key's live row from one Get: a concurrent submit
// that created it between a precheck and the create.
type missOnce struct {
	store.Store
	mu   sync.Mutex
	miss bool
}

func (m *missOnce) Get(ctx context.Context, k store.Key) (store.Execution, error) {
	m.mu.Lock()
	miss := m.miss
	m.miss = false
	m.mu.Unlock()
	if miss {
		return store.Execution{}, store.ErrNotFound
	}
	return m.Store.Get(ctx, k)
}

// Item 12: a refused submit stored data: 20 submits with one key and
// different 6 MiB bodies (each 422) grew the store by their bodies for a
// retention. A refused request now stores nothing: the key's live row is
// looked at before a stored input is written, and a create that loses
// the key to another request deletes what it wrote.
func TestRefusedSubmitStoresNothing(t *testing.T) {
	c := newCluster(t)
	cp := &countingPayloads{Store: c.payloads}
	ms := &missOnce{Store: c.store}
	c.payloads, c.store = cp, ms
	rt := c.worker("w", engine.Config{Retry: fastRetry}, nil, threeSteps())
	big := func(n int) map[string]any { return map[string]any{"pad": strings.Repeat("z", 300*1024+n)} }
	submitTo(t, rt, "p.three", "k", big(0))
	written := cp.put
	for i := range 20 {
		in, _ := payload.JSON(big(i + 1))
		if _, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.three", IdempotencyKey: "k", Input: in}); !errors.Is(err, store.ErrKeyMismatch) {
			t.Fatalf("submit %d with the key and another body: %v, want ErrKeyMismatch", i, err)
		}
	}
	if cp.put != written {
		t.Fatalf("20 refused submits wrote %d payload parts, want none", cp.put-written)
	}
	// The race: the key's row appears between the look and the create.
	kept := cp.stored()
	ms.mu.Lock()
	ms.miss = true
	ms.mu.Unlock()
	in, _ := payload.JSON(big(99))
	if _, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "t1", PipelineID: "p.three", IdempotencyKey: "k", Input: in}); !errors.Is(err, store.ErrKeyMismatch) {
		t.Fatalf("the racing submit: %v, want ErrKeyMismatch", err)
	}
	if cp.put == written {
		t.Fatal("the racing submit wrote nothing: the test did not race")
	}
	if got := cp.stored(); got != kept {
		t.Fatalf("the refused racing submit left %d payload parts behind, want none", got-kept)
	}
}

// failCommits fails every commit (Update) while on, as a full disk does.
type failCommits struct {
	store.Store
	mu sync.Mutex
	on bool
}

func (f *failCommits) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	f.mu.Lock()
	on := f.on
	f.mu.Unlock()
	if on {
		return store.Execution{}, errors.New("write: no space left on device")
	}
	return f.Store.Update(ctx, g, next)
}

// Item 7: on the embedded store, a RUNNING row whose lease lapsed inside
// a live process (its commit failed for good, a full disk) was never
// taken over: the sweeper's re-dispatch wrote a queue entry, and the
// sweeper's own next write to the row (the reschedule) deleted it; six
// re-dispatches in ten minutes left nothing.
func TestLapsedLeaseInALiveProcessIsTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, err := embedded.Open(t.TempDir(), embedded.Options{NoControl: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var rt *engine.Runtime
		disp := db.NewDispatcher(func(ctx context.Context, item dispatch.WorkItem) error { return rt.Process(ctx, item) }, embedded.DispatcherOptions{})
		st := &failCommits{Store: db.State(nil)}
		reg, _ := pipeline.NewRegistry(threeSteps())
		rt, err = engine.New(engine.Config{WorkerID: "w", Lease: 30 * time.Second, SweepGrace: 10 * time.Second, ChainMaxSteps: 1, Retry: fastRetry},
			engine.Deps{Registry: reg, Store: st, Payloads: db.Payloads(nil), Dispatcher: disp, DeadLetter: db.DeadLetters(nil)})
		if err != nil {
			t.Fatal(err)
		}
		e := submitTo(t, rt, "p.three", "k", map[string]any{"path": []string{}})
		st.mu.Lock()
		st.on = true
		st.mu.Unlock()
		if !disp.DeliverOne() {
			t.Fatal("nothing to deliver")
		}
		st.mu.Lock()
		st.on = false
		st.mu.Unlock()
		if got, _ := db.State(nil).Get(context.Background(), e.Key()); got.Status != store.Running {
			t.Fatalf("after the failed commit: %s, want RUNNING under a lease nobody renews", got.Status)
		}
		for range 6 {
			time.Sleep(time.Minute)
			if _, err := rt.SweepOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			for disp.DeliverOne() {
			}
		}
		got, _ := db.State(nil).Get(context.Background(), e.Key())
		if got.Status != store.Succeeded {
			t.Fatalf("six sweeps later: %s at step %d (sweeps %d); want taken over and SUCCEEDED", got.Status, got.StepIndex, got.Sweeps)
		}
	})
}

// Found by the long simulation (seed 20261202, 100,000 executions over
// 730 virtual days, memory): an execution whose first work items were lost
// again and again was claimed at last, and the claiming worker froze. The
// claim left the sweeper's next look where the re-dispatches had spaced it
// (grace x 2^n, up to 15 minutes) instead of a lease, the tolerance and
// the grace after the claim, so the takeover came minutes late. A claim
// after re-dispatches pulls the look in and resets their count.
func TestTakeoverAfterRedispatchesIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		cfg := engine.Config{Lease: 30 * time.Second, SweepGrace: 10 * time.Second, ClockSkewTolerance: 2 * time.Second, ChainMaxSteps: 1, Retry: fastRetry}
		release := make(chan struct{})
		defer func() { close(release); synctest.Wait() }() // the frozen worker's step ends with the test
		hang := pipeline.Pipeline{ID: "p.hang", Steps: []pipeline.Step{
			pipeline.NewStep("hang", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
				if info.Attempt == 1 {
					<-release // the first worker freezes here: no commit, no renewal
				}
				return in, nil
			}),
		}}
		live := c.worker("w2", cfg, nil, hang)
		frozen := c.workerOn("w1", cfg, nil, noRenewals{c.store}, hang)
		e := submitTo(t, live, "p.hang", "k", map[string]any{})
		items := loseFiveItems(t, c, live, e)
		go func() { _ = frozen.Process(context.Background(), items[0].Item) }()
		synctest.Wait()
		claimed := c.get(e.ExecutionID)
		if claimed.Status != store.Running || claimed.LeaseOwner != "w1" {
			t.Fatalf("after the delivery: %s held by %q, want RUNNING by w1", claimed.Status, claimed.LeaseOwner)
		}
		expectPromptTakeover(t, c, live, cfg, e)
	})
}

// loseFiveItems loses e's work items five times, each re-dispatched by a
// sweep 20 minutes later (the sweeper spaces its looks out), and returns
// the last re-dispatch's item.
func loseFiveItems(t *testing.T, c *cluster, live *engine.Runtime, e store.Execution) []dispatch.Message {
	t.Helper()
	for range 5 {
		c.queue.take()
		time.Sleep(20 * time.Minute)
		if _, err := live.SweepOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.get(e.ExecutionID); got.Sweeps < 4 {
		t.Fatalf("sweeps %d after five lost items, want at least 4", got.Sweeps)
	}
	items := c.queue.take()
	if len(items) != 1 {
		t.Fatalf("%d work items, want the last re-dispatch's", len(items))
	}
	return items
}

// expectPromptTakeover: once the lease of a claim lapses, a sweep a
// lease, the tolerance and the grace after the claim re-dispatches e, and
// live takes it over to SUCCEEDED at attempt 2.
func expectPromptTakeover(t *testing.T, c *cluster, live *engine.Runtime, cfg engine.Config, e store.Execution) {
	t.Helper()
	wait := cfg.Lease + cfg.ClockSkewTolerance + cfg.SweepGrace + time.Second
	time.Sleep(wait)
	res, err := live.SweepOnce(context.Background())
	if err != nil || res.Redispatched != 1 {
		got := c.get(e.ExecutionID)
		t.Fatalf("a sweep %s after the claim re-dispatched %d (%v), want 1: next look in %s, %d sweeps counted",
			wait, res.Redispatched, err, got.SweepAt.Sub(time.Now()), got.Sweeps)
	}
	deliver(live, c.queue)
	if got := c.get(e.ExecutionID); got.Status != store.Succeeded || got.Attempt != 2 {
		t.Fatalf("after the takeover: %s at attempt %d, want SUCCEEDED at 2", got.Status, got.Attempt)
	}
}

// noRenewals is a store on which lease renewals fail (a frozen worker's).
type noRenewals struct{ store.Store }

func (noRenewals) Renew(context.Context, store.Key, string, int64, time.Time) error {
	return store.ErrUnavailable
}

// TestHungRenewalCancelsTheStepAtItsLease: found by the long simulation
// (seed 20261202, 10,000 executions over 73 virtual days, memory): a
// worker cut off from its store (its renewal hangs, the call never
// answers) kept running a slow command step past its lease; another
// worker took the execution over, found no charge and charged, and the
// first then charged too. The step's context now ends with ErrLeaseLost
// when the lease lapses by the worker's clock, whether or not a renewal
// answers, before any other worker may take it over (they wait the
// clock-skew tolerance beyond the lapse).
func TestHungRenewalCancelsTheStepAtItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		cfg := engine.Config{Lease: 30 * time.Second, SweepGrace: 10 * time.Second, ClockSkewTolerance: 2 * time.Second, ChainMaxSteps: 1, Retry: fastRetry}
		hung := make(chan struct{})
		defer func() { close(hung); synctest.Wait() }() // the renewals answer with the test's end
		// The step's goroutine writes these, the test reads them.
		var mu sync.Mutex
		var claimedAt, cancelledAt time.Time
		var cause error
		charged := 0
		slow := pipeline.Pipeline{ID: "p.slow", Steps: []pipeline.Step{
			pipeline.NewStep("charge", func(ctx context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
				if info.Attempt == 1 {
					mu.Lock()
					claimedAt = time.Now()
					mu.Unlock()
					select {
					case <-time.After(4 * cfg.Lease): // a slow downstream, then the charge
					case <-ctx.Done():
						mu.Lock()
						cancelledAt, cause = time.Now(), context.Cause(ctx)
						mu.Unlock()
						return nil, ctx.Err()
					}
				}
				mu.Lock()
				charged++
				mu.Unlock()
				return in, nil
			}),
		}}
		live := c.worker("w2", cfg, nil, slow)
		cut := c.workerOn("w1", cfg, nil, hungRenewals{c.store, hung}, slow)
		e := submitTo(t, live, "p.slow", "k", map[string]any{})
		items := c.queue.take()
		go func() { _ = cut.Process(context.Background(), items[0].Item) }()
		time.Sleep(cfg.Lease + cfg.ClockSkewTolerance + cfg.SweepGrace + time.Second)
		mu.Lock()
		claimed, cancelled, why := claimedAt, cancelledAt, cause
		mu.Unlock()
		if why == nil {
			t.Fatalf("the step still runs %s after its claim though its lease lapsed (renewals hang)", time.Since(claimed))
		}
		if !errors.Is(why, engine.ErrLeaseLost) || cancelled.Sub(claimed) > cfg.Lease {
			t.Fatalf("the step was cancelled %s after its claim with %v, want ErrLeaseLost within the lease (%s)", cancelled.Sub(claimed), why, cfg.Lease)
		}
		if _, err := live.SweepOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		deliver(live, c.queue)
		time.Sleep(4 * cfg.Lease)
		mu.Lock()
		n := charged
		mu.Unlock()
		if got := c.get(e.ExecutionID); got.Status != store.Succeeded || n != 1 {
			t.Fatalf("after the takeover: %s, charged %d times; want SUCCEEDED, charged once", got.Status, n)
		}
	})
}

// hungRenewals is a store whose lease renewals never answer until hung
// closes, whatever their context (a connection that hangs).
type hungRenewals struct {
	store.Store
	hung chan struct{}
}

func (h hungRenewals) Renew(context.Context, store.Key, string, int64, time.Time) error {
	<-h.hung
	return store.ErrUnavailable
}

// TestClaimAnswerLostAfterRedispatchesIsPrompt: found by the long
// simulation (seed 20261202, 100,000 executions over 730 virtual days,
// memory, day 239): a claim that came through the sweeper's re-dispatches
// landed but its answer was lost, so its worker never pulled the
// sweeper's look in (TestTakeoverAfterRedispatchesIsPrompt's fix ran after
// the answer); the next re-dispatches were lost too and the lapsed lease
// waited ten minutes. The claim now moves the look in its own write.
func TestClaimAnswerLostAfterRedispatchesIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		cfg := engine.Config{Lease: 30 * time.Second, SweepGrace: 10 * time.Second, ClockSkewTolerance: 2 * time.Second, ChainMaxSteps: 1, Retry: fastRetry}
		p := pipeline.Pipeline{ID: "p.one", Steps: []pipeline.Step{
			pipeline.NewStep("one", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
				return in, nil
			}),
		}}
		live := c.worker("w2", cfg, nil, p)
		lost := c.workerOn("w1", cfg, nil, claimAnswerLost{c.store}, p)
		e := submitTo(t, live, "p.one", "k", map[string]any{})
		items := loseFiveItems(t, c, live, e)
		if err := lost.Process(context.Background(), items[0].Item); err == nil {
			t.Fatal("the claim's answer was lost, yet Process reported no error")
		}
		claimed := c.get(e.ExecutionID)
		if claimed.Status != store.Running || claimed.LeaseOwner != "w1" {
			t.Fatalf("after the delivery: %s held by %q, want RUNNING by w1 (the claim landed)", claimed.Status, claimed.LeaseOwner)
		}
		expectPromptTakeover(t, c, live, cfg, e)
	})
}

// claimAnswerLost is a store whose claims land and answer an error (the
// answer lost on the way back).
type claimAnswerLost struct{ store.Store }

func (s claimAnswerLost) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	if _, err := s.Store.Claim(ctx, req); err != nil {
		return store.Execution{}, err
	}
	return store.Execution{}, store.ErrUnavailable
}
