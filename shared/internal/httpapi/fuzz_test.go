package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/pipeline"
)

// discardDispatcher accepts work items and drops them.
type discardDispatcher struct{}

func (discardDispatcher) Dispatch(context.Context, ...dispatch.Message) error { return nil }

// FuzzSubmit drives arbitrary submissions through the handler: whatever
// comes in, the answer is one of the documented statuses, every error is a
// problem document whose status matches, and every success names an
// execution.
func FuzzSubmit(f *testing.F) {
	f.Add("echo", "key-1", "tenant-a", "application/json", []byte(`{"a":1}`))
	f.Add("echo", "key-1", "tenant-a", "application/json", []byte(`{"a":2}`))
	f.Add("greet", "", "", "", []byte(`{"name":"x"}`))
	f.Add("echo", "k", "default", "application/json", []byte(`{"a":`))
	f.Add("echo", strings.Repeat("k", 256), "t", "application/json", []byte(`{}`))
	f.Add("echo", "k\x00", "t", "application/json", []byte(`{}`))
	f.Add("echo", "k", "bad tenant", "application/json", []byte(`{}`))
	f.Add("nope", "k", "t", "application/json", []byte(`{}`))
	f.Add("..", "k", "t", "", []byte(`{}`))
	f.Add("a/b", "k", "t", "", []byte(`{}`))
	f.Add("echo", "k2", "t", "text/plain; charset=utf-8", []byte("hello"))
	f.Add("echo", "k3", "t", "application/x-protobuf; messageType=a.B", []byte{0x08, 0x01})
	f.Add("echo", "k4", "t", "what/", []byte(`{}`))
	f.Add("echo", "k5", "t", "application/json", bytes.Repeat([]byte("1"), 2048))
	f.Add("echo", "k6", "t", "application/json", []byte{})

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clock.NewFake(epoch)
	reg, err := pipeline.NewRegistry(testPipelines()...)
	if err != nil {
		f.Fatal(err)
	}
	rt, err := engine.New(engine.Config{WorkerID: "fuzz"}, engine.Deps{
		Registry: reg, Store: memory.NewStateStore(clk), Payloads: memory.NewPayloadStore(clk),
		Dispatcher: discardDispatcher{}, DeadLetter: memory.NewLogDLQ(logger), Clock: clk, Logger: logger,
	})
	if err != nil {
		f.Fatal(err)
	}
	h := httpapi.New(rt, httpapi.Options{MaxBodyBytes: 1024, Logger: logger, AdminToken: adminToken})
	allowed := map[int]bool{200: true, 202: true, 400: true, 404: true, 413: true, 415: true, 422: true}

	f.Fuzz(func(t *testing.T, pipelineID, key, tenant, contentType string, body []byte) {
		target := "/v1/pipelines/" + url.PathEscape(pipelineID) + "/executions"
		r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		if tenant != "" {
			r.Header.Set("X-Tenant-Id", tenant)
		}
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		if !allowed[w.Code] {
			t.Fatalf("status %d not allowed; body %q", w.Code, w.Body)
		}
		if w.Code >= 300 {
			if ct := w.Header().Get("Content-Type"); ct != httpapi.ContentTypeProblem {
				t.Fatalf("status %d with Content-Type %q", w.Code, ct)
			}
			var p httpapi.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("problem body %q: %v", w.Body, err)
			}
			if p.Status != w.Code || p.Type == "" || p.Title == "" || p.Detail == "" {
				t.Fatalf("status %d with problem %+v", w.Code, p)
			}
			return
		}
		var s client.Submission
		if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
			t.Fatalf("submit body %q: %v", w.Body, err)
		}
		if s.ExecutionID == "" || s.Duplicate != (w.Code == http.StatusOK) || w.Header().Get("Location") != s.StatusURL {
			t.Fatalf("status %d with %+v", w.Code, s)
		}
	})
}
