package lambdafn_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/logtest"
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
	env, err := lambdafn.Boot(context.Background(), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(map[string]string{
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
	env, err := lambdafn.Boot(context.Background(), lambdafn.RequireRecorder(), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(nil)))
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
	env, err := lambdafn.Boot(context.Background(), lambdafn.WithLogOutput(&out),
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
