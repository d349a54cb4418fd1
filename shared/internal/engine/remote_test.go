package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/remote"
	"github.com/qasync/qasync/shared/store"
)

// handlerTransport serves requests with an http.Handler in memory, so that
// remote steps run inside a synctest bubble.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.WroteRequest != nil {
		tr.WroteRequest(httptrace.WroteRequestInfo{}) // as a real transport does once the request is sent
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// fakeWorker is a remote worker whose behaviour a test switches.
type fakeWorker struct {
	mu      sync.Mutex
	headers []http.Header
	// behave answers one request; nil runs appendStep("r").
	behave func(w http.ResponseWriter, r *http.Request, n int)
}

func (f *fakeWorker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	n, behave := len(f.headers), f.behave
	f.mu.Unlock()
	if behave == nil {
		remote.Handler(appendStep("r").Run).ServeHTTP(w, r)
		return
	}
	behave(w, r, n)
}

func (f *fakeWorker) calls() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.headers...)
}

func remotePipeline(f *fakeWorker, deadline time.Duration) pipeline.Pipeline {
	r := remote.Step("r", remote.Spec{URL: "http://worker.test/run?key=secret", Deadline: deadline,
		Client: &http.Client{Transport: handlerTransport{f}}})
	return pipeline.Pipeline{ID: "p.remote", Steps: []pipeline.Step{appendStep("a"), r, appendStep("c")}}
}

func TestRemoteStepSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeWorker{}
		h := newHarness(t, engine.Config{Retry: fastRetry}, remotePipeline(f, time.Minute))
		e := h.submit("p.remote", "k1", map[string]any{"path": []string{}})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.Succeeded {
			t.Fatalf("row = %+v", got)
		}
		_, res, err := h.rt.Result(context.Background(), e.Key())
		if err != nil || string(res.Data) != `{"path":["a","r","c"]}` {
			t.Fatalf("result %s, %v", res.Data, err)
		}
		calls := f.calls()
		if len(calls) != 1 {
			t.Fatalf("%d calls", len(calls))
		}
		hd := calls[0]
		want := map[string]string{
			remote.HeaderExecutionID: e.ExecutionID, remote.HeaderTenantID: "t1",
			remote.HeaderTransitionKey: e.ExecutionID + ":1:1", remote.HeaderAttempt: "1",
			remote.HeaderIdempotencyKey: store.StepIdempotencyKey("t1", e.ExecutionID, "r"),
			"Content-Type":              "application/json",
		}
		for k, v := range want {
			if hd.Get(k) != v {
				t.Errorf("header %s = %q, want %q", k, hd.Get(k), v)
			}
		}
		if hd.Get(remote.HeaderFencingToken) == "" {
			t.Error("no fencing token header")
		}
	})
}

// workerStep is a remote worker running fn as a JSON step.
func workerStep(fn func(ctx context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error)) func(http.ResponseWriter, *http.Request, int) {
	h := remote.Handler(pipeline.NewStep("w", fn).Run)
	return func(w http.ResponseWriter, r *http.Request, _ int) { h.ServeHTTP(w, r) }
}

func TestRemote4xxIsNonRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeWorker{behave: workerStep(func(context.Context, pipeline.StepInfo, map[string]any) (map[string]any, error) {
			return nil, pipeline.NonRetryable("bad_order", errors.New("order has no lines"))
		})}
		h := newHarness(t, engine.Config{Retry: fastRetry}, remotePipeline(f, time.Minute))
		e := h.submit("p.remote", "k1", map[string]any{})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.DLQ || got.Error == nil || got.Error.Code != "bad_order" ||
			got.Error.TerminalReason != store.ReasonNonRetryable || !strings.Contains(got.Error.Message, "422") {
			t.Fatalf("row = %+v error %+v", got, got.Error)
		}
		if n := len(f.calls()); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
	})
}

func TestRemote5xxIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeWorker{behave: workerStep(func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			if info.Attempt < 2 {
				return nil, errors.New("database busy")
			}
			in["remoteAttempt"] = info.Attempt
			return in, nil
		})}
		h := newHarness(t, engine.Config{Retry: fastRetry}, remotePipeline(f, time.Minute))
		e := h.submit("p.remote", "k1", map[string]any{})
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.WaitRetry || got.Error == nil || got.Error.Code != pipeline.CodeStepFailed || !strings.Contains(got.Error.Message, "503") {
			t.Fatalf("after 503: %+v %+v", got, got.Error)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		got = h.get(e.ExecutionID)
		if got.Status != store.Succeeded {
			t.Fatalf("row = %+v", got)
		}
		calls := f.calls()
		if len(calls) != 2 || calls[1].Get(remote.HeaderAttempt) != "2" ||
			calls[0].Get(remote.HeaderIdempotencyKey) != calls[1].Get(remote.HeaderIdempotencyKey) {
			t.Fatalf("calls = %v", calls)
		}
	})
}

func TestRemoteDeadlineParksOutcomeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := true
		var mu sync.Mutex
		f := &fakeWorker{behave: func(w http.ResponseWriter, r *http.Request, n int) {
			mu.Lock()
			hung := hang
			mu.Unlock()
			if hung {
				<-r.Context().Done() // the worker never answers in time
				return
			}
			remote.Handler(appendStep("r").Run).ServeHTTP(w, r)
		}}
		// The deadline is longer than the lease: renewal keeps the lease.
		h := newHarness(t, engine.Config{Retry: fastRetry, Lease: 30 * time.Second, SweepGrace: time.Millisecond}, remotePipeline(f, 100*time.Second))
		start := time.Now()
		e := h.submit("p.remote", "k1", map[string]any{"path": []string{}})
		time.Sleep(76 * time.Second)
		synctest.Wait()
		if got := h.get(e.ExecutionID); got.Status != store.Running {
			t.Fatalf("slow call not running at 76%%: %+v", got)
		}
		logs := h.logs.String()
		if !strings.Contains(logs, `"msg":"remote_transition_deadline_warning"`) || strings.Contains(logs, "remote_transition_outcome_unknown") {
			t.Fatalf("no deadline warning yet:\n%s", logs)
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		got := h.get(e.ExecutionID)
		if got.Status != store.RemoteOutcomeUnknown || !got.NextDueAt.IsZero() || got.LeaseOwner != "" ||
			got.Error == nil || got.Error.Code != pipeline.CodeRemoteOutcomeUnknown || got.StepIndex != 1 || got.Attempt != 1 {
			t.Fatalf("row = %+v %+v", got, got.Error)
		}
		if !got.UpdatedAt.Equal(start.Add(100 * time.Second)) {
			t.Errorf("parked at %v, want the deadline", got.UpdatedAt.Sub(start))
		}
		var warn, unknown map[string]any
		for _, line := range h.logs.Lines() {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			switch m["msg"] {
			case "remote_transition_deadline_warning":
				warn = m
			case "remote_transition_outcome_unknown":
				unknown = m
			}
		}
		for name, m := range map[string]map[string]any{"warning": warn, "outcome unknown": unknown} {
			if m == nil {
				t.Fatalf("no %s event", name)
			}
			if m["execution_id"] != e.ExecutionID || m["transition_key"] != e.ExecutionID+":1:1" || m["protocol"] != "rest" ||
				m["target"] != "http://worker.test/run" || m["deadline_ms"] != 100000.0 || m["attempt"] != 1.0 {
				t.Errorf("%s event = %v", name, m)
			}
		}
		if warn["elapsed_ms"] != 75000.0 {
			t.Errorf("warning at %v ms, want 75000", warn["elapsed_ms"])
		}
		if unknown["decision"] != "automatic_retry_suppressed" || unknown["elapsed_ms"] != 100000.0 {
			t.Errorf("outcome unknown event = %v", unknown)
		}
		if strings.Contains(h.logs.String(), `"path"`) {
			t.Error("payload data logged")
		}
		if evs := h.observed(engine.EventOutcomeUnknown); len(evs) != 1 || evs[0].Execution.Status != store.RemoteOutcomeUnknown {
			t.Fatalf("observed %+v", evs)
		}
		// No automatic retry: no sweep, no claim, however long.
		sent := h.dispatched()
		time.Sleep(time.Hour)
		if res := h.sweep(); res.Due != 0 {
			t.Fatalf("swept: %+v", res)
		}
		if err := h.rt.Process(context.Background(), workItem(e)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if again := h.get(e.ExecutionID); again.Version != got.Version || h.dispatched() != sent || len(f.calls()) != 1 {
			t.Fatalf("parked row touched: %+v, %d dispatches, %d calls", again, h.dispatched()-sent, len(f.calls()))
		}
		// Re-drive needs the operator's confirmation.
		ctx := context.Background()
		if _, err := h.rt.Redrive(ctx, e.Key(), "worker restarted", nil); !errors.Is(err, engine.ErrRemoteEffectUnconfirmed) {
			t.Fatalf("unconfirmed redrive err = %v", err)
		}
		mu.Lock()
		hang = false
		mu.Unlock()
		rd, err := h.rt.RedriveWith(ctx, e.Key(), engine.RedriveOptions{Reason: "worker log shows it was killed", ConfirmedNoRemoteEffect: true})
		if err != nil {
			t.Fatal(err)
		}
		if rd.Status != store.Queued || rd.Attempt != 2 || rd.StepIndex != 1 || rd.Error != nil {
			t.Fatalf("redriven = %+v", rd)
		}
		synctest.Wait()
		final := h.get(e.ExecutionID)
		if final.Status != store.Succeeded || final.RedriveCount != 1 {
			t.Fatalf("final = %+v", final)
		}
		calls := f.calls()
		if len(calls) != 2 || calls[1].Get(remote.HeaderAttempt) != "2" || calls[1].Get(remote.HeaderTransitionKey) != e.ExecutionID+":1:2" {
			t.Fatalf("calls = %v", calls)
		}
	})
}
