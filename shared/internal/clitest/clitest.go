// Package clitest runs the server the tests of package client and of the
// qasync client commands talk to: the real server (server.Serve on the
// default providers, the embedded store, in a data directory of the
// test's own, in this process) with a small registry of test pipelines.
// QASYNC_CLITEST_STATE picks other providers for the same tests:
// "memory", or "dynamo" (DynamoDB and SQS on the local AWS stack, fresh
// tables and queues per test; make test runs both passes).
// Every route those tests call, the operator routes included, is the real
// server's. The one stand-in is WithoutHistory, a proxy in front of it
// that hides the history route, for what a real server of this version
// cannot be: one that predates the route (the CLI's watch then falls back
// to status polls).
package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/server"
)

// The test pipelines.
const (
	// PipelineOK runs two steps, "prepare" and "finish", and succeeds;
	// its result is the input object with "prepared" and "finished" set.
	PipelineOK = "t.ok"
	// PipelineFail's step "work" fails at once, non-retryably, with
	// ErrorCodeFail: the execution ends DLQ.
	PipelineFail = "t.fail"
	// PipelineWait's await step "approve" parks the execution
	// (WAITING_EXTERNAL); a completion runs "finish" with the completion
	// payload and the execution succeeds.
	PipelineWait = "t.wait"
	// PipelineRetry's step "work" fails its first attempt retryably with
	// ErrorCodeRetry, waits RetryDelay in WAIT_RETRY, and succeeds on the
	// second.
	PipelineRetry = "t.retry"
	// PipelineMap's one step "fan" is a map over its input, a JSON list:
	// each element runs as a child execution of PipelineWait, one at a
	// time (MaxInFlight 1). The parent waits (WAITING_CHILDREN) until
	// every child's await is completed and the child succeeded.
	PipelineMap = "t.map"
	// PipelineVersioned has two definitions: version label "v2", the
	// current one, whose one step "take" decodes a typed input (an object
	// of "orderId", required, and "qty": its input schema describes it),
	// and "v1", draining, whose step "old" takes any JSON.
	PipelineVersioned = "t.versioned"
	// ErrorCodeFail is the error code of PipelineFail's failure.
	ErrorCodeFail = "always_fails"
	// ErrorCodeRetry is the error code of PipelineRetry's first attempt.
	ErrorCodeRetry = "flaky"
	// RetryDelay is PipelineRetry's wait before its second attempt.
	RetryDelay = 300 * time.Millisecond
	// AdminToken is the operator token of the server.
	AdminToken = "clitest-admin-token"
)

// Target is a server under test.
type Target struct {
	// URL is the base URL of the API.
	URL string
	// AdminToken is its operator token.
	AdminToken string
	// tokens are the resume tokens the await steps handed out.
	tokens *tokens
}

// tokens records the await id and resume token of each parked execution.
type tokens struct {
	mu sync.Mutex
	m  map[string][2]string
}

func (t *tokens) put(executionID, awaitID, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[executionID] = [2]string{awaitID, token}
}

// ResumeToken returns the await id and resume token the await step of
// PipelineWait handed out for an execution, waiting up to 5 s for it.
func (t *Target) ResumeToken(executionID string) (awaitID, token string, err error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		t.tokens.mu.Lock()
		v, ok := t.tokens.m[executionID]
		t.tokens.mu.Unlock()
		if ok {
			return v[0], v[1], nil
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("clitest: no resume token for execution %s", executionID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Registry returns the test pipelines, whose await step records its
// resume tokens in rec.
func registry(rec *tokens) (*pipeline.Registry, error) {
	type doc = map[string]any
	mark := func(name, field string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in doc) (doc, error) {
			if in == nil {
				in = doc{}
			}
			in[field] = true
			return in, nil
		})
	}
	fail := pipeline.NewStep("work", func(context.Context, pipeline.StepInfo, doc) (doc, error) {
		return nil, pipeline.NonRetryable(ErrorCodeFail, errors.New("this step always fails"))
	})
	flaky := pipeline.NewStep("work", func(_ context.Context, info pipeline.StepInfo, in doc) (doc, error) {
		if info.Attempt == 1 {
			return nil, pipeline.Retryable(ErrorCodeRetry, errors.New("first attempts fail"))
		}
		return in, nil
	}, pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 1, Delay: RetryDelay, Multiplier: 1, MaxDelay: RetryDelay}))
	approve := await.Step("approve", await.Spec{}, func(_ context.Context, req await.Request) error {
		rec.put(req.Info.ExecutionID, req.AwaitID, req.Token)
		return nil
	})
	type order struct {
		OrderID string `json:"orderId" jsonschema:"required"`
		Qty     int    `json:"qty"`
	}
	take := pipeline.NewStep("take", func(_ context.Context, _ pipeline.StepInfo, in order) (order, error) { return in, nil })
	return pipeline.NewRegistry(
		pipeline.Pipeline{ID: PipelineOK, Steps: []pipeline.Step{mark("prepare", "prepared"), mark("finish", "finished")}},
		pipeline.Pipeline{ID: PipelineFail, Steps: []pipeline.Step{fail}},
		pipeline.Pipeline{ID: PipelineWait, Steps: []pipeline.Step{approve, mark("finish", "finished")}},
		pipeline.Pipeline{ID: PipelineRetry, Steps: []pipeline.Step{flaky}},
		pipeline.Pipeline{ID: PipelineMap, Steps: []pipeline.Step{pipeline.Map("fan", PipelineWait, pipeline.MapOptions{MaxInFlight: 1})}},
		pipeline.Pipeline{ID: PipelineVersioned, Version: "v1", Draining: true, Steps: []pipeline.Step{mark("old", "old")}},
		pipeline.Pipeline{ID: PipelineVersioned, Version: "v2", Steps: []pipeline.Step{take}},
	)
}

// Real starts server.Serve as qasync serve runs by default (the embedded
// store, here in a temporary data directory of the test's: never .qasync
// in the package directory) with the test pipelines, tenants from the
// X-Tenant-Id header and AdminToken, and stops it when the test ends.
func Real(t testing.TB) *Target {
	t.Helper()
	rec := &tokens{m: map[string][2]string{}}
	reg, err := registry(rec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.EmbeddedDataDir = t.TempDir()
	useState(t, &cfg)
	cfg.HTTPAddr, cfg.TenantSource = "127.0.0.1:0", "header"
	cfg.AdminToken = AdminToken
	cfg.AwaitResumeTokenSecret = "clitest-resume-token-secret-0123456789"
	cfg.SweepInterval = 100 * time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	started, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, cfg, reg, server.WithLogger(slog.New(slog.DiscardHandler)),
			server.OnStarted(func(a net.Addr) { started <- a }))
	}()
	var addr net.Addr
	select {
	case addr = <-started:
	case err := <-done:
		stop()
		t.Fatalf("clitest: server.Serve: %v", err)
	}
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("clitest: server.Serve: %v", err)
		}
	})
	return &Target{URL: "http://" + addr.String(), AdminToken: AdminToken, tokens: rec}
}

// StateEnv names the environment variable that picks the providers of
// Real: "embedded" (or unset), "memory" or "dynamo".
const StateEnv = "QASYNC_CLITEST_STATE"

// useState sets cfg's providers from StateEnv. For dynamo it creates a
// fresh set of tables and queues on the local stack (removed when the
// test ends) and points cfg at them, with timings for a test.
func useState(t testing.TB, cfg *config.Config) {
	t.Helper()
	switch v := os.Getenv(StateEnv); v {
	case "", "embedded":
	case "memory":
		cfg.StateProvider = "memory"
	case "dynamo":
		clients, _ := awstest.Clients(t)
		n := awstest.Names(t)
		awstest.Tables(t, clients, schema.Tables(n)...)
		urls := awstest.Queues(t, clients, schema.Queues(n)...)
		cfg.StateProvider, cfg.DispatcherProvider, cfg.DLQProvider = "dynamo", "sqs", "sqs"
		cfg.ExecutionTable, cfg.PayloadTable, cfg.DeadLetterTable = n.ExecutionTable, n.PayloadTable, n.DeadLetterTable
		cfg.EffectTable, cfg.HistoryTable = n.EffectTable, n.HistoryTable
		cfg.QueueURL, cfg.DLQURL = urls[n.WorkQueue], urls[n.DLQQueue]
		cfg.ItemRejectProvider, cfg.ItemRejectQueueURL = "sqs", urls[n.RejectQueue]
		cfg.SQSWaitSeconds, cfg.HistoryPollInterval = 1, 100*time.Millisecond
	default:
		t.Fatalf("clitest: %s=%q: want embedded, memory or dynamo", StateEnv, v)
	}
}

// WithoutHistory returns a target that forwards every request to tg but
// answers GET /v1/executions/{id}/history as a server that predates the
// route does (404, problem not-found): the real server always keeps a
// history, so this is the only way to test a client against one without
// it. It stops when the test ends.
func WithoutHistory(t testing.TB, tg *Target) *Target {
	t.Helper()
	u, err := url.Parse(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/executions/") && strings.HasSuffix(r.URL.Path, "/history") {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"type":"urn:qasync:problem:not-found","title":"Not found","status":404,"detail":"No route matches the request path."}`+"\n")
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Target{URL: srv.URL, AdminToken: tg.AdminToken, tokens: tg.tokens}
}

// LaggingHistory returns a target that forwards every request to tg but
// leaves out of each history the events committed less than lag ago: the
// history as a DynamoDB deployment serves it, from the execution table's
// stream, which trails the row. A page that lost events is the last one
// (no nextCursor) and ends (endCursor) after the last event it kept, as
// the server's own page of those events would. It stops when the test
// ends.
func LaggingHistory(t testing.TB, tg *Target, lag time.Duration) *Target {
	t.Helper()
	u, err := url.Parse(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(resp.Request.URL.Path, "/history") {
			return nil
		}
		var doc historyPage
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			return err
		}
		_ = resp.Body.Close()
		seen := doc.Events[:0]
		for _, raw := range doc.Events {
			var ev struct {
				At time.Time `json:"at"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				return err
			}
			if time.Since(ev.At) >= lag {
				seen = append(seen, raw)
			}
		}
		if len(seen) < len(doc.Events) {
			end, err := endAfter(resp.Request, len(seen))
			if err != nil {
				return err
			}
			doc.Events, doc.NextCursor, doc.EndCursor = seen, "", end
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return &Target{URL: srv.URL, AdminToken: tg.AdminToken, tokens: tg.tokens}
}

// historyPage is a history answer with its events left as they came.
type historyPage struct {
	ExecutionID string            `json:"executionId"`
	Events      []json.RawMessage `json:"events"`
	NextCursor  string            `json:"nextCursor,omitempty"`
	EndCursor   string            `json:"endCursor,omitempty"`
}

// endAfter returns the cursor after the first n events of the page req
// asked for: req's cursor when n is 0, else the server's endCursor of
// the same page cut to n events (a history only grows at its end, so its
// first n events are the same ones).
func endAfter(req *http.Request, n int) (string, error) {
	q := req.URL.Query()
	if n == 0 {
		return q.Get("cursor"), nil
	}
	q.Set("limit", strconv.Itoa(n))
	again := req.Clone(req.Context())
	again.URL.RawQuery, again.RequestURI = q.Encode(), ""
	resp, err := http.DefaultTransport.RoundTrip(again)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var doc historyPage
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK || len(doc.Events) != n {
		return "", fmt.Errorf("clitest: the page of %d events after %q: %d, %d events", n, q.Get("cursor"), resp.StatusCode, len(doc.Events))
	}
	return doc.EndCursor, nil
}

// Eventually calls check until it returns nil, for at most 15 s, and
// fails the test with check's last error after that. What a DynamoDB
// deployment serves from the execution table's stream (the history) or
// from an index (lists, dead letters) trails the row by up to about a
// second; tests that read it right after a status use this.
func Eventually(t testing.TB, check func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
