package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/tracing"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// secret marks payload bytes: no span may carry it.
const secret = "SECRET-PAYLOAD-7f3a"

// TestTraceTreeAcrossRetryAndCrash: one execution of a three-step
// pipeline, traced into an in-memory exporter. Step b fails once and is
// retried; the worker running step c crashes (its store is gone, the
// lease lapses) and another takes the redelivered work item over. The
// spans form one trace rooted at the submit: every attempt (the failed
// ones with an error status) under a receive span under a dispatch span,
// every commit under its attempt, every span with the execution's ids,
// none with payload bytes.
//
// It runs with the OpenTelemetry SDK's provider and with qasync's own
// (package tracing), which the processes use.
func TestTraceTreeAcrossRetryAndCrash(t *testing.T) {
	t.Run("sdk", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		traceTreeAcrossRetryAndCrash(t, sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), exp.GetSpans)
	})
	t.Run("qasync", func(t *testing.T) {
		tp, mem := tracing.NewInMemory(nil)
		traceTreeAcrossRetryAndCrash(t, tp, func() tracetest.SpanStubs { return stubs(mem.Spans()) })
	})
}

// stubs are qasync's provider's spans as the SDK's test stubs.
func stubs(ds []*tracing.SpanData) tracetest.SpanStubs {
	out := make(tracetest.SpanStubs, len(ds))
	for i, d := range ds {
		out[i] = tracetest.SpanStub{Name: d.Name, SpanContext: d.Context, Parent: d.Parent, SpanKind: d.Kind,
			StartTime: d.Start, EndTime: d.End, Attributes: d.Attributes, Links: nil,
			Status: sdktrace.Status{Code: d.Status.Code, Description: d.Status.Description}}
		for _, ev := range d.Events {
			out[i].Events = append(out[i].Events, sdktrace.Event{Name: ev.Name, Time: ev.Time, Attributes: ev.Attributes})
		}
		for _, l := range d.Links {
			out[i].Links = append(out[i].Links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes})
		}
	}
	return out
}

// traceTreeAcrossRetryAndCrash is TestTraceTreeAcrossRetryAndCrash on
// the provider tp, whose exported spans spans returns.
func traceTreeAcrossRetryAndCrash(t *testing.T, tp trace.TracerProvider, spansOf func() tracetest.SpanStubs) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.tracer = tp

		failed := false
		crashing := true
		steps := []pipeline.Step{
			appendStep("a"),
			step("b", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
				if !failed {
					failed = true
					return nil, pipeline.Retryable("flaky", errors.New("b failed with "+secret))
				}
				in["b"] = secret
				return in, nil
			}),
			step("c", func(ctx context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
				if crashing {
					<-ctx.Done() // the worker "dies" here: nothing of it commits
					return nil, ctx.Err()
				}
				in["c"] = secret
				return in, nil
			}),
		}
		p := pipeline.Pipeline{ID: "p.traced", Steps: steps}
		cfg := engine.Config{Retry: fastRetry, Lease: 3 * time.Second, ChainMaxSteps: 1}
		shared := c.store
		crashed := &gone{Store: shared}
		c.store = crashed
		dead := c.worker("dead", cfg, nil, p)
		c.store = shared
		alive := c.worker("alive", cfg, nil, p)

		e := submitTo(t, alive, "p.traced", "k1", map[string]any{"in": secret})
		deliver(alive, c.queue) // a
		deliver(alive, c.queue) // b fails: WAIT_RETRY
		time.Sleep(time.Minute)
		deliver(alive, c.queue) // b again
		items := c.queue.take()
		if len(items) != 1 {
			t.Fatalf("%d items for step c", len(items))
		}
		// Step c's worker dies mid-step: its store is gone, its lease lapses.
		crashed.dead.Store(true)
		if err := dead.Process(context.Background(), items[0].Item); err != nil {
			t.Fatal(err)
		}
		crashing = false
		time.Sleep(10 * time.Second)
		// The queue delivers the same message again (its visibility ended).
		if err := alive.Process(context.Background(), items[0].Item); err != nil {
			t.Fatal(err)
		}
		if got := c.get(e.ExecutionID); got.Status != store.Succeeded {
			t.Fatalf("status %s", got.Status)
		}

		spans := spansOf()
		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, s := range spans {
			byID[s.SpanContext.SpanID()] = s
		}
		parentOf := func(s tracetest.SpanStub) (tracetest.SpanStub, bool) {
			p, ok := byID[s.Parent.SpanID()]
			return p, ok
		}
		var roots, steps2, commits []tracetest.SpanStub
		for _, s := range spans {
			if s.SpanContext.TraceID() != spans[0].SpanContext.TraceID() {
				t.Errorf("span %s in another trace", s.Name)
			}
			if !s.Parent.IsValid() {
				roots = append(roots, s)
				continue
			}
			if _, ok := parentOf(s); !ok {
				t.Errorf("span %s has a parent not exported", s.Name)
			}
			switch s.Name {
			case "qasync.step":
				steps2 = append(steps2, s)
			case "qasync.commit":
				commits = append(commits, s)
			}
			attrs := attrMap(s.Attributes)
			if attrs["qasync.execution_id"] != e.ExecutionID || attrs["qasync.tenant"] != "t1" || attrs["qasync.pipeline"] != "p.traced" {
				t.Errorf("span %s attributes %v", s.Name, attrs)
			}
		}
		if len(roots) != 1 || roots[0].Name != "qasync.submit" {
			t.Fatalf("roots %v", names(roots))
		}
		if attrMap(roots[0].Attributes)["qasync.execution_id"] != e.ExecutionID {
			t.Errorf("submit attributes %v", roots[0].Attributes)
		}
		// The attempts, in order: a, b (failed), b, c (crashed), c (takeover).
		want := []struct {
			step, attempt string
			failed        bool
			takeover      bool
		}{{"a", "1", false, false}, {"b", "1", true, false}, {"b", "2", false, false}, {"c", "1", true, false}, {"c", "2", false, true}}
		if len(steps2) != len(want) {
			t.Fatalf("%d step spans, want %d", len(steps2), len(want))
		}
		for i, w := range want {
			s := steps2[i]
			a := attrMap(s.Attributes)
			if a["qasync.step"] != w.step || a["qasync.attempt"] != w.attempt || a["qasync.transition_key"] == "" ||
				a["qasync.takeover"] != fmt.Sprint(w.takeover) {
				t.Errorf("attempt %d attributes %v", i, a)
			}
			if (s.Status.Code == codes.Error) != w.failed {
				t.Errorf("attempt %d (%s#%s) status %v", i, w.step, w.attempt, s.Status)
			}
			recv, _ := parentOf(s)
			disp, _ := parentOf(recv)
			if recv.Name != "qasync.receive" || recv.SpanKind != trace.SpanKindConsumer ||
				disp.Name != "qasync.dispatch" || disp.SpanKind != trace.SpanKindProducer {
				t.Errorf("attempt %d under %s under %s", i, recv.Name, disp.Name)
			}
		}
		if a := attrMap(steps2[1].Attributes); a["qasync.error_code"] != "flaky" {
			t.Errorf("failed attempt's code %q", a["qasync.error_code"])
		}
		if a := attrMap(steps2[3].Attributes); a["qasync.error_code"] != "lease_lost" {
			t.Errorf("crashed attempt's code %q", a["qasync.error_code"])
		}
		// The crash and its takeover received the same message: both
		// receive spans are children of one dispatch span.
		r3, _ := parentOf(steps2[3])
		r4, _ := parentOf(steps2[4])
		if r3.Parent.SpanID() != r4.Parent.SpanID() {
			t.Error("the takeover's receive is not a child of the crashed attempt's dispatch")
		}
		// Commits: a, b's failure (WAIT_RETRY), b, c; each under its attempt.
		wantStatus := []string{"QUEUED", "WAIT_RETRY", "QUEUED", "SUCCEEDED"}
		if len(commits) != len(wantStatus) {
			t.Fatalf("%d commits", len(commits))
		}
		for i, s := range commits {
			if p, _ := parentOf(s); p.Name != "qasync.step" {
				t.Errorf("commit %d under %s", i, p.Name)
			}
			if got := attrMap(s.Attributes)["qasync.status"]; got != wantStatus[i] {
				t.Errorf("commit %d status %s, want %s", i, got, wantStatus[i])
			}
		}
		// No payload bytes anywhere.
		for _, s := range spans {
			all := fmt.Sprint(s.Attributes, s.Status, s.Events, s.Links)
			if strings.Contains(all, secret) {
				t.Errorf("span %s carries payload bytes: %s", s.Name, all)
			}
		}
	})
}

// TestNoTraceParentWhenTracingOff: without a tracer provider the runtime
// writes no traceparent into its work items.
func TestNoTraceParentWhenTracingOff(t *testing.T) {
	c := newCluster(t)
	rt := c.worker("w", engine.Config{ChainMaxSteps: 1}, nil, threeSteps())
	submitTo(t, rt, "p.three", "", map[string]any{})
	for range 3 {
		msgs := c.queue.take()
		if len(msgs) != 1 || msgs[0].Item.TraceParent != "" {
			t.Fatalf("work items %+v", msgs)
		}
		c.queue.msgs = msgs
		deliver(rt, c.queue)
	}
	// And with tracing on, it does (the check above is not vacuous).
	c.tracer = sdktrace.NewTracerProvider()
	traced := c.worker("traced", engine.Config{}, nil, threeSteps())
	submitTo(t, traced, "p.three", "", map[string]any{})
	if msgs := c.queue.take(); len(msgs) != 1 || !strings.HasPrefix(msgs[0].Item.TraceParent, "00-") {
		t.Fatalf("traced work items %+v", msgs)
	}
}

func attrMap(kv []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, a := range kv {
		m[string(a.Key)] = a.Value.Emit()
	}
	return m
}

func names(ss []tracetest.SpanStub) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// TestSweeperRedispatchStartsANewTrace: a work item lost after the
// submit is sent again by the sweeper, which has no live parent: its
// redispatch span is the root of a new trace carrying the execution's
// ids (how the two traces are found together), and the worker's spans
// follow it.
func TestSweeperRedispatchStartsANewTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		c := newCluster(t)
		c.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		rt := c.worker("w", engine.Config{SweepGrace: time.Second}, nil, threeSteps())
		e := submitTo(t, rt, "p.three", "", map[string]any{})
		c.queue.take() // lost
		time.Sleep(2 * time.Second)
		if res := c.sweep(rt); res.Redispatched != 1 {
			t.Fatalf("sweep %+v", res)
		}
		msgs := c.queue.take()
		if len(msgs) != 1 || msgs[0].Item.TraceParent == "" {
			t.Fatalf("redispatched %+v", msgs)
		}
		c.queue.msgs = msgs
		deliver(rt, c.queue)
		var submit, redispatch tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "qasync.submit":
				submit = s
			case "qasync.redispatch":
				redispatch = s
			}
		}
		if redispatch.Parent.IsValid() || redispatch.SpanKind != trace.SpanKindProducer ||
			redispatch.SpanContext.TraceID() == submit.SpanContext.TraceID() {
			t.Fatalf("redispatch span %+v", redispatch)
		}
		if a := attrMap(redispatch.Attributes); a["qasync.execution_id"] != e.ExecutionID || a["qasync.tenant"] != "t1" {
			t.Fatalf("redispatch attributes %v", a)
		}
		receives := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "qasync.receive" && s.Parent.SpanID() == redispatch.SpanContext.SpanID() {
				receives++
			}
		}
		if receives != 1 {
			t.Fatalf("%d receives under the redispatch", receives)
		}
	})
}

// TestTraceOverTheEmbeddedQueue: over the embedded store's queue, whose
// commits write their hand-over's entry themselves (the dispatch that
// follows finds it covered), an execution of three steps is one trace:
// every receive span has a dispatch span as parent. Deliveries are driven
// by hand (DeliverOne), after each dispatch call returned.
func TestTraceOverTheEmbeddedQueue(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	reg, err := pipeline.NewRegistry(threeSteps())
	if err != nil {
		t.Fatal(err)
	}
	db, err := embedded.Open(t.TempDir(), embedded.Options{NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var rt *engine.Runtime
	disp := db.NewDispatcher(func(ctx context.Context, item dispatch.WorkItem) error { return rt.Process(ctx, item) }, embedded.DispatcherOptions{Workers: 1})
	rt, err = engine.New(engine.Config{ChainMaxSteps: 1, WorkerID: "w"}, engine.Deps{
		Registry: reg, Store: db.State(nil), Payloads: db.Payloads(nil), Dispatcher: disp, DeadLetter: &recordingDLQ{},
		Logger: slog.New(slog.DiscardHandler), TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := submitTo(t, rt, "p.three", "", map[string]any{})
	for disp.DeliverOne() {
	}
	if got, err := db.State(nil).Get(context.Background(), e.Key()); err != nil || got.Status != store.Succeeded {
		t.Fatalf("not done: %s %v", got.Status, err)
	}
	traces := map[trace.TraceID]bool{}
	byID := map[trace.SpanID]string{}
	spans := exp.GetSpans()
	for _, s := range spans {
		traces[s.SpanContext.TraceID()] = true
		byID[s.SpanContext.SpanID()] = s.Name
	}
	receives := 0
	for _, s := range spans {
		if s.Name == "qasync.receive" {
			receives++
			if byID[s.Parent.SpanID()] != "qasync.dispatch" {
				t.Errorf("a receive span's parent is %q", byID[s.Parent.SpanID()])
			}
		}
	}
	if len(traces) != 1 || receives != 3 {
		t.Fatalf("%d traces, %d receives", len(traces), receives)
	}
}

// TestTracedDeferralKeepsTheItem: with tracing on, a work item that is not
// due yet (a worker whose clock runs behind) is still handed back to the
// transport as a RetryAfter, as with tracing off, so that the queue keeps
// it; its receive span records the deferral (qasync.deferred) without an
// error status. (The deterministic simulator found a traced deferral
// answered as done: the embedded queue then delivered it again at once,
// forever, and SQS would have deleted it.)
func TestTracedDeferralKeepsTheItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		c := newCluster(t)
		c.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		submitter := c.worker("s", engine.Config{Retry: fastRetry}, nil, threeSteps())
		strict := c.worker("behind-3s", engine.Config{Retry: fastRetry, ClockSkewTolerance: 2 * time.Second}, skewed(-3*time.Second), threeSteps())
		e := submitTo(t, submitter, "p.three", "k1", map[string]any{})
		c.queue.take()
		err := strict.Process(context.Background(), workItem(e))
		if ra, ok := dispatch.AsRetryAfter(err); !ok || ra.Delay <= 0 {
			t.Fatalf("traced Process of an item not due: %v, want a RetryAfter", err)
		}
		var recv *tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == "qasync.receive" {
				recv = &s
			}
		}
		if recv == nil || attrMap(recv.Attributes)["qasync.deferred"] == "" || recv.Status.Code == codes.Error {
			t.Fatalf("receive span %+v", recv)
		}
	})
}
