package lambdafn_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/qasync/qasync/pipelines"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/qasync/qasync/pipelines/diag"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/lambdafn"
)

// envMap is a lookupEnv over m.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestBootMemory: Boot on the memory providers returns a usable Env,
// logs boot_completed (with the config, never the admin token) and warns
// that the providers are not durable.
func TestBootMemory(t *testing.T) {
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(map[string]string{
		"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN":        "s3cr3t-token",
		"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "iam",
		"PIPELINE_ORCHESTRATOR_LEASE_MS":           "1500",
		"AWS_LAMBDA_FUNCTION_NAME":                 "qasync-worker",
		"AWS_LAMBDA_LOG_LEVEL":                     "DEBUG",
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close(context.Background())
	if env.Set == nil || env.Set.Runtime == nil || env.Logger == nil || env.Config.TenantSource != "iam" || env.Set.Runtime.Config().Lease.Milliseconds() != 1500 {
		t.Fatalf("env %+v", env)
	}
	if env.HTTPHandler() == nil {
		t.Fatal("no HTTP handler")
	}
	logs := out.String()
	if strings.Contains(logs, "s3cr3t-token") {
		t.Error("the admin token reached the logs")
	}
	var completed, notDurable bool
	for _, line := range out.Lines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["function"] != "qasync-worker" {
			t.Errorf("no function key: %s", line)
		}
		completed = completed || m["event"] == "boot_completed"
		notDurable = notDurable || m["event"] == "boot_not_durable"
	}
	if !completed || !notDurable {
		t.Errorf("boot events missing:\n%s", logs)
	}
}

// TestBootRequireRecorder: with RequireRecorder, Boot either has a
// recorder or fails with ErrNoRecorder.
func TestBootRequireRecorder(t *testing.T) {
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig), lambdafn.RequireRecorder(), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(nil)))
	if err != nil {
		if !errors.Is(err, lambdafn.ErrNoRecorder) || env.Set != nil || !strings.Contains(out.String(), `"boot_failed"`) {
			t.Fatalf("err %v, set %v, logs %s", err, env.Set, out.String())
		}
		return
	}
	defer env.Close(context.Background())
	if env.Set.Recorder == nil {
		t.Fatal("no recorder and no error")
	}
}

// TestBootBadConfig: an invalid setting fails Boot, logged as boot_failed
// naming the key.
func TestBootBadConfig(t *testing.T) {
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig), lambdafn.WithLogOutput(&out),
		lambdafn.WithLookupEnv(envMap(map[string]string{"PIPELINE_ORCHESTRATOR_LEASE_MS": "5"})))
	if err == nil || env.Logger == nil {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(out.String(), `"boot_failed"`) || !strings.Contains(out.String(), "lease-ms") {
		t.Errorf("logs %s", out.String())
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
			env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(tc.env)))
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
			if env.Set != nil || !strings.Contains(out.String(), `"boot_failed"`) {
				t.Errorf("set %v, logs %s", env.Set, out.String())
			}
		})
	}
}

// TestBootServesDiagOnlyWhenEnabled: the functions register diag.drill
// only with diag.enabled=true; without it a submit of diag.drill is 404
// (unknown pipeline).
func TestBootServesDiagOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		m := map[string]string{}
		if enabled {
			m["PIPELINE_ORCHESTRATOR_DIAG_ENABLED"] = "true"
		}
		env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig), lambdafn.WithLogOutput(&logtest.Buffer{}), lambdafn.WithLookupEnv(envMap(m)))
		if err != nil {
			t.Fatal(err)
		}
		_, ok := env.Set.Runtime.Registry().Get(diag.ID)
		w := httptest.NewRecorder()
		env.HTTPHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/pipelines/"+diag.ID+"/executions", strings.NewReader(`{"resultBytes":1000000}`)))
		_ = env.Close(context.Background())
		if ok != enabled {
			t.Errorf("diag.enabled=%v: diag.drill registered %v", enabled, ok)
		}
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusAccepted}[enabled]; w.Code != want {
			t.Errorf("diag.enabled=%v: submit of diag.drill answered %d, want %d: %s", enabled, w.Code, want, w.Body)
		}
	}
}
