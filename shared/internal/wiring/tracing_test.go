package wiring_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	runTraced(t, "otlp", srv.URL+"/v1/traces")
	if posts.Load() == 0 {
		t.Fatal("no spans reached the OTLP endpoint")
	}
}

// TestXRayExporterSignsWithTheSessionsCredentials: with tracing.exporter
// xray the assembled process signs its span exports with SigV4 for
// service xray, with the credentials and region of its AWS session (here
// the environment's), at tracing.endpoint.
func TestXRayExporterSignsWithTheSessionsCredentials(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-central-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDWIRING")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	runTraced(t, "xray", srv.URL+"/v1/traces")
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 {
		t.Fatal("no spans exported")
	}
	for _, a := range auth {
		if !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential=AKIDWIRING/") || !strings.Contains(a, "/eu-central-1/xray/aws4_request") {
			t.Fatalf("Authorization %q", a)
		}
	}
}

// runTraced assembles an embedded process exporting spans with exporter
// to endpoint, runs one execution to SUCCEEDED and closes the process
// (which flushes its spans).
func runTraced(t *testing.T, exporter, endpoint string) {
	t.Helper()
	c := config.Default()
	c.EmbeddedDataDir = t.TempDir()
	c.TenantSource = "none"
	c.TracingExporter, c.TracingEndpoint = exporter, endpoint
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
}
