package lambdafn_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/lambdafn"
	submitfn "github.com/qasync/qasync/shared/lambdafn/submit"
)

const (
	testSecretARN   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:qasync-dev-await-AbCdEf"
	testSecretValue = "resume-token-secret-value-0123456789abcdef0123456789abcdef012345"
)

// fakeSecretsManager speaks Secrets Manager's JSON protocol for
// GetSecretValue: the secret of testSecretARN, 400 for any other, 500
// with fail.
func fakeSecretsManager(t *testing.T, fail bool) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		var in struct{ SecretId string }
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch {
		case r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"UnknownOperationException","message":"unexpected `+r.Header.Get("X-Amz-Target")+`"}`)
		case fail || in.SecretId != testSecretARN:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`)
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"ARN": testSecretARN, "Name": "qasync-dev-await", "SecretString": testSecretValue, "VersionId": "v1"})
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", srv.URL)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	return srv, &calls
}

// resumeTokenKeyedWith submits approveID through env's Submit handler and
// checks that the resume token its await step is handed verifies under
// secret: the runtime keys resume tokens with it.
func resumeTokenKeyedWith(t *testing.T, env *lambdafn.Env, awaits <-chan await.Request, secret string) {
	t.Helper()
	s := submit(t, env, approveID, `{}`)
	req := awaitNotified(t, awaits)
	if req.Info.ExecutionID != s.ExecutionID || !await.Verify([]byte(secret), req.Info.TenantID, req.Info.ExecutionID, req.AwaitID, req.Token) {
		t.Fatalf("resume token %q of execution %s does not verify under the expected secret", req.Token, req.Info.ExecutionID)
	}
}

// TestBootResolvesResumeTokenSecret: with only the secret's ARN in the
// environment, Boot fetches its value once (GetSecretValue, through the
// SDK's AWS_ENDPOINT_URL_SECRETS_MANAGER) and keys resume tokens with
// it; the value never reaches the logs.
func TestBootResolvesResumeTokenSecret(t *testing.T) {
	_, calls := fakeSecretsManager(t, false)
	var out logtest.Buffer
	reg, awaits := testPipelines(t)
	env, err := lambdafn.Boot(context.Background(), submitfn.Function, reg, lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(map[string]string{
		"PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET_ARN": testSecretARN,
		"PIPELINE_ORCHESTRATOR_LOG_LEVEL":                     "debug",
	})))
	if err != nil {
		t.Fatalf("boot: %v\n%s", err, out.String())
	}
	defer env.Close(context.Background())
	resumeTokenKeyedWith(t, env, awaits, testSecretValue)
	if env.Config.AwaitResumeTokenSecret != testSecretValue || env.Config.AwaitResumeTokenSecretARN != testSecretARN {
		t.Fatal("Env.Config does not carry the resolved secret")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d GetSecretValue calls, want 1", n)
	}
	if strings.Contains(out.String(), testSecretValue) {
		t.Errorf("the secret value reached the logs:\n%s", out.String())
	}
	if !strings.Contains(out.String(), `"boot_completed"`) {
		t.Errorf("no boot_completed:\n%s", out.String())
	}
}

// TestBootSecretValueWins: an explicit await.resume-token-secret is used
// as it is; Secrets Manager is not called.
func TestBootSecretValueWins(t *testing.T) {
	_, calls := fakeSecretsManager(t, true)
	reg, awaits := testPipelines(t)
	env, err := lambdafn.Boot(context.Background(), submitfn.Function, reg, lambdafn.WithLogOutput(io.Discard), lambdafn.WithLookupEnv(envMap(map[string]string{
		"PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET":     "explicit",
		"PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET_ARN": testSecretARN,
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close(context.Background())
	resumeTokenKeyedWith(t, env, awaits, "explicit")
	if env.Config.AwaitResumeTokenSecret != "explicit" || calls.Load() != 0 {
		t.Fatalf("secret %q after %d calls", env.Config.AwaitResumeTokenSecret, calls.Load())
	}
}

// TestBootFailsWhenSecretFetchFails: a failed fetch fails boot with an
// error (and a boot_failed log) naming the key.
func TestBootFailsWhenSecretFetchFails(t *testing.T) {
	fakeSecretsManager(t, true)
	var out logtest.Buffer
	env, err := lambdafn.Boot(context.Background(), submitfn.Function, registry(t), lambdafn.WithLogOutput(&out), lambdafn.WithLookupEnv(envMap(map[string]string{
		"PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET_ARN": testSecretARN,
	})))
	if err == nil {
		env.Close(context.Background())
		t.Fatal("boot succeeded without the secret")
	}
	const key = "pipeline.orchestrator.await.resume-token-secret-arn"
	if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Fatalf("err %v", err)
	}
	if _, err := env.Handler(); err == nil {
		t.Error("a failed boot gave a handler")
	}
	if logs := out.String(); !strings.Contains(logs, `"boot_failed"`) || !strings.Contains(logs, key) {
		t.Errorf("logs:\n%s", logs)
	}
}
