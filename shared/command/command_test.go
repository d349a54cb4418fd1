package command_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

type charge struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

type receipt struct {
	PaymentID string `json:"paymentId"`
}

// provider counts charges per order.
type provider struct {
	mu      sync.Mutex
	charges map[string]int
	fail    error
}

func (p *provider) charge(_ context.Context, _ pipeline.StepInfo, c charge) (receipt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return receipt{}, p.fail
	}
	if p.charges == nil {
		p.charges = map[string]int{}
	}
	p.charges[c.OrderID]++
	return receipt{PaymentID: fmt.Sprintf("pay-%s-%d", c.OrderID, p.charges[c.OrderID])}, nil
}

func (p *provider) count(order string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges[order]
}

func byOrder(c charge) string { return c.OrderID }

func info(log effect.Log, execID string, fencing int64) pipeline.StepInfo {
	return pipeline.StepInfo{ExecutionID: execID, TenantID: "acme", PipelineID: "shop.pay", StepName: "charge", StepIndex: 1,
		Attempt: int(fencing), TransitionKey: fmt.Sprintf("%s:1:%d", execID, fencing), FencingToken: fencing,
		IdempotencyKey: "acme:" + execID + ":1", Effects: log, ExpiresAt: time.Now().Add(time.Hour)}
}

func input(t *testing.T, order string) payload.Payload {
	t.Helper()
	p, err := payload.JSON(charge{OrderID: order, Cents: 1200})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func code(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	c, _, retryable := pipeline.Classify(err)
	return c, retryable
}

func record(t *testing.T, log effect.Log, order string) effect.Record {
	t.Helper()
	r, err := log.Get(context.Background(), command.RecordID("acme", "shop.pay/charge", order))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seed stores a record for order in state with an earlier run of step 1
// of exec-1 (fencing 3) as its dispatcher.
func seed(t *testing.T, log effect.Log, order string, state effect.State, dispatcherExec string) {
	t.Helper()
	ctx := context.Background()
	r, _, err := log.CreateOrGet(ctx, effect.Record{CommandID: command.RecordID("acme", "shop.pay/charge", order), State: effect.Pending})
	if err != nil {
		t.Fatal(err)
	}
	r.State, r.Dispatches = state, 1
	r.Dispatcher = effect.Dispatcher{TenantID: "acme", ExecutionID: dispatcherExec, StepIndex: 1, TransitionKey: dispatcherExec + ":1:3", FencingToken: 3}
	if _, err := log.Transition(ctx, 1, r); err != nil {
		t.Fatal(err)
	}
}

func TestFirstRunDispatchesAndRecords(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
	out, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Data) != `{"paymentId":"pay-o-1-1"}` || p.count("o-1") != 1 {
		t.Fatalf("output %s after %d charges", out.Data, p.count("o-1"))
	}
	r := record(t, log, "o-1")
	if r.State != effect.Succeeded || string(r.Output.Data) != string(out.Data) || r.Dispatches != 1 ||
		r.Dispatcher.TransitionKey != "exec-1:1:5" || r.Dispatcher.FencingToken != 5 || r.Version != 3 || r.ExpiresAt.IsZero() {
		t.Fatalf("record %+v", r)
	}
}

func TestReplayReturnsRecordedOutputWithoutCalling(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
	first, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1"))
	if err != nil {
		t.Fatal(err)
	}
	// The same step again (a crash before the commit), then another
	// execution with the same order id (a duplicate submission).
	for _, in := range []pipeline.StepInfo{info(log, "exec-1", 7), info(log, "exec-2", 2)} {
		out, err := step.Run(t.Context(), in, input(t, "o-1"))
		if err != nil || string(out.Data) != string(first.Data) {
			t.Fatalf("replay by %s: %s, %v; want %s", in.TransitionKey, out.Data, err, first.Data)
		}
	}
	if n := p.count("o-1"); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func TestFailPolicyRefusesReRun(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder, Policy: command.Fail}, p.charge)
	if _, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1")); err != nil {
		t.Fatal(err)
	}
	_, err := step.Run(t.Context(), info(log, "exec-2", 2), input(t, "o-1"))
	if c, retryable := code(err); c != command.CodeDuplicate || retryable {
		t.Fatalf("re-run: %v (code %s, retryable %v), want non-retryable %s", err, c, retryable, command.CodeDuplicate)
	}
	if p.count("o-1") != 1 {
		t.Fatalf("%d charges", p.count("o-1"))
	}
}

func TestDispatchingWithoutReconcileBecomesAmbiguous(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	seed(t, log, "o-1", effect.Dispatching, "exec-1")
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
	for range 2 { // and it stays so
		_, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1"))
		if c, retryable := code(err); c != command.CodeAmbiguous || retryable {
			t.Fatalf("run: %v (code %s, retryable %v), want non-retryable %s", err, c, retryable, command.CodeAmbiguous)
		}
		if !strings.Contains(err.Error(), "exec-1:1:3") {
			t.Fatalf("error does not name the dispatching run: %v", err)
		}
	}
	if r := record(t, log, "o-1"); r.State != effect.Ambiguous || r.Error == nil || r.Error.Code != command.CodeAmbiguous || r.Dispatcher.FencingToken != 3 {
		t.Fatalf("record %+v", r)
	}
	if p.count("o-1") != 0 {
		t.Fatal("the side effect was called")
	}
}

func TestDispatchingWithReconcile(t *testing.T) {
	for _, tc := range []struct {
		name      string
		state     effect.State
		done      bool
		wantOut   string
		wantCalls int
	}{
		{"found", effect.Dispatching, true, `{"paymentId":"pay-found"}`, 0},
		{"not done", effect.Dispatching, false, `{"paymentId":"pay-o-1-1"}`, 1},
		{"ambiguous found", effect.Ambiguous, true, `{"paymentId":"pay-found"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, p := memory.NewEffects(nil), &provider{}
			seed(t, log, "o-1", tc.state, "exec-1")
			var asked atomic.Int32
			step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder,
				Reconcile: func(_ context.Context, _ pipeline.StepInfo, c charge) (receipt, bool, error) {
					asked.Add(1)
					if tc.done {
						return receipt{PaymentID: "pay-found"}, true, nil
					}
					return receipt{}, false, nil
				}}, p.charge)
			out, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1"))
			if err != nil || string(out.Data) != tc.wantOut || asked.Load() != 1 || p.count("o-1") != tc.wantCalls {
				t.Fatalf("out %s, err %v, reconciled %d times, %d charges", out.Data, err, asked.Load(), p.count("o-1"))
			}
			r := record(t, log, "o-1")
			if r.State != effect.Succeeded || string(r.Output.Data) != tc.wantOut {
				t.Fatalf("record %+v", r)
			}
			again, err := step.Run(t.Context(), info(log, "exec-1", 6), input(t, "o-1"))
			if err != nil || string(again.Data) != tc.wantOut || asked.Load() != 1 {
				t.Fatalf("replay: %s, %v (reconciled %d times)", again.Data, err, asked.Load())
			}
		})
	}
}

func TestReconcileErrorLeavesRecord(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	seed(t, log, "o-1", effect.Dispatching, "exec-1")
	boom := errors.New("provider unreachable")
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder,
		Reconcile: func(context.Context, pipeline.StepInfo, charge) (receipt, bool, error) { return receipt{}, false, boom }}, p.charge)
	if _, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1")); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if r := record(t, log, "o-1"); r.State != effect.Dispatching || p.count("o-1") != 0 {
		t.Fatalf("record %+v, %d charges", r, p.count("o-1"))
	}
}

func TestDispatchingByAnotherExecutionIsInFlight(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	seed(t, log, "o-1", effect.Dispatching, "exec-other")
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
	_, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1"))
	if c, retryable := code(err); c != command.CodeInFlight || !retryable {
		t.Fatalf("err %v (code %s, retryable %v), want retryable %s", err, c, retryable, command.CodeInFlight)
	}
	if r := record(t, log, "o-1"); r.State != effect.Dispatching || p.count("o-1") != 0 {
		t.Fatalf("record %+v", r)
	}
}

func TestFailuresAreRecordedAndDispatchedAgain(t *testing.T) {
	for _, tc := range []struct {
		err   error
		state effect.State
	}{
		{pipeline.Retryable("provider_busy", errors.New("429")), effect.FailedRetryable},
		{pipeline.NonRetryable("card_declined", errors.New("declined")), effect.Failed},
	} {
		log, p := memory.NewEffects(nil), &provider{fail: tc.err}
		step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
		if _, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1")); !errors.Is(err, tc.err) {
			t.Fatalf("err %v, want %v", err, tc.err)
		}
		r := record(t, log, "o-1")
		c, _ := code(tc.err)
		if r.State != tc.state || r.Error == nil || r.Error.Code != c {
			t.Fatalf("record %+v, want %s", r, tc.state)
		}
		// A retry (or a re-drive) dispatches again: the failure said not done.
		p.fail = nil
		out, err := step.Run(t.Context(), info(log, "exec-1", 7), input(t, "o-1"))
		if err != nil || string(out.Data) != `{"paymentId":"pay-o-1-1"}` {
			t.Fatalf("second run: %s, %v", out.Data, err)
		}
		if r := record(t, log, "o-1"); r.State != effect.Succeeded || r.Error != nil || r.Dispatches != 2 || r.Dispatcher.FencingToken != 7 {
			t.Fatalf("record %+v", r)
		}
	}
}

// TestConcurrentRunsDispatchOnce: runs of eight executions sharing one
// command id race; the side effect runs once, every other run either
// replays the output or is told the command is in flight, and a later
// run replays it.
func TestConcurrentRunsDispatchOnce(t *testing.T) {
	log := memory.NewEffects(nil)
	var calls atomic.Int32
	release := make(chan struct{})
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder},
		func(context.Context, pipeline.StepInfo, charge) (receipt, error) {
			calls.Add(1)
			<-release
			return receipt{PaymentID: "pay-once"}, nil
		})
	const n = 8
	errs := make([]error, n)
	outs := make([]string, n)
	var wg sync.WaitGroup
	var finished atomic.Int32
	for i := range n {
		wg.Go(func() {
			defer finished.Add(1)
			out, err := step.Run(context.Background(), info(log, fmt.Sprintf("exec-%d", i), 2), input(t, "o-1"))
			outs[i], errs[i] = string(out.Data), err
		})
	}
	for finished.Load() < n-1 && calls.Load() <= 1 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("the side effect ran %d times, want 1", calls.Load())
	}
	succeeded := 0
	for i := range n {
		switch c, retryable := code(errs[i]); {
		case errs[i] == nil && outs[i] == `{"paymentId":"pay-once"}`:
			succeeded++
		case c == command.CodeInFlight && retryable:
		default:
			t.Errorf("run %d: %s, %v", i, outs[i], errs[i])
		}
	}
	if succeeded < 1 {
		t.Fatal("no run returned the output")
	}
	out, err := step.Run(context.Background(), info(log, "exec-late", 2), input(t, "o-1"))
	if err != nil || string(out.Data) != `{"paymentId":"pay-once"}` || calls.Load() != 1 {
		t.Fatalf("late run: %s, %v, %d calls", out.Data, err, calls.Load())
	}
}

func TestOutputTooLargeIsAmbiguous(t *testing.T) {
	log := memory.NewEffects(nil)
	step := command.Step("charge", command.Spec[charge, string]{ID: byOrder},
		func(context.Context, pipeline.StepInfo, charge) (string, error) {
			return strings.Repeat("x", effect.MaxOutputBytes), nil
		})
	_, err := step.Run(t.Context(), info(log, "exec-1", 5), input(t, "o-1"))
	if c, retryable := code(err); c != command.CodeOutputTooLarge || retryable {
		t.Fatalf("err %v (code %s, retryable %v)", err, c, retryable)
	}
	if r := record(t, log, "o-1"); r.State != effect.Ambiguous || r.Error == nil || r.Error.Code != command.CodeOutputTooLarge {
		t.Fatalf("record %+v", r)
	}
}

func TestCancelledMidCallStaysDispatching(t *testing.T) {
	log := memory.NewEffects(nil)
	ctx, cancel := context.WithCancel(t.Context())
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder},
		func(ctx context.Context, _ pipeline.StepInfo, _ charge) (receipt, error) {
			cancel()
			return receipt{}, ctx.Err()
		})
	if _, err := step.Run(ctx, info(log, "exec-1", 5), input(t, "o-1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if r := record(t, log, "o-1"); r.State != effect.Dispatching || r.Dispatcher.FencingToken != 5 {
		t.Fatalf("record %+v: an interrupted call's outcome is unknown", r)
	}
}

func TestDefaultIDAndScope(t *testing.T) {
	log, p := memory.NewEffects(nil), &provider{}
	step := command.Step("charge", command.Spec[charge, receipt]{}, p.charge)
	a := info(log, "exec-1", 5)
	if _, err := step.Run(t.Context(), a, input(t, "o-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Get(t.Context(), command.RecordID("acme", "shop.pay/charge", a.IdempotencyKey)); err != nil {
		t.Fatalf("default id: %v", err)
	}
	// Another execution of the same order: another default id, another charge.
	if _, err := step.Run(t.Context(), info(log, "exec-2", 2), input(t, "o-1")); err != nil || p.count("o-1") != 2 {
		t.Fatalf("err %v, %d charges", err, p.count("o-1"))
	}
	// The same order id in another tenant is another command.
	byID := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
	b := info(log, "exec-3", 2)
	b.TenantID = "globex"
	if _, err := byID.Run(t.Context(), info(log, "exec-4", 2), input(t, "o-9")); err != nil {
		t.Fatal(err)
	}
	if _, err := byID.Run(t.Context(), b, input(t, "o-9")); err != nil || p.count("o-9") != 2 {
		t.Fatalf("err %v, %d charges of o-9 across two tenants, want 2", err, p.count("o-9"))
	}
}

func TestMisconfiguration(t *testing.T) {
	p := &provider{}
	step := command.Step("charge", command.Spec[charge, receipt]{ID: byOrder}, p.charge)
	_, err := step.Run(t.Context(), info(nil, "exec-1", 5), input(t, "o-1"))
	if c, retryable := code(err); c != command.CodeEffectLogMissing || retryable {
		t.Fatalf("no effect log: %v", err)
	}
	empty := command.Step("charge", command.Spec[charge, receipt]{ID: func(charge) string { return "" }}, p.charge)
	_, err = empty.Run(t.Context(), info(memory.NewEffects(nil), "exec-1", 5), input(t, "o-1"))
	if c, retryable := code(err); c != command.CodeInvalidID || retryable {
		t.Fatalf("empty id: %v", err)
	}
	if p.count("o-1") != 0 {
		t.Fatal("charged")
	}
}

// A command step keeps its input type, so that GET /v1/pipelines/{id}
// describes a pipeline that starts with one (its first step's JSON
// Schema), and its encodings and submit check are the typed step's.
func TestCommandStepKnowsItsInputType(t *testing.T) {
	type charge struct {
		OrderID string `json:"orderId"`
	}
	s := command.Step("charge", command.Spec[charge, string]{Namespace: "payments", ID: func(in charge) string { return in.OrderID }},
		func(context.Context, pipeline.StepInfo, charge) (string, error) { return "ok", nil })
	if got := s.InputType(); got != reflect.TypeFor[charge]() {
		t.Errorf("InputType %v, want charge", got)
	}
	if s.CheckInput == nil || len(s.Accepts) != 1 || s.Accepts[0] != payload.EncodingJSON {
		t.Errorf("Accepts %v, CheckInput set %v", s.Accepts, s.CheckInput != nil)
	}
}
