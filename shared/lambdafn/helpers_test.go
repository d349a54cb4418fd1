package lambdafn_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/lambdafn"
	submitfn "github.com/qasync/qasync/shared/lambdafn/submit"
	"github.com/qasync/qasync/shared/pipeline"
)

// The tests boot the functions through the public API (Boot, Env.Handler,
// the function packages), with these test-local pipelines, and check what
// booted by invoking the handlers as the Lambda runtime would.
const (
	// echoID is a one-step pipeline returning {"echo": <its input's echo>}.
	echoID = "t.echo"
	// approveID is a one-step await pipeline: its step hands the await's
	// resume token to the test (testPipelines' channel) and parks.
	approveID = "t.approve"
)

// envMap is a lookupEnv over m.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// testPipelines returns the registry of echoID and approveID, and the
// channel receiving every request approveID's await step notifies.
func testPipelines(t *testing.T) (*pipeline.Registry, <-chan await.Request) {
	t.Helper()
	awaits := make(chan await.Request, 4)
	type echo struct {
		Echo json.RawMessage `json:"echo"`
	}
	reg, err := pipeline.NewRegistry(
		pipeline.Pipeline{ID: echoID, Steps: []pipeline.Step{
			pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in echo) (echo, error) { return in, nil }),
		}},
		pipeline.Pipeline{ID: approveID, Steps: []pipeline.Step{
			await.Step("approve", await.Spec{}, func(_ context.Context, req await.Request) error {
				awaits <- req
				return nil
			}),
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg, awaits
}

// registry is testPipelines' registry alone.
func registry(t *testing.T) *pipeline.Registry {
	t.Helper()
	reg, _ := testPipelines(t)
	return reg
}

// handler returns env's handler, failing the test on an error.
func handler(t *testing.T, env *lambdafn.Env) any {
	t.Helper()
	h, err := env.Handler()
	if err != nil {
		t.Fatalf("Handler of %s: %v", env.Function, err)
	}
	return h
}

// sharedMemory is a backend whose every Open returns the seams of one
// memory backend, so that functions booted on it (each with its own
// in-process dispatcher) share their executions, as the deployed
// functions share DynamoDB.
func sharedMemory() backend.Backend {
	var (
		mu    sync.Mutex
		seams *backend.Seams
	)
	return backend.Func(func(ctx context.Context, env backend.Env) (*backend.Seams, error) {
		mu.Lock()
		defer mu.Unlock()
		if seams == nil {
			s, err := memory.Backend().Open(ctx, env)
			if err != nil {
				return nil, err
			}
			seams = s
		}
		c := *seams
		return &c, nil
	})
}

// invoke feeds ev (JSON-encoded) through h as the Lambda runtime would and
// decodes the response into out.
func invoke(t *testing.T, ctx context.Context, h any, ev, out any) {
	t.Helper()
	in, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lambda.NewHandler(h).Invoke(ctx, in)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode response %s: %v", b, err)
	}
}

// apiRequest is an API Gateway HTTP API (payload 2.0) event for method and
// path, signed by the IAM role order-service of account 123456789012
// (tenant "123456789012.role.order-service" under http.tenant-source=iam).
func apiRequest(method, path, body string) events.APIGatewayV2HTTPRequest {
	var ev events.APIGatewayV2HTTPRequest
	ev.Version, ev.RawPath, ev.Body = "2.0", path, body
	ev.Headers = map[string]string{"content-type": "application/json"}
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = method, path
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			AccountID: "123456789012", UserARN: "arn:aws:sts::123456789012:assumed-role/order-service/order-service",
		},
	}
	return ev
}

// call invokes env's handler (the submit function's) with a request and
// returns the response.
func call(t *testing.T, env *lambdafn.Env, method, path, body string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	var resp events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), handler(t, env), apiRequest(method, path, body), &resp)
	return resp
}

// submitted is the part of a submit answer the tests read.
type submitted struct {
	ExecutionID string `json:"executionId"`
	PipelineID  string `json:"pipelineId"`
}

// submit posts body to pipelineID's executions through env's Submit
// handler and returns the answer, failing the test unless it is 202.
func submit(t *testing.T, env *lambdafn.Env, pipelineID, body string) submitted {
	t.Helper()
	resp := call(t, env, http.MethodPost, "/v1/pipelines/"+pipelineID+"/executions", body)
	var s submitted
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(resp.Body), &s) != nil || s.ExecutionID == "" {
		t.Fatalf("submit of %s: %d %s", pipelineID, resp.StatusCode, resp.Body)
	}
	return s
}

// awaitStatus polls the execution's status through env's Submit handler
// until it is want (failing the test after 10 s).
func awaitStatus(t *testing.T, env *lambdafn.Env, id, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := call(t, env, http.MethodGet, "/v1/executions/"+id, "")
		var doc struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &doc)
		if doc.Status == want {
			return
		}
		if time.Now().After(deadline) || resp.StatusCode != http.StatusOK {
			t.Fatalf("execution %s: %d %s, want status %s", id, resp.StatusCode, resp.Body, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitNotified waits for approveID's await step to notify.
func awaitNotified(t *testing.T, awaits <-chan await.Request) await.Request {
	t.Helper()
	select {
	case req := <-awaits:
		return req
	case <-time.After(10 * time.Second):
		t.Fatal("the await step was not run within 10 s")
		return await.Request{}
	}
}

// logEvents decodes the JSON log lines and returns those whose "event" is
// name.
func logEvents(t *testing.T, lines []string, name string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if m["event"] == name {
			out = append(out, m)
		}
	}
	return out
}

// bootSubmit boots the submit function for reg with opts, failing the
// test on an error; the test closes it.
func bootSubmit(t *testing.T, reg *pipeline.Registry, opts ...lambdafn.Option) *lambdafn.Env {
	t.Helper()
	env, err := lambdafn.Boot(context.Background(), submitfn.Function, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close(context.Background()) })
	return env
}
