package config

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestCheckWarnsOfUnknownVariables (issue 22): a misspelt
// PIPELINE_ORCHESTRATOR_* variable was silently not used; Check names it
// with the nearest known variable, and ignores the keys' variables, the
// caller's known ones and everything outside the prefixes.
func TestCheckWarnsOfUnknownVariables(t *testing.T) {
	t.Parallel()
	environ := []string{
		"HOME=/root", "PIPELINE_ORCHESTRATOR_LEASE_MS=1000", "PIPELINE_ORCHESTRATOR_DIAG_ENABLED=true",
		"PIPELINE_ORCHESTRATOR_LEASE_MSS=2000", "PIPELINE_ITEM_REJECT_PROVIDR=sqs", "PIPELINE_ORCHESTRATOR_ZZZZZZZZZZ=1",
		"PIPELINE_ORCHESTRATOR_ADMIN_TOKN=not-in-any-message",
	}
	warns, err := Default().Check(environ, "PIPELINE_ORCHESTRATOR_DIAG_ENABLED")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PIPELINE_ORCHESTRATOR_LEASE_MSS":  "PIPELINE_ORCHESTRATOR_LEASE_MS",
		"PIPELINE_ITEM_REJECT_PROVIDR":     "PIPELINE_ITEM_REJECT_PROVIDER",
		"PIPELINE_ORCHESTRATOR_ZZZZZZZZZZ": "", // nothing near: no suggestion
		"PIPELINE_ORCHESTRATOR_ADMIN_TOKN": "PIPELINE_ORCHESTRATOR_ADMIN_TOKEN",
	}
	if len(warns) != len(want) {
		t.Fatalf("warnings %+v, want one for each of %v", warns, want)
	}
	for _, w := range warns {
		near, ok := want[w.Variable]
		if !ok || w.Event != "config_unknown_env" || w.Nearest != near || !strings.Contains(w.Message, w.Variable) ||
			(near != "" && !strings.Contains(w.Message, "did you mean "+near+"?")) || strings.Contains(w.Message, "not-in-any-message") {
			t.Errorf("warning %+v", w)
		}
	}

	// Strict startup refuses them, naming each with its nearest.
	c := Default()
	c.StrictStartup = true
	if _, err := c.Check(environ, "PIPELINE_ORCHESTRATOR_DIAG_ENABLED"); err == nil ||
		!strings.Contains(err.Error(), "pipeline.orchestrator.strict-startup=true refuses unknown variables") ||
		!strings.Contains(err.Error(), "PIPELINE_ITEM_REJECT_PROVIDR names no configuration key: its value is not used (did you mean PIPELINE_ITEM_REJECT_PROVIDER?)") {
		t.Errorf("strict Check = %v", err)
	}
	if warns, err := c.Check([]string{"PIPELINE_ORCHESTRATOR_LEASE_MS=1000"}); err != nil || len(warns) != 0 {
		t.Errorf("strict Check of known variables = %v, %v", warns, err)
	}
}

// TestWarningLog: a warning is one WARN event with snake_case attributes.
func TestWarningLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	Warning{Event: "config_unknown_env", Variable: "PIPELINE_ORCHESTRATOR_X", Nearest: "PIPELINE_ORCHESTRATOR_MODE", Message: "m"}.
		Log(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)))
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["level"] != "WARN" || got["msg"] != "config_unknown_env" || got["event"] != "config_unknown_env" ||
		got["variable"] != "PIPELINE_ORCHESTRATOR_X" || got["nearest"] != "PIPELINE_ORCHESTRATOR_MODE" || got["message"] != "m" {
		t.Errorf("logged %s", buf.String())
	}
	if _, ok := got["key"]; ok {
		t.Errorf("an empty key is logged: %s", buf.String())
	}
}

// TestAdminTokenStrength (issue 22): any token length was accepted, even
// "a" under strict startup. Strict startup refuses a token shorter than
// MinAdminTokenLength naming the key (never the token); otherwise Check
// warns of it.
func TestAdminTokenStrength(t *testing.T) {
	t.Parallel()
	short, long := "a", strings.Repeat("f", MinAdminTokenLength)
	for _, tc := range []struct {
		token, strict string
		err           bool
		warn          bool
	}{
		{short, "true", true, true},
		{short, "false", false, true},
		{strings.Repeat("f", MinAdminTokenLength-1), "true", true, true},
		{long, "true", false, false},
		{long, "false", false, false},
		{"", "true", false, false}, // no token: the operator routes are off
	} {
		env := env(map[string]string{"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN": tc.token, "PIPELINE_ORCHESTRATOR_STRICT_STARTUP": tc.strict})
		c, _, err := Load(env, nil)
		if (err != nil) != tc.err {
			t.Errorf("token of %d, strict %s: Load error %v, want error %v", len(tc.token), tc.strict, err, tc.err)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "pipeline.orchestrator.admin.token: shorter than 32 characters") ||
				!strings.Contains(err.Error(), "(from PIPELINE_ORCHESTRATOR_ADMIN_TOKEN)") || strings.Contains(err.Error(), tc.token+"\"") {
				t.Errorf("error %q", err)
			}
			continue
		}
		warns, _ := c.Check(nil)
		if got := len(warns) == 1 && warns[0].Event == "config_weak_admin_token" && warns[0].Key == "pipeline.orchestrator.admin.token"; got != tc.warn {
			t.Errorf("token of %d, strict %s: warnings %+v, want a weak-token warning %v", len(tc.token), tc.strict, warns, tc.warn)
		}
	}
}

// TestCheckListener (issue 22): qasync serve trusted the X-Tenant-Id
// header on any address. Beyond loopback, tenant source header needs
// http.allow-header-tenant=true (or another source); the error names both
// keys.
func TestCheckListener(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, source string
		allow        bool
		ok           bool
	}{
		{"127.0.0.1:8080", "header", false, true},
		{"127.0.0.2:0", "header", false, true},
		{"[::1]:8080", "header", false, true},
		{"localhost:8080", "header", false, true},
		{"LOCALHOST:8080", "header", false, true},
		{"0.0.0.0:8080", "header", false, false},
		{"[::]:8080", "header", false, false},
		{":8080", "header", false, false},
		{"10.1.2.3:8080", "header", false, false},
		{"api.example.test:8080", "header", false, false},
		{"0.0.0.0:8080", "header", true, true},
		{"0.0.0.0:8080", "none", false, true},
		{"0.0.0.0:8080", "jwt", false, true},
		{"0.0.0.0:8080", "iam", false, true},
		{"0.0.0.0:8080", "iam-account", false, true},
	} {
		c := Default()
		c.HTTPAddr, c.TenantSource, c.AllowHeaderTenant = tc.addr, tc.source, tc.allow
		err := c.CheckListener()
		if (err == nil) != tc.ok {
			t.Errorf("%s tenant-source %s allow %v: %v, want ok %v", tc.addr, tc.source, tc.allow, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "pipeline.orchestrator.http.tenant-source") ||
			!strings.Contains(err.Error(), "pipeline.orchestrator.http.allow-header-tenant=true") || !strings.Contains(err.Error(), tc.addr)) {
			t.Errorf("error %q lacks the keys or the address", err)
		}
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"data-dri": "data-dir", "leas-ms": "lease-ms", "LEASE-MS": "lease-ms", "addr": "addr", "zzzzzz": "", "x": "",
		"http.tenant-sorce": "http.tenant-source",
	} {
		if got := Nearest(name, FlagNames()); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", name, got, want)
		}
	}
}
