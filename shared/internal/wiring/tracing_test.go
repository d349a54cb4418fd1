package wiring_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// TestTracingKeysReachTheRuntime: with tracing.exporter otlp the
// assembled process traces its executions to tracing.endpoint, and
// Close flushes the spans.
func TestTracingKeysReachTheRuntime(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	c := config.Default()
	c.EmbeddedDataDir = t.TempDir()
	c.TenantSource = "none"
	c.TracingExporter, c.TracingEndpoint = "otlp", srv.URL+"/v1/traces"
	set, err := open(context.Background(), c, embeddedRegistry(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := payload.JSON(map[string]int{})
	res, err := set.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: "default", PipelineID: "e.ok", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, set.Runtime, res.Execution.Key(), store.Succeeded)
	if err := set.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no spans reached the OTLP endpoint")
	}
}
