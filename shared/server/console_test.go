package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
)

// TestServeServesTheWebConsoleBesideTheAPI: qasync serve answers
// /console with the console's HTML (an execution submitted through the
// API shows on its page, in the tenant the header tenant source gives a
// browser) while the API's routes answer as before.
func TestServeServesTheWebConsoleBesideTheAPI(t *testing.T) {
	t.Parallel()
	echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	})
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "echo", Steps: []pipeline.Step{echo}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default() // the embedded store, as qasync serve runs by default
	cfg.EmbeddedDataDir = t.TempDir()
	cfg.HTTPAddr, cfg.AdminToken = "127.0.0.1:0", "console-test-token"
	ctx, stop := context.WithCancel(context.Background())
	started, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, cfg, reg, server.WithLogger(slog.New(slog.DiscardHandler)),
			server.OnStarted(func(a net.Addr) { started <- a }))
	}()
	var base string
	select {
	case a := <-started:
		base = "http://" + a.String()
	case err := <-done:
		stop()
		t.Fatalf("server.Serve: %v", err)
	}
	t.Cleanup(func() { stop(); <-done })

	resp, err := http.Post(base+"/v1/pipelines/echo/executions", "application/json", strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		ExecutionID string `json:"executionId"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || sub.ExecutionID == "" {
		t.Fatalf("submit: %d %+v", resp.StatusCode, sub)
	}

	get := func(path string) (int, string, string) {
		t.Helper()
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, r.Header.Get("Content-Type"), string(b)
	}
	code, ct, body := get("/console/executions/" + sub.ExecutionID)
	if code != http.StatusOK || ct != "text/html; charset=utf-8" || !strings.Contains(body, sub.ExecutionID) ||
		!strings.Contains(body, `id="tenant-form"`) || !strings.Contains(body, `id="login-form"`) {
		t.Fatalf("console page: %d %q (tenant field, sign-in form expected)\n%s", code, ct, body)
	}
	if code, ct, _ := get("/healthz"); code != http.StatusOK || !strings.HasPrefix(ct, "application/json") {
		t.Errorf("healthz beside the console: %d %q", code, ct)
	}
	if code, ct, _ := get("/v1/nowhere"); code != http.StatusNotFound || ct != "application/problem+json" {
		t.Errorf("an unknown API path: %d %q, want the API's problem 404", code, ct)
	}
}
