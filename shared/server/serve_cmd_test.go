package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// serveRun is one run of the serve command with its streams and logs.
type serveRun struct {
	code                 int
	stdout, stderr, logs string
}

// runServe runs the serve command with environ (also its lookup) and
// args; a server that starts is stopped at once (its startup output is
// complete by then).
func runServe(t *testing.T, environ []string, args ...string) serveRun {
	t.Helper()
	echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	})
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "echo", Steps: []pipeline.Step{echo}})
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var stdout, stderr, logs syncBuffer
	env := processEnv{lookup: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, environ: environ, stdout: &stdout, stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := serveWith(ctx, env, args, reg, []Option{
		WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		OnStarted(func(net.Addr) { cancel() }),
	})
	return serveRun{code, stdout.String(), stderr.String(), logs.String()}
}

// events are the JSON log lines of logs by event name.
func events(t *testing.T, logs string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if ev, _ := m["event"].(string); ev != "" {
			out[ev] = m
		}
	}
	return out
}

// TestServeHelpIsAShortSummary (issue 22): `qasync serve --help` dumped
// the whole keys table; it is a short summary (usage, the common flags,
// where every key is), exit 0, for -h as well.
func TestServeHelpIsAShortSummary(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		r := runServe(t, nil, arg)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%s: exit %d, stderr %q", arg, r.code, r.stderr)
		}
		if !strings.HasPrefix(r.stdout, "usage: qasync serve [flags]\n") || !strings.Contains(r.stdout, "all keys: docs/configuration.md") ||
			strings.Contains(r.stdout, "| Key |") || strings.Count(r.stdout, "\n") > 25 {
			t.Errorf("%s printed:\n%s", arg, r.stdout)
		}
		if n := strings.Count(r.stdout, "\n  --"); n != 10 {
			t.Errorf("%s lists %d flags, want 10:\n%s", arg, n, r.stdout)
		}
		if !strings.Contains(r.stdout, "  --addr") || !strings.Contains(r.stdout, "(default 127.0.0.1:8080)") {
			t.Errorf("%s lacks --addr with its default:\n%s", arg, r.stdout)
		}
	}
	// Every listed flag is one that Load accepts, for the key it names.
	keys := map[string]bool{}
	for _, k := range config.Keys() {
		keys[k.Flag] = true
	}
	for _, f := range commonFlags {
		if !keys[f.key] || !slices.Contains(config.FlagNames(), f.flag) {
			t.Errorf("common flag --%s (key %s) is not a flag of that key", f.flag, f.key)
		}
	}
}

// TestServeUnknownFlagSuggestsTheNearest (issue 22): an unknown flag is a
// usage error (exit 2) naming the nearest flag.
func TestServeUnknownFlagSuggestsTheNearest(t *testing.T) {
	t.Parallel()
	r := runServe(t, nil, "--stat", "memory")
	if r.code != 2 || !strings.Contains(r.stderr, "qasync: config: unknown flag --stat (did you mean --state?)") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestServeAnnouncesWhereEverythingIs (issue 22): serve printed only
// "qasync serving on URL"; every start prints the API's and the console's
// URLs and how to sign in, on stderr and in the server_started event, and
// logs the environment's unknown variables and a weak token as warnings.
// With QASYNC_ADMIN_TOKEN_FILE naming the file that holds the token (make
// run's), the sign-in line names that file; the token itself is printed
// nowhere.
func TestServeAnnouncesWhereEverythingIs(t *testing.T) {
	t.Parallel()
	const token = "short-token-value"
	file := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runServe(t, []string{"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN=" + token, AdminTokenFileEnv + "=" + file,
		"PIPELINE_ORCHESTRATOR_WORKER_CONCURENCY=4", "PIPELINE_ORCHESTRATOR_DIAG_ENABLED=true", "PATH=/bin"},
		"--state", "memory", "--addr", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	lines := strings.Split(r.stderr, "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "qasync serving on http://127.0.0.1:") {
		t.Fatalf("stderr:\n%s", r.stderr)
	}
	base := strings.Fields(lines[0])[3]
	for i, want := range []string{"  API      " + base + "/v1", "  console  " + base + "/console",
		"  sign in  with the operator token in " + file + " (cat " + file} {
		if !strings.HasPrefix(lines[i+1], want) {
			t.Errorf("stderr line %d %q, want %q", i+2, lines[i+1], want)
		}
	}
	ev := events(t, r.logs)
	started := ev["server_started"]
	if started["api_url"] != base+"/v1" || started["console_url"] != base+"/console" || started["operator_routes"] != "on" || started["admin_token_file"] != file {
		t.Errorf("server_started %v", started)
	}
	if u := ev["config_unknown_env"]; u["level"] != "WARN" || u["variable"] != "PIPELINE_ORCHESTRATOR_WORKER_CONCURENCY" || u["nearest"] != "PIPELINE_ORCHESTRATOR_WORKER_CONCURRENCY" {
		t.Errorf("config_unknown_env %v (a test-only key is no unknown variable)", u)
	}
	if len(ev) != 0 && strings.Count(r.logs, `"event":"config_unknown_env"`) != 1 {
		t.Errorf("one unknown variable, logs:\n%s", r.logs)
	}
	if w := ev["config_weak_admin_token"]; w["level"] != "WARN" || w["key"] != "pipeline.orchestrator.admin.token" {
		t.Errorf("config_weak_admin_token %v", w)
	}
	if strings.Contains(r.stderr+r.logs, token) {
		t.Errorf("the token is printed:\n%s\n%s", r.stderr, r.logs)
	}
}

// TestServeSignInLine: without a token the sign-in line says how to turn
// the operator routes on; a token without a file (or a file that does not
// hold it) names the variable.
func TestServeSignInLine(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("another-token-entirely-0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		environ []string
		want    string
		routes  string
	}{
		{nil, "  sign in  the operator routes (cancel, re-drive) are off: set PIPELINE_ORCHESTRATOR_ADMIN_TOKEN", "off"},
		{[]string{"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN=" + token}, "  sign in  with the operator token of PIPELINE_ORCHESTRATOR_ADMIN_TOKEN", "on"},
		{[]string{"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN=" + token, AdminTokenFileEnv + "=" + other}, "  sign in  with the operator token of PIPELINE_ORCHESTRATOR_ADMIN_TOKEN", "on"},
	} {
		r := runServe(t, tc.environ, "--state=memory", "--addr=127.0.0.1:0")
		ev := events(t, r.logs)
		if r.code != 0 || !strings.Contains(r.stderr, tc.want) || ev["server_started"]["operator_routes"] != tc.routes || ev["server_started"]["admin_token_file"] != nil {
			t.Errorf("%v: exit %d, stderr:\n%s\nserver_started %v", tc.environ, r.code, r.stderr, ev["server_started"])
		}
		if _, weak := ev["config_weak_admin_token"]; weak {
			t.Errorf("%v: a %d-character token is called weak", tc.environ, len(token))
		}
	}
}

// TestServeRefusesHeaderTenantBeyondLoopback (issue 22): serve trusted
// X-Tenant-Id on any address; on one beyond loopback with the default
// tenant source it refuses to start (exit 2), naming the keys, before it
// listens.
func TestServeRefusesHeaderTenantBeyondLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		r := runServe(t, nil, "--state", "memory", "--addr", addr)
		if r.code != 2 || !strings.Contains(r.stderr, "pipeline.orchestrator.http.tenant-source=header") ||
			!strings.Contains(r.stderr, "pipeline.orchestrator.http.allow-header-tenant=true") || strings.Contains(r.stderr, "serving on") {
			t.Errorf("%s: exit %d, stderr %q", addr, r.code, r.stderr)
		}
	}
}

// TestServeStrictRefusesUnknownVariables: under strict startup an unknown
// variable stops serve (exit 2) naming it and its nearest.
func TestServeStrictRefusesUnknownVariables(t *testing.T) {
	t.Parallel()
	r := runServe(t, []string{"PIPELINE_ORCHESTRATOR_STRICT_STARTUP=true", "PIPELINE_ORCHESTRATOR_LEASEMS=100"}, "--state", "memory", "--addr", "127.0.0.1:0")
	if r.code != 2 || !strings.Contains(r.stderr, "refuses unknown variables: PIPELINE_ORCHESTRATOR_LEASEMS names no configuration key") ||
		!strings.Contains(r.stderr, "did you mean PIPELINE_ORCHESTRATOR_LEASE_MS?") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestBrowsable: an unspecified listen address is shown as loopback.
func TestBrowsable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0.0.0.0:80": "127.0.0.1:80", "[::]:80": "[::1]:80", "127.0.0.1:80": "127.0.0.1:80", "[::1]:9": "[::1]:9"} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := browsable(a); got != want {
			t.Errorf("browsable(%s) = %s, want %s", in, got, want)
		}
	}
}
