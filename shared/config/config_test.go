package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultValidates(t *testing.T) {
	t.Parallel()
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	c, rest, err := Load(nil, nil)
	if err != nil || c != Default() || len(rest) != 0 {
		t.Fatalf("Load(nil, nil) = %v, %v, %v; want Default()", c, rest, err)
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"pipeline.orchestrator.state-provider":              "PIPELINE_ORCHESTRATOR_STATE_PROVIDER",
		"pipeline.orchestrator.payload.inline-budget-bytes": "PIPELINE_ORCHESTRATOR_PAYLOAD_INLINE_BUDGET_BYTES",
		"pipeline.orchestrator.http.addr":                   "PIPELINE_ORCHESTRATOR_HTTP_ADDR",
		"a.b-c/d9":                                          "A_B_C_D9",
	} {
		if got := EnvName(key); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", key, got, want)
		}
	}
}

// Every key is looked up, and its documented default round-trips through
// both the environment and the flags.
func TestEveryKeyLoads(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	m := map[string]string{}
	var args []string
	for _, k := range Keys() {
		m[k.Env] = k.Default
		args = append(args, "--"+k.Flag+"="+k.Default)
		if FullKey(k.Flag) != k.Key || ShortKey(k.Key) != k.Flag {
			t.Errorf("key %s: flag %s does not round-trip", k.Key, k.Flag)
		}
	}
	lookup := func(name string) (string, bool) { seen[name] = true; return env(m)(name) }
	for _, a := range [][]string{nil, args} {
		c, _, err := Load(lookup, a)
		if err != nil || c != Default() {
			t.Fatalf("Load(defaults, %q) = %v, %v; want Default()", a, c, err)
		}
	}
	for _, k := range Keys() {
		if !seen[k.Env] {
			t.Errorf("%s never looked up", k.Env)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want func(*Config)
		rest []string
	}{
		{"state provider", map[string]string{"PIPELINE_ORCHESTRATOR_STATE_PROVIDER": "dynamo"}, nil,
			func(c *Config) { c.StateProvider = "dynamo" }, nil},
		{"sqs dispatcher", map[string]string{"PIPELINE_ORCHESTRATOR_STATE_PROVIDER": "memory", "PIPELINE_ORCHESTRATOR_DISPATCHER_PROVIDER": "SQS", "PIPELINE_ORCHESTRATOR_QUEUE_URL": "https://q"}, nil,
			func(c *Config) { c.StateProvider, c.DispatcherProvider, c.QueueURL = "memory", "sqs", "https://q" }, nil},
		{"lease ms", map[string]string{"PIPELINE_ORCHESTRATOR_LEASE_MS": "1500"}, nil,
			func(c *Config) { c.Lease = 1500 * time.Millisecond }, nil},
		{"iso retry delay", map[string]string{"PIPELINE_ORCHESTRATOR_RETRY_DELAY": "PT2S"}, nil,
			func(c *Config) { c.RetryDelay = 2 * time.Second }, nil},
		{"dotted inline budget", map[string]string{"PIPELINE_ORCHESTRATOR_PAYLOAD_INLINE_BUDGET_BYTES": "1024"}, nil,
			func(c *Config) { c.InlineBudgetBytes = 1024 }, nil},
		{"dotted http", map[string]string{
			"PIPELINE_ORCHESTRATOR_HTTP_ADDR":           ":9000",
			"PIPELINE_ORCHESTRATOR_HTTP_MAX_BODY_BYTES": "1000",
			"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE":  "none",
			"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN":         "s3cret",
		}, nil, func(c *Config) {
			c.HTTPAddr, c.MaxBodyBytes, c.TenantSource, c.AdminToken = ":9000", 1000, "none", "s3cret"
		}, nil},
		{"policy upper-cased", map[string]string{"PIPELINE_ORCHESTRATOR_IDEMPOTENCY_POLICY": "client_key_required"}, nil,
			func(c *Config) { c.IdempotencyPolicy = "CLIENT_KEY_REQUIRED" }, nil},
		{"misc", map[string]string{
			"PIPELINE_ORCHESTRATOR_STRICT_STARTUP":     "true",
			"PIPELINE_ORCHESTRATOR_RETRY_MULTIPLIER":   "1.5",
			"PIPELINE_ORCHESTRATOR_LOG_LEVEL":          "DEBUG",
			"PIPELINE_ORCHESTRATOR_SWEEP_GRACE":        "0s",
			"PIPELINE_ORCHESTRATOR_SWEEP_LIMIT":        " 50 ",
			"PIPELINE_ORCHESTRATOR_RETRY_MAX_DELAY":    "P1D",
			"PIPELINE_ORCHESTRATOR_EXECUTION_TTL_DAYS": "7",
		}, nil, func(c *Config) {
			c.StrictStartup, c.RetryMultiplier, c.LogLevel, c.SweepGrace = true, 1.5, "debug", 0
			c.SweepLimit, c.RetryMaxDelay, c.ExecutionTTLDays = 50, 24*time.Hour, 7
		}, nil},
		{"flags override env", map[string]string{"PIPELINE_ORCHESTRATOR_LEASE_MS": "1000", "PIPELINE_ORCHESTRATOR_HTTP_ADDR": ":1"},
			[]string{"--lease-ms=2000", "--http.addr", ":2"},
			func(c *Config) { c.Lease, c.HTTPAddr = 2*time.Second, ":2" }, nil},
		{"addr alias and dotted flag", nil, []string{"--addr=:3", "-payload.inline-budget-bytes", "0"},
			func(c *Config) { c.HTTPAddr, c.InlineBudgetBytes = ":3", 0 }, nil},
		{"bool flag and positional args", map[string]string{"PIPELINE_ORCHESTRATOR_STRICT_STARTUP": "false"},
			[]string{"--strict-startup", "--retry-delay=pt5s", "serve", "--x"},
			func(c *Config) { c.StrictStartup, c.RetryDelay = true, 5*time.Second }, []string{"serve", "--x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := Default()
			tt.want(&want)
			got, rest, err := Load(env(tt.env), tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || fmt.Sprint(rest) != fmt.Sprint(tt.rest) {
				t.Errorf("got %v %q\nwant %v %q", got, rest, want, tt.rest)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string // substrings of the error
	}{
		{"env int", map[string]string{"PIPELINE_ORCHESTRATOR_LEASE_MS": "abc"}, nil,
			[]string{`config: PIPELINE_ORCHESTRATOR_LEASE_MS (pipeline.orchestrator.lease-ms): "abc" is not an integer`}},
		{"all env errors", map[string]string{"PIPELINE_ORCHESTRATOR_MAX_RETRIES": "x", "PIPELINE_ORCHESTRATOR_STRICT_STARTUP": "maybe"}, nil,
			[]string{"PIPELINE_ORCHESTRATOR_MAX_RETRIES (pipeline.orchestrator.max-retries)", "PIPELINE_ORCHESTRATOR_STRICT_STARTUP", `"maybe" is not a boolean`}},
		{"env years", map[string]string{"PIPELINE_ORCHESTRATOR_RETRY_DELAY": "P1Y"}, nil,
			[]string{"PIPELINE_ORCHESTRATOR_RETRY_DELAY (pipeline.orchestrator.retry-delay)", "years and months"}},
		{"flag float", nil, []string{"--retry-multiplier=NaN"},
			[]string{`config: --retry-multiplier (pipeline.orchestrator.retry-multiplier): "NaN" is not a finite number`}},
		{"flag alias", nil, []string{"--addr"}, []string{"config: flag needs an argument: -addr"}},
		{"unknown flag", nil, []string{"--nope"}, []string{"config: unknown flag --nope; every key and its flag: qasync keys, docs/configuration.md"}},
		// Issue 22: an unknown flag said only "flag provided but not
		// defined"; it suggests the nearest flag.
		{"misspelt flag", nil, []string{"--leas-ms=100"}, []string{"config: unknown flag --leas-ms (did you mean --lease-ms?)"}},
		{"misspelt alias", nil, []string{"--data-dri", "x"}, []string{"(did you mean --data-dir?)"}},
		{"validation names source", map[string]string{"PIPELINE_ORCHESTRATOR_LEASE_MS": "50"}, []string{"--sweep-limit=0"},
			[]string{"pipeline.orchestrator.lease-ms: must be at least 100, got 50 (from PIPELINE_ORCHESTRATOR_LEASE_MS)",
				"pipeline.orchestrator.sweep-limit: must be between 1 and 10000, got 0 (from --sweep-limit)"}},
		{"rate limit horizon", map[string]string{"PIPELINE_ORCHESTRATOR_RATE_LIMIT_HORIZON": "0s"}, nil,
			[]string{"pipeline.orchestrator.rate-limit.horizon: must be between 1s and 24h0m0s, got 0s (from PIPELINE_ORCHESTRATOR_RATE_LIMIT_HORIZON)"}},
		{"priority aging", map[string]string{"PIPELINE_ORCHESTRATOR_PRIORITY_AGING": "0s"}, nil,
			[]string{"pipeline.orchestrator.priority.aging: must be between 1s and 24h0m0s, got 0s (from PIPELINE_ORCHESTRATOR_PRIORITY_AGING)"}},
		{"mode sync", map[string]string{"PIPELINE_ORCHESTRATOR_MODE": "sync"}, nil,
			[]string{"pipeline.orchestrator.mode: only QUEUE_ASYNC is supported"}},
		{"tracing", map[string]string{"PIPELINE_ORCHESTRATOR_TRACING_EXPORTER": "jaeger"},
			[]string{"--tracing.sample-ratio=1.5", "--tracing.endpoint=collector:4318"},
			[]string{"pipeline.orchestrator.tracing.exporter: ", `"jaeger"`, "pipeline.orchestrator.tracing.sample-ratio: must be between 0 and 1, got 1.5",
				`pipeline.orchestrator.tracing.endpoint: must be an http:// or https:// URL, got "collector:4318"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Load(env(tt.env), tt.args)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, _, err := Load(nil, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("Load(-h) = %v, want flag.ErrHelp", err)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	ok := map[string]time.Duration{
		"PT10S": 10 * time.Second, "PT0.5S": 500 * time.Millisecond, "P1D": 24 * time.Hour,
		"PT1M30S": 90 * time.Second, "P1DT2H": 26 * time.Hour, "pt5s": 5 * time.Second, "P2W": 14 * 24 * time.Hour,
		"PT1,25S": 1250 * time.Millisecond, "PT0S": 0, "250ms": 250 * time.Millisecond, "1m30s": 90 * time.Second,
		"0": 0, " 10s ": 10 * time.Second,
	}
	for in, want := range ok {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"P1Y": "years and months", "P1M": "years and months", "P1Y2M": "years and months",
		"-1s": "negative", "-PT1S": "negative", "abc": "not a duration", "": "not a duration", "10": "not a duration",
		"P": "no components", "PT": "misplaced T", "P1DT": "misplaced T", "PT1S1M": "out of order", "PT1H1H": "out of order",
		"P1H": "unexpected designator", "PT1D": "unexpected designator", "PT1": "missing designator",
		"PTS": "expected a number", "PT-1S": "expected a number", "PT1.2.3S": "malformed", "P999999999999D": "too large",
	}
	for in, want := range bad {
		if d, err := ParseDuration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want error containing %q", in, d, err, want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key string
		mut func(*Config)
	}{
		{"mode", func(c *Config) { c.Mode = "SYNC" }},
		{"state-provider", func(c *Config) { c.StateProvider = "redis" }},
		{"dispatcher-provider", func(c *Config) { c.DispatcherProvider = "kafka" }},
		{"dlq-provider", func(c *Config) { c.DLQProvider = "file" }},
		{"dlq-provider", func(c *Config) { c.StateProvider, c.DLQProvider = "memory", "embedded" }},
		{"idempotency-policy", func(c *Config) { c.IdempotencyPolicy = "optional_client_key" }},
		{"lease-ms", func(c *Config) { c.Lease = 50 * time.Millisecond }},
		{"max-retries", func(c *Config) { c.MaxRetries = -1 }},
		{"retry-delay", func(c *Config) { c.RetryDelay, c.RetryMaxDelay = 0, 0 }},
		{"retry-multiplier", func(c *Config) { c.RetryMultiplier = 0.5 }},
		{"retry-max-delay", func(c *Config) { c.RetryMaxDelay = 500 * time.Millisecond }},
		{"sweep-interval", func(c *Config) { c.SweepInterval = 0 }},
		{"sweep-limit", func(c *Config) { c.SweepLimit = 10001 }},
		{"sweep-grace", func(c *Config) { c.SweepGrace = -time.Second }},
		{"execution-ttl-days", func(c *Config) { c.ExecutionTTLDays = 0 }},
		{"worker-concurrency", func(c *Config) { c.WorkerConcurrency = 1025 }},
		{"payload.inline-budget-bytes", func(c *Config) { c.InlineBudgetBytes = 196609 }},
		{"http.addr", func(c *Config) { c.HTTPAddr = "" }},
		{"http.max-body-bytes", func(c *Config) { c.MaxBodyBytes = 64<<20 + 1 }},
		{"http.tenant-source", func(c *Config) { c.TenantSource = "cookie" }},
		{"http.read-timeout", func(c *Config) { c.HTTPReadTimeout = 0 }},
		{"http.write-timeout", func(c *Config) { c.HTTPWriteTimeout = c.HTTPReadTimeout - time.Millisecond }},
		{"http.tenant-claim", func(c *Config) { c.TenantSource, c.TenantClaim = "jwt", "" }},
		{"queue-url", func(c *Config) { c.StateProvider, c.DispatcherProvider = "memory", "sqs" }},
		{"embedded.data-dir", func(c *Config) { c.EmbeddedDataDir = "" }},
		{"dispatcher-provider", func(c *Config) { c.DispatcherProvider = "event" }},
		{"dispatcher-provider", func(c *Config) { c.StateProvider, c.DispatcherProvider = "memory", "embedded" }},
		{"dlq-url", func(c *Config) { c.DLQProvider = "sqs" }},
		{"log-level", func(c *Config) { c.LogLevel = "trace" }},
		{"item-reject.provider", func(c *Config) { c.ItemRejectProvider = "file" }},
		{"item-reject.queue-url", func(c *Config) { c.ItemRejectProvider = "sqs" }},
		{"item-reject.provider", func(c *Config) { c.StateProvider, c.ItemRejectProvider = "dynamo", "embedded" }},
		{"item-reject.publish-failure-policy", func(c *Config) { c.ItemRejectPublishFailurePolicy = "IGNORE" }},
		// Audit item 5: a retry delay beyond the retention was accepted, and
		// the row waiting for that retry expired before it came.
		{"retry-max-delay", func(c *Config) { c.ExecutionTTLDays, c.RetryMaxDelay = 1, 48*time.Hour }},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tt.mut(&c)
			err := c.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), FullKey(tt.key)+": ") {
				t.Errorf("Validate() = %v, want an error for %s", err, FullKey(tt.key))
			}
		})
	}
	c := Default()
	c.Lease, c.SweepLimit = 50*time.Millisecond, 0
	err := c.Validate()
	for _, w := range []string{"pipeline.orchestrator.lease-ms: must be at least 100, got 50", "pipeline.orchestrator.sweep-limit:"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %v, want all problems, including %q", err, w)
		}
	}
}

func TestAdminTokenRedacted(t *testing.T) {
	t.Parallel()
	const token = "tok-3f9a"
	c, _, err := Load(env(map[string]string{"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN": token}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("start", "config", c)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("start", "config", &c)
	outs := []string{buf.String(), c.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d", "%T"} {
		outs = append(outs, fmt.Sprintf(verb, c), fmt.Sprintf(verb, &c), fmt.Sprintf(verb, []Config{c}))
	}
	for _, out := range outs {
		if strings.Contains(out, token) {
			t.Errorf("token leaked: %s", out)
		}
	}
	if !strings.Contains(buf.String(), `"admin_token":"set"`) || !strings.Contains(buf.String(), `"lease_ms":30000`) ||
		!strings.Contains(buf.String(), `"payload_inline_budget_bytes":256`) {
		t.Errorf("LogValue = %s", buf.String())
	}
	if !strings.Contains(Default().String(), "admin.token=unset") {
		t.Errorf("String() = %s", Default())
	}
}

func TestMarkdownTable(t *testing.T) {
	t.Parallel()
	table := MarkdownTable()
	for _, k := range Keys() {
		if !strings.Contains(table, "`"+k.Key+"`") || !strings.Contains(table, "`"+k.Env+"`") {
			t.Errorf("table lacks %s / %s", k.Key, k.Env)
		}
	}
	if n := strings.Count(table, "\n"); n != len(Keys())+2 {
		t.Errorf("table has %d lines, want %d", n, len(Keys())+2)
	}
}

// The Item Reject Sink's keys live under their own prefix: full key,
// environment variable and flag.
func TestItemRejectPrefix(t *testing.T) {
	t.Parallel()
	c, _, err := Load(env(map[string]string{
		"PIPELINE_ITEM_REJECT_INCLUDE_PAYLOAD":        "true",
		"PIPELINE_ITEM_REJECT_PUBLISH_FAILURE_POLICY": "fail_pipeline",
	}), []string{"--item-reject.provider=memory"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.ItemRejectIncludePayload || c.ItemRejectPublishFailurePolicy != "FAIL_PIPELINE" || c.ItemRejectProvider != "memory" {
		t.Fatalf("loaded %v", c)
	}
	_, _, err = Load(env(map[string]string{"PIPELINE_ITEM_REJECT_PROVIDER": "sqs"}), nil)
	if err == nil || !strings.Contains(err.Error(), "pipeline.item-reject.queue-url: required when pipeline.item-reject.provider is sqs") {
		t.Fatalf("Load without a queue URL: %v", err)
	}
	if FullKey("item-reject.provider") != "pipeline.item-reject.provider" || EnvName(FullKey("item-reject.queue-url")) != "PIPELINE_ITEM_REJECT_QUEUE_URL" {
		t.Fatal("FullKey/EnvName of item-reject keys")
	}
}

// TestProvidersFollowTheStateProvider: with no other provider setting,
// the embedded store (the default) brings its own dispatcher, dead-letter
// sink and reject sink, and --state memory (tests, throwaway runs) the
// in-process ones, while explicit settings are kept.
func TestProvidersFollowTheStateProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args                      []string
		state, disp, dlq, rejects string
	}{
		{nil, "embedded", "embedded", "embedded", "embedded"},
		{[]string{"--state", "memory"}, "memory", "event", "log", "log"},
		{[]string{"--state", "dynamo", "--dispatcher", "sqs", "--dlq", "sqs", "--queue-url", "q", "--dlq-url", "d"}, "dynamo", "sqs", "sqs", "log"},
		{[]string{"--dlq", "log"}, "embedded", "embedded", "log", "embedded"},
	} {
		c, _, err := Load(nil, tc.args)
		if err != nil {
			t.Fatalf("Load(%q): %v", tc.args, err)
		}
		r := c.ResolveProviders()
		if r.StateProvider != tc.state || r.DispatcherProvider != tc.disp || r.DLQProvider != tc.dlq || r.ItemRejectProvider != tc.rejects {
			t.Errorf("Load(%q) resolves to state %s dispatcher %s dlq %s rejects %s, want %s %s %s %s", tc.args,
				r.StateProvider, r.DispatcherProvider, r.DLQProvider, r.ItemRejectProvider, tc.state, tc.disp, tc.dlq, tc.rejects)
		}
	}
	if c, _, err := Load(nil, []string{"--data-dir", "/tmp/x"}); err != nil || c.EmbeddedDataDir != "/tmp/x" {
		t.Errorf("--data-dir: %q, %v", c.EmbeddedDataDir, err)
	}
}
