package backend_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/submit"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
	"github.com/qasync/qasync/shared/store"
)

// audited is a backend of a service's own, written against the public
// API the way a user would write one: it opens another backend (here the
// memory provider, standing for any) and counts every write of an
// execution row its runtime makes, as a service might meter or audit
// them. The tests check that it passes the conformance suite and that a
// runtime runs pipelines on it to the end, in a long-running process
// (server.Start) and in a Lambda function (lambdafn.Boot), each through
// its WithBackend.
type audited struct {
	inner  backend.Backend
	writes atomic.Int64
}

// Open implements backend.Backend.
func (a *audited) Open(ctx context.Context, env backend.Env) (*backend.Seams, error) {
	s, err := a.inner.Open(ctx, env)
	if err != nil {
		return nil, err
	}
	s.State = &auditedState{Store: s.State, writes: &a.writes}
	return s, nil
}

// auditedState counts the row writes of the store it wraps.
type auditedState struct {
	store.Store
	writes *atomic.Int64
}

func (s *auditedState) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	s.writes.Add(1)
	return s.Store.CreateOrGet(ctx, req)
}

func (s *auditedState) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	s.writes.Add(1)
	return s.Store.Claim(ctx, req)
}

func (s *auditedState) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	s.writes.Add(1)
	return s.Store.Update(ctx, g, next)
}

// memoryConfig is a configuration whose provider keys name nothing
// durable (the user's backend serves every seam but the defaults).
func memoryConfig(*testing.T) config.Config {
	c := config.Default()
	c.StateProvider, c.TenantSource = "memory", "none"
	return c
}

// upper is a one-step pipeline.
func upper(t *testing.T) *pipeline.Registry {
	t.Helper()
	type in struct {
		Name string `json:"name"`
	}
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "t.hello", Steps: []pipeline.Step{
		pipeline.NewStep("greet", func(_ context.Context, _ pipeline.StepInfo, v in) (map[string]string, error) {
			return map[string]string{"greeting": "hello, " + v.Name}, nil
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestUserBackendConforms: the user's backend passes the suite of every
// seam it opens.
func TestUserBackendConforms(t *testing.T) {
	backendtest.ExerciseBackend(t, &audited{inner: memory.Backend()}, memoryConfig)
}

// TestUserBackendRunsAPipelineInServe: server.Start with WithBackend runs
// a submission to SUCCEEDED on the user's backend (its writes counted:
// the submit, the claim and the commit).
func TestUserBackendRunsAPipelineInServe(t *testing.T) {
	a := &audited{inner: memory.Backend()}
	finished := make(chan server.Finished, 1)
	ctx := context.Background()
	rt, err := server.Start(ctx, memoryConfig(t), upper(t), server.WithBackend(a),
		server.OnFinished(func(f server.Finished) { finished <- f }), server.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	in, _ := payload.JSON(map[string]string{"name": "ada"})
	if _, err := rt.Submit(ctx, "t1", "t.hello", "k-1", in); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-finished:
		if f.Status != "SUCCEEDED" {
			t.Fatalf("finished %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no terminal commit in 10s")
	}
	if n := a.writes.Load(); n < 3 {
		t.Errorf("%d row writes through the user's backend, want at least 3 (submit, claim, commit)", n)
	}
}

// TestUserBackendRunsAPipelineInALambdaFunction: the submit function
// booted with WithBackend takes a submission from an API Gateway event,
// runs it on the user's backend (the in-process dispatcher, a function
// tried out without SQS) and serves its result.
func TestUserBackendRunsAPipelineInALambdaFunction(t *testing.T) {
	a := &audited{inner: memory.Backend()}
	env, err := lambdafn.Boot(context.Background(), submit.Function, upper(t), lambdafn.WithBackend(a), lambdafn.WithLogOutput(io.Discard),
		lambdafn.WithLookupEnv(func(k string) (string, bool) {
			v, ok := map[string]string{"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "none"}[k]
			return v, ok
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close(context.Background())
	h, err := env.Handler()
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		var ev events.APIGatewayV2HTTPRequest
		ev.Version, ev.RawPath, ev.Body = "2.0", path, body
		ev.Headers = map[string]string{"content-type": "application/json", "idempotency-key": "k-1"}
		ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = method, path
		in, _ := json.Marshal(ev)
		out, err := lambda.NewHandler(h).Invoke(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	sub := call(http.MethodPost, "/v1/pipelines/t.hello/executions", `{"name":"ada"}`)
	var doc struct {
		ResultURL string `json:"resultUrl"`
	}
	if sub.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(sub.Body), &doc) != nil {
		t.Fatalf("submit: %d %s", sub.StatusCode, sub.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := call(http.MethodGet, doc.ResultURL, "")
		if r.StatusCode == http.StatusOK {
			if r.Body != `{"greeting":"hello, ada"}` {
				t.Fatalf("result %s", r.Body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("result: %d %s after 10s", r.StatusCode, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := a.writes.Load(); n < 3 {
		t.Errorf("%d row writes through the user's backend, want at least 3", n)
	}
}
