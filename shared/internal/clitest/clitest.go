// Package clitest runs the servers the tests of package client and of the
// qasync client commands talk to: the real server (server.Serve on memory
// providers, in this process) with a small registry of test pipelines,
// and, for the operator routes of issue 13 while they are not on the real
// server yet, a fake that implements their HTTP contract over a model of
// the same pipelines. Test bodies take a *Target and run unchanged against
// either, so they switch to the real server as soon as it serves the
// routes (Operator probes GET /openapi.json).
package clitest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
)

// The test pipelines, served by both targets unless said otherwise.
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
	// second (the real server only).
	PipelineRetry = "t.retry"
	// ErrorCodeFail is the error code of PipelineFail's failure.
	ErrorCodeFail = "always_fails"
	// ErrorCodeRetry is the error code of PipelineRetry's first attempt.
	ErrorCodeRetry = "flaky"
	// RetryDelay is PipelineRetry's wait before its second attempt.
	RetryDelay = 300 * time.Millisecond
	// AdminToken is the operator token of both targets.
	AdminToken = "clitest-admin-token"
)

// Target is a server under test.
type Target struct {
	// URL is the base URL of the API.
	URL string
	// AdminToken is its operator token.
	AdminToken string
	// Real is true for server.Serve, false for the contract fake.
	Real bool
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
	return pipeline.NewRegistry(
		pipeline.Pipeline{ID: PipelineOK, Steps: []pipeline.Step{mark("prepare", "prepared"), mark("finish", "finished")}},
		pipeline.Pipeline{ID: PipelineFail, Steps: []pipeline.Step{fail}},
		pipeline.Pipeline{ID: PipelineWait, Steps: []pipeline.Step{approve, mark("finish", "finished")}},
		pipeline.Pipeline{ID: PipelineRetry, Steps: []pipeline.Step{flaky}},
	)
}

// Real starts server.Serve on memory providers with the test pipelines,
// tenants from the X-Tenant-Id header and AdminToken, and stops it when
// the test ends.
func Real(t testing.TB) *Target {
	t.Helper()
	rec := &tokens{m: map[string][2]string{}}
	reg, err := registry(rec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
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
	return &Target{URL: "http://" + addr.String(), AdminToken: AdminToken, Real: true, tokens: rec}
}

// TargetEnv forces the target of Operator: "real" (the real server, even
// if it lacks the routes) or "fake" (the contract fake).
const TargetEnv = "QASYNC_CLI_TARGET"

// Operator returns the target of the operator routes' tests (list,
// history, cancel, bulk re-drives, dead letters, openapi.json): the real
// server when it serves GET /openapi.json (the operator plane has landed),
// else the contract fake; TargetEnv overrides the choice.
func Operator(t testing.TB) *Target {
	t.Helper()
	switch os.Getenv(TargetEnv) {
	case "real":
		return Real(t)
	case "fake":
		return Fake(t)
	}
	real := Real(t)
	resp, err := http.Get(real.URL + "/openapi.json")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return real
		}
	}
	t.Logf("clitest: the real server does not serve the operator routes yet: testing against the contract fake (%s=real forces the real server)", TargetEnv)
	return Fake(t)
}
