package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
	"github.com/qasync/qasync/shared/store"
)

// demoPipelines are the real server's pipelines for the browser test: a
// quick one, one that dead-letters, one that succeeds after two retries
// (a timeline worth showing), one that waits an hour for its retry
// (what the operator cancels) and one that fans out to three quick
// children.
func demoPipelines() *pipeline.Registry {
	pass := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			return in, nil
		})
	}
	fail := pipeline.NewStep("charge", func(context.Context, pipeline.StepInfo, map[string]any) (map[string]any, error) {
		return nil, pipeline.NonRetryable("card_declined", errors.New("the card was declined"))
	})
	flaky := pipeline.NewStep("reserve", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		if info.Attempt <= 2 {
			return nil, fmt.Errorf("inventory busy (attempt %d)", info.Attempt)
		}
		return in, nil
	}, pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 3, Delay: 50 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second}))
	later := pipeline.NewStep("notify", func(context.Context, pipeline.StepInfo, map[string]any) (map[string]any, error) {
		return nil, errors.New("mail server down")
	}, pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 3, Delay: time.Hour, Multiplier: 1, MaxDelay: time.Hour}))
	split := pipeline.NewStep("split", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) ([]map[string]any, error) {
		lines := make([]map[string]any, demoChildren)
		for i := range lines {
			lines[i] = map[string]any{"order": in["order"], "line": i}
		}
		return lines, nil
	})
	return pipeline.MustRegistry(
		pipeline.Pipeline{ID: "demo.quick", Steps: []pipeline.Step{pass("validate"), pass("ship")}},
		pipeline.Pipeline{ID: "demo.fail", Steps: []pipeline.Step{pass("validate"), fail}},
		pipeline.Pipeline{ID: "demo.flaky", Steps: []pipeline.Step{pass("validate"), flaky, pass("ship")}},
		pipeline.Pipeline{ID: "demo.later", Steps: []pipeline.Step{later}},
		pipeline.Pipeline{ID: "demo.fanout", Steps: []pipeline.Step{split, pipeline.Map("each-line", "demo.quick", pipeline.MapOptions{MaxInFlight: 2})}},
	)
}

// demoChildren is how many children demo.fanout's map starts.
const demoChildren = 3

// startRealConsole runs `qasync serve`'s server (server.Serve on its
// default providers, the embedded store, in a data directory of the
// test's own; an operator token) with executions submitted through its
// HTTP API, and returns what the browser scenario expects of it.
func startRealConsole(t *testing.T) browserTarget {
	t.Helper()
	cfg := config.Default()
	cfg.EmbeddedDataDir, cfg.HTTPAddr, cfg.AdminToken = t.TempDir(), "127.0.0.1:0", operatorToken
	ctx, stop := context.WithCancel(context.Background())
	started, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, cfg, demoPipelines(), server.WithLogger(slog.New(slog.DiscardHandler)),
			server.OnStarted(func(a net.Addr) { started <- a }))
	}()
	t.Cleanup(func() { stop(); <-done })
	var base string
	select {
	case a := <-started:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	submit := func(pipelineID, key string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/pipelines/"+pipelineID+"/executions", strings.NewReader(`{"order":"`+key+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant-Id", tenantAcme)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sub struct {
			ExecutionID string `json:"executionId"`
		}
		if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&sub) != nil {
			t.Fatalf("submit %s: %d", pipelineID, resp.StatusCode)
		}
		return sub.ExecutionID
	}
	status := func(id string) store.Status {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/executions/"+id, nil)
		req.Header.Set("X-Tenant-Id", tenantAcme)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			Status store.Status `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&doc)
		return doc.Status
	}
	var ids []string
	for i := range 55 {
		ids = append(ids, submit("demo.quick", fmt.Sprintf("quick-%02d", i)))
	}
	var failed []string
	for i := range 4 {
		failed = append(failed, submit("demo.fail", fmt.Sprintf("fail-%d", i)))
	}
	flaky := submit("demo.flaky", "flaky-1")
	later := submit("demo.later", "later-1")
	fanout := submit("demo.fanout", "fanout-1")
	want := map[string]store.Status{flaky: store.Succeeded, later: store.WaitRetry, fanout: store.Succeeded}
	for _, id := range ids {
		want[id] = store.Succeeded
	}
	for _, id := range failed {
		want[id] = store.DLQ
	}
	deadline := time.Now().Add(30 * time.Second)
	for id, w := range want {
		for status(id) != w {
			if time.Now().After(deadline) {
				t.Fatalf("execution %s is %s, want %s", id, status(id), w)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The map's result names its children.
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/executions/"+fanout+"/result", nil)
	req.Header.Set("X-Tenant-Id", tenantAcme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var joined pipeline.MapResult
	if err := json.NewDecoder(resp.Body).Decode(&joined); err != nil || len(joined.Elements) != demoChildren {
		t.Fatalf("demo.fanout's result: %d elements (%v)", len(joined.Elements), err)
	}
	return browserTarget{
		BaseURL: base, Token: operatorToken, Tenant: tenantAcme, ListMin: store.DefaultListLimit,
		Pipeline: "demo.fail", Statuses: []store.Status{store.DLQ}, FilterMin: len(failed),
		// SUBMITTED, then validate (started, succeeded), reserve (three
		// starts, two failures, a success), ship (started, succeeded),
		// SUCCEEDED: 11 events.
		TimelineID: flaky, MinEvents: 11, CancelID: later, SearchID: flaky, SearchKey: "flaky-1",
		ChildID: joined.Elements[1].ExecutionID, Children: demoChildren, Ended: demoChildren,
	}
}
