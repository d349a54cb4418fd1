package lambdafn_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/lambdafn"
	dlqfn "github.com/qasync/qasync/shared/lambdafn/dlq"
	historyfn "github.com/qasync/qasync/shared/lambdafn/history"
	submitfn "github.com/qasync/qasync/shared/lambdafn/submit"
	sweeperfn "github.com/qasync/qasync/shared/lambdafn/sweeper"
	workerfn "github.com/qasync/qasync/shared/lambdafn/worker"
	"github.com/qasync/qasync/shared/pipeline"
)

// TestBootMemory: the functions booted on one memory backend (as the
// deployed ones share DynamoDB) work: the submit handler runs a
// submission to its result (the in-process dispatcher) in the IAM
// caller's tenant (tenant-source iam), the worker handler keeps the
// configured lease as its time margin, the sweeper handler sweeps. Boot
// logs boot_completed (with the config, never the admin token) once per
// function, each record naming the function.
func TestBootMemory(t *testing.T) {
	var out logtest.Buffer
	shared := sharedMemory()
	boot := func(fn lambdafn.Function) *lambdafn.Env {
		env, err := lambdafn.Boot(context.Background(), fn, registry(t), lambdafn.WithBackend(shared), lambdafn.WithLogOutput(&out),
			lambdafn.WithLookupEnv(envMap(map[string]string{
				"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN":        "s3cr3t-token",
				"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "iam",
				"PIPELINE_ORCHESTRATOR_LEASE_MS":           "1500",
				"AWS_LAMBDA_FUNCTION_NAME":                 "qasync-" + string(fn),
				"AWS_LAMBDA_LOG_LEVEL":                     "DEBUG",
			})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Close(context.Background()) })
		return env
	}
	env := boot(submitfn.Function)
	if env.Logger == nil || env.Function != submitfn.Function || env.Config.TenantSource != "iam" || env.Config.Lease != 1500*time.Millisecond {
		t.Fatalf("env %+v", env)
	}

	s := submit(t, env, echoID, `{"echo":{"n":1}}`)
	awaitStatus(t, env, s.ExecutionID, "SUCCEEDED")
	if resp := call(t, env, http.MethodGet, "/v1/executions/"+s.ExecutionID+"/result", ""); resp.StatusCode != http.StatusOK || resp.Body != `{"echo":{"n":1}}` {
		t.Errorf("result %d %q", resp.StatusCode, resp.Body)
	}
	other := apiRequest(http.MethodGet, "/v1/executions/"+s.ExecutionID, "")
	other.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/other-client/x"
	var resp events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), handler(t, env), other, &resp)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("another IAM role read the execution: %d %s", resp.StatusCode, resp.Body)
	}

	// A duplicate work item of the finished execution: acknowledged when
	// there is time for a lease (10 s), left for another invocation when
	// there is less than the 1.5 s lease.
	worker := handler(t, boot(workerfn.Function))
	batch := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1",
		Body: `{"tenantId":"123456789012.role.order-service","executionId":"` + s.ExecutionID + `","pipelineId":"` + echoID + `"}`}}}
	for _, tc := range []struct {
		left     time.Duration
		failures int
	}{{10 * time.Second, 0}, {time.Second, 1}} {
		ctx, cancel := context.WithTimeout(context.Background(), tc.left)
		var r events.SQSEventResponse
		invoke(t, ctx, worker, batch, &r)
		cancel()
		if len(r.BatchItemFailures) != tc.failures {
			t.Errorf("worker with %s left: %d batch item failures, want %d", tc.left, len(r.BatchItemFailures), tc.failures)
		}
	}
	var rep struct {
		Sweeps int `json:"sweeps"`
	}
	invoke(t, context.Background(), handler(t, boot(sweeperfn.Function)), events.EventBridgeEvent{DetailType: "Scheduled Event"}, &rep)
	if rep.Sweeps < 1 {
		t.Errorf("sweep report %+v", rep)
	}

	logs := out.String()
	if strings.Contains(logs, "s3cr3t-token") {
		t.Error("the admin token reached the logs")
	}
	for _, line := range out.Lines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if f, _ := m["function"].(string); !strings.HasPrefix(f, "qasync-") {
			t.Errorf("no function key: %s", line)
		}
	}
	if len(logEvents(t, out.Lines(), "boot_completed")) != 3 {
		t.Errorf("boot events missing:\n%s", logs)
	}
}

// TestBootDLQFunctionRecords: the dlq function boots on the memory
// backend (warning boot_not_durable) and its handler records what it is
// given (a body that is neither an envelope nor a work item becomes a
// poison record, logged without the body).
func TestBootDLQFunctionRecords(t *testing.T) {
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), dlqfn.Function, registry(t), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close(context.Background())
	var resp events.SQSEventResponse
	invoke(t, context.Background(), handler(t, env), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1", Body: "s3cr3t garbage"}}}, &resp)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures %+v", resp.BatchItemFailures)
	}
	recs := logEvents(t, out.Lines(), "dead_letter_recorded")
	if len(recs) != 1 || recs[0]["kind"] != "poison" || recs[0]["created"] != true {
		t.Errorf("dead_letter_recorded events %v", recs)
	}
	if strings.Contains(out.String(), "s3cr3t") {
		t.Error("the body reached the logs")
	}
	if len(logEvents(t, out.Lines(), "boot_not_durable")) != 1 {
		t.Errorf("no boot_not_durable warning:\n%s", out.String())
	}
}

// TestBootDLQFunctionNeedsARecorder: a backend that keeps no dead-letter
// records fails the dlq function's boot with ErrNoRecorder.
func TestBootDLQFunctionNeedsARecorder(t *testing.T) {
	noRecords := backend.Func(func(ctx context.Context, env backend.Env) (*backend.Seams, error) {
		s, err := memory.Backend().Open(ctx, env)
		if err == nil {
			s.Recorder = nil
		}
		return s, err
	})
	var out logtest.Buffer
	_, err := lambdafn.Boot(context.Background(), dlqfn.Function, registry(t), lambdafn.WithBackend(noRecords), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(nil)))
	if !errors.Is(err, lambdafn.ErrNoRecorder) || !strings.Contains(out.String(), `"boot_failed"`) {
		t.Fatalf("dlq function without a recorder: %v, logs %s", err, out.String())
	}
}

// TestHandlerOfAnEnvThatDidNotBoot: Handler refuses an Env that did not
// boot; Boot refuses a function whose package is not linked, naming the
// five; on the memory backend there is no history function (no stream).
func TestHandlerOfAnEnvThatDidNotBoot(t *testing.T) {
	var zero *lambdafn.Env
	if _, err := zero.Handler(); err == nil {
		t.Error("a nil Env gave a handler")
	}
	if _, err := (&lambdafn.Env{}).Handler(); err == nil {
		t.Error("an Env that did not boot gave a handler")
	}
	_, err := lambdafn.Boot(context.Background(), "scheduler", registry(t), lambdafn.WithLogOutput(&logtest.Buffer{}), lambdafn.WithLookupEnv(envMap(nil)))
	if err == nil || !strings.Contains(err.Error(), "submit, worker, sweeper, dlq or history") {
		t.Errorf("unknown function: %v", err)
	}
	_, err = lambdafn.Boot(context.Background(), historyfn.Function, registry(t), lambdafn.WithLogOutput(&logtest.Buffer{}), lambdafn.WithLookupEnv(envMap(nil)))
	if !errors.Is(err, lambdafn.ErrNoHistory) {
		t.Errorf("history function on the memory backend: err = %v, want ErrNoHistory", err)
	}
}

// TestBootBadConfig: an invalid setting fails Boot, logged as boot_failed
// naming the key; the Env has its logger and no handlers.
func TestBootBadConfig(t *testing.T) {
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), submitfn.Function, registry(t), lambdafn.WithLogOutput(&out),
		lambdafn.WithLookupEnv(envMap(map[string]string{"PIPELINE_ORCHESTRATOR_LEASE_MS": "5"})))
	if err == nil || env.Logger == nil {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(out.String(), `"boot_failed"`) || !strings.Contains(out.String(), "lease-ms") {
		t.Errorf("logs %s", out.String())
	}
	if _, err := env.Handler(); err == nil {
		t.Error("a failed boot gave a handler")
	}
}

// TestBootNeedsPipelines: Boot without a registry (and without
// WithPipelines) fails, logged as boot_failed.
func TestBootNeedsPipelines(t *testing.T) {
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), submitfn.Function, nil, lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(nil)))
	if err == nil || !strings.Contains(err.Error(), "registry") || !strings.Contains(out.String(), `"boot_failed"`) {
		t.Fatalf("err %v, logs %s", err, out.String())
	}
	if _, err := env.Handler(); err == nil {
		t.Error("a failed boot gave a handler")
	}
}

// TestBootWithPipelinesReadsTheConfig: WithPipelines builds the registry
// from the configuration Boot loaded (here: a pipeline served only with
// an output bucket configured), and its error fails Boot.
func TestBootWithPipelinesReadsTheConfig(t *testing.T) {
	const gated = "t.gated"
	build := func(cfg config.Config) (*pipeline.Registry, error) {
		ps := []pipeline.Pipeline{{ID: echoID, Steps: []pipeline.Step{pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in any) (any, error) { return in, nil })}}}
		if cfg.OutputBucket != "" {
			ps = append(ps, pipeline.Pipeline{ID: gated, Steps: ps[0].Steps})
		}
		return pipeline.NewRegistry(ps...)
	}
	for _, enabled := range []bool{false, true} {
		m := map[string]string{"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "iam"}
		if enabled {
			m["PIPELINE_ORCHESTRATOR_OUTPUT_BUCKET"] = "reports"
		}
		env, err := lambdafn.Boot(context.Background(), submitfn.Function, nil, lambdafn.WithPipelines(build), lambdafn.WithLogOutput(&logtest.Buffer{}), lambdafn.WithLookupEnv(envMap(m)))
		if err != nil {
			t.Fatal(err)
		}
		resp := call(t, env, http.MethodPost, "/v1/pipelines/"+gated+"/executions", `{"echo":1}`)
		_ = env.Close(context.Background())
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusAccepted}[enabled]; resp.StatusCode != want {
			t.Errorf("output.bucket set %v: submit of %s answered %d, want %d: %s", enabled, gated, resp.StatusCode, want, resp.Body)
		}
	}

	var out logtest.Buffer
	bad := errors.New("pipelines: no such setting")
	_, err := lambdafn.Boot(context.Background(), submitfn.Function, nil, lambdafn.WithPipelines(func(config.Config) (*pipeline.Registry, error) { return nil, bad }),
		lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(nil)))
	if !errors.Is(err, bad) || !strings.Contains(out.String(), `"boot_failed"`) {
		t.Errorf("err %v, logs %s", err, out.String())
	}
}

// TestLoggerAddsRequestID: records logged with an invocation's context
// carry request_id, under Lambda's JSON keys.
func TestLoggerAddsRequestID(t *testing.T) {
	var out logtest.Buffer
	log := lambdafn.NewLogger(&out, nil).With("component", "test")
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-42"})
	log.InfoContext(ctx, "hello", "event", "hello")
	log.DebugContext(ctx, "hidden")
	lines := out.Lines()
	if len(lines) != 1 {
		t.Fatalf("lines %q", lines)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m["request_id"] != "req-42" || m["message"] != "hello" || m["timestamp"] == nil || m["level"] != "INFO" || m["component"] != "test" {
		t.Errorf("record %v", m)
	}
}

// TestBootRefusesHeaderTenantInLambda: in Lambda (AWS_LAMBDA_FUNCTION_NAME
// set) Boot refuses http.tenant-source=header, which trusts X-Tenant-Id
// from any caller, naming the key, unless http.allow-header-tenant=true;
// outside Lambda the header source is still accepted.
func TestBootRefusesHeaderTenantInLambda(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		refuse bool
	}{
		{"lambda, header tenant", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "qasync-submit"}, true},
		{"lambda, header tenant allowed", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "qasync-submit", "PIPELINE_ORCHESTRATOR_HTTP_ALLOW_HEADER_TENANT": "true"}, false},
		{"lambda, iam tenant", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "qasync-submit", "PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "iam"}, false},
		{"not lambda, header tenant", map[string]string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out logtest.Buffer
			env, err := lambdafn.Boot(context.Background(), submitfn.Function, registry(t), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(tc.env)))
			if !tc.refuse {
				if err != nil {
					t.Fatalf("Boot: %v", err)
				}
				_ = env.Close(context.Background())
				return
			}
			if err == nil {
				_ = env.Close(context.Background())
				t.Fatal("Boot accepted tenant-source header in Lambda")
			}
			for _, key := range []string{"pipeline.orchestrator.http.tenant-source", "pipeline.orchestrator.http.allow-header-tenant"} {
				if !strings.Contains(err.Error(), key) {
					t.Errorf("error does not name %s: %v", key, err)
				}
			}
			if _, herr := env.Handler(); herr == nil || !strings.Contains(out.String(), `"boot_failed"`) {
				t.Errorf("handler error %v, logs %s", herr, out.String())
			}
		})
	}
}

// TestBootRefusesTheEmbeddedStore: a function configured with the
// embedded store (one process's data directory) is refused with an error
// naming state-provider; with no state provider set, a function runs in
// memory (it never defaults to the embedded store).
func TestBootRefusesTheEmbeddedStore(t *testing.T) {
	_, err := lambdafn.Boot(context.Background(), workerfn.Function, registry(t), lambdafn.WithLogOutput(&logtest.Buffer{}),
		lambdafn.WithLookupEnv(envMap(map[string]string{"PIPELINE_ORCHESTRATOR_STATE_PROVIDER": "embedded"})))
	if err == nil || !strings.Contains(err.Error(), "pipeline.orchestrator.state-provider") {
		t.Fatalf("Boot with state-provider embedded: %v, want a refusal naming the key", err)
	}
	env, err := lambdafn.Boot(context.Background(), workerfn.Function, registry(t), lambdafn.WithLogOutput(&logtest.Buffer{}), lambdafn.WithLookupEnv(envMap(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close(context.Background())
	if env.Config.StateProvider != "memory" {
		t.Fatalf("state provider %q with nothing set, want memory", env.Config.StateProvider)
	}
}
