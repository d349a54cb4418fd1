package stack

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/schema"
)

// lookup is a context lookup over a map.
func lookup(m map[string]any) func(string) (any, bool) {
	return func(k string) (any, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultSettingsByStage(t *testing.T) {
	dev, prod, other := DefaultSettings("dev"), DefaultSettings("prod"), DefaultSettings("qa")
	if dev.Retain || dev.DeletionProtection {
		t.Errorf("dev retains data: %+v", dev)
	}
	if !prod.Retain || !prod.DeletionProtection || !other.Retain || !other.DeletionProtection {
		t.Errorf("prod/qa do not retain data")
	}
	for _, s := range []Settings{dev, prod, other} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s defaults: %v", s.Stage, err)
		}
	}
	// The await front's web ACL is on by default everywhere but dev.
	if dev.AwaitWAF || !prod.AwaitWAF || !other.AwaitWAF || prod.AwaitWAFRateLimit != 100 || prod.AwaitWAFWindow != time.Minute {
		t.Errorf("awaitWaf: dev %v, prod %v (%d per %v), qa %v", dev.AwaitWAF, prod.AwaitWAF, prod.AwaitWAFRateLimit, prod.AwaitWAFWindow, other.AwaitWAF)
	}
	if dev.StackName() != "qasync-dev" || prod.Prefix != "qasync-prod" {
		t.Errorf("names: %s, %s", dev.StackName(), prod.Prefix)
	}
}

// Context from `-c key=value` arrives as strings, from cdk.json as JSON.
func TestSettingsFromContext(t *testing.T) {
	for name, ctx := range map[string]map[string]any{
		"strings": {"stage": "prod", "workerTimeoutSeconds": "90", "leaseMs": "40000", "tracing": "true",
			"reservedConcurrency": `{"worker": 20}`, "jwtIssuer": "https://id.example.com", "jwtAudience": "a, b",
			"runtimeConfig": `{"max-retries": 7}`, "retain": "false", "sweeperRateMinutes": "2", "distDir": "out", "outputBucket": "true",
			"awaitWaf": "false", "awaitWafRateLimit": "250", "awaitWafWindowSeconds": "300"},
		"json": {"stage": "prod", "workerTimeoutSeconds": 90.0, "leaseMs": 40000.0, "tracing": true,
			"reservedConcurrency": map[string]any{"worker": 20.0}, "jwtIssuer": "https://id.example.com", "jwtAudience": []any{"a", "b"},
			"runtimeConfig": map[string]any{"max-retries": 7.0}, "retain": false, "sweeperRateMinutes": 2.0, "distDir": "out", "outputBucket": true,
			"awaitWaf": false, "awaitWafRateLimit": 250.0, "awaitWafWindowSeconds": 300.0},
	} {
		s, err := settingsFrom(lookup(ctx), "/base")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := DefaultSettings("prod")
		want.WorkerTimeout, want.Lease, want.Tracing = 90*time.Second, 40*time.Second, true
		want.ReservedConcurrency = map[string]int{"worker": 20}
		want.JWTIssuer, want.JWTAudience = "https://id.example.com", []string{"a", "b"}
		want.RuntimeConfig = map[string]string{"max-retries": "7"}
		want.Retain, want.SweeperRate, want.DistDir = false, 2*time.Minute, filepath.Join("/base", "out")
		want.OutputBucket = true
		want.AwaitWAF, want.AwaitWAFRateLimit, want.AwaitWAFWindow = false, 250, 5*time.Minute
		if !reflect.DeepEqual(s, want) {
			t.Errorf("%s:\n got  %+v\n want %+v", name, s, want)
		}
	}
}

func TestSettingsValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		ctx  map[string]any
		want string // substring of the error, naming the context key
	}{
		"lease not below worker timeout":  {map[string]any{"leaseMs": 60000}, `"leaseMs"`},
		"bad stage":                       {map[string]any{"stage": "Prod!"}, `"stage"`},
		"batch size":                      {map[string]any{"workerBatchSize": 11}, `"workerBatchSize"`},
		"max concurrency":                 {map[string]any{"dlqMaxConcurrency": 1}, `"dlqMaxConcurrency"`},
		"reserved for unknown function":   {map[string]any{"reservedConcurrency": `{"api": 3}`}, `"reservedConcurrency"`},
		"retention":                       {map[string]any{"logRetentionDays": 31}, `"logRetentionDays"`},
		"jwt half configured":             {map[string]any{"jwtIssuer": "https://id.example.com"}, `"jwtIssuer"`},
		"derived key":                     {map[string]any{"runtimeConfig": `{"queue-url": "x"}`}, `"runtimeConfig"`},
		"not a number":                    {map[string]any{"memoryMb": "lots"}, `"memoryMb"`},
		"submit beyond API Gateway":       {map[string]any{"submitTimeoutSeconds": 30}, `"submitTimeoutSeconds"`},
		"sweeper rate":                    {map[string]any{"sweeperRateMinutes": 0}, `"sweeperRateMinutes"`},
		"longest worker timeout":          {map[string]any{"workerTimeoutSeconds": 900, "leaseMs": 1000}, ""},
		"fault injection outside dev":     {map[string]any{"stage": "prod", "runtimeConfig": `{"faults.dispatch-drop-rate": "0.1"}`}, `"runtimeConfig"`},
		"fault injection in dev":          {map[string]any{"runtimeConfig": `{"faults.dispatch-drop-rate": "0.1"}`}, ""},
		"resume-token secret value":       {map[string]any{"runtimeConfig": `{"await.resume-token-secret": "x"}`}, `"runtimeConfig"`},
		"resume-token secret arn":         {map[string]any{"runtimeConfig": `{"await.resume-token-secret-arn": "x"}`}, `"runtimeConfig"`},
		"own bucket and output bucket":    {map[string]any{"outputBucket": true, "runtimeConfig": `{"output.bucket": "x"}`}, `"runtimeConfig"`},
		"own bucket":                      {map[string]any{"runtimeConfig": `{"output.bucket": "my-bucket"}`}, ""},
		"tenant header in dev":            {map[string]any{"tenantSource": "header"}, `"tenantSource"`},
		"tenant header in prod":           {map[string]any{"stage": "prod", "tenantSource": "header"}, `"tenantSource"`},
		"tenant header, any case":         {map[string]any{"stage": "qa", "tenantSource": " Header "}, `"tenantSource"`},
		"tenant none":                     {map[string]any{"stage": "prod", "tenantSource": "none"}, `"tenantSource"`},
		"tenant unknown":                  {map[string]any{"tenantSource": "cookie"}, `"tenantSource"`},
		"tenant header via runtimeConfig": {map[string]any{"runtimeConfig": `{"http.tenant-source": "header"}`}, `"tenantSource"`},
		"allow header tenant":             {map[string]any{"runtimeConfig": `{"http.allow-header-tenant": "true"}`}, `"runtimeConfig"`},
		"tenant jwt without authorizer":   {map[string]any{"tenantSource": "jwt"}, `"tenantSource"`},
		"tenant iam with jwt authorizer":  {map[string]any{"tenantSource": "iam", "jwtIssuer": "https://id.example.com", "jwtAudience": "a"}, `"tenantSource"`},
		"tenant iam-account":              {map[string]any{"stage": "prod", "tenantSource": "iam-account"}, ""},
		"tenant iam":                      {map[string]any{"stage": "prod", "tenantSource": "iam"}, ""},
		"diag via runtimeConfig":          {map[string]any{"runtimeConfig": `{"diag.enabled": "true"}`}, `"diagEnabled"`},
		"diag in prod by option":          {map[string]any{"stage": "prod", "diagEnabled": "true"}, ""},
		"await throttle above stage":      {map[string]any{"throttleRateLimit": 5}, `"awaitThrottleRateLimit"`},
		"await burst above stage":         {map[string]any{"awaitThrottleBurstLimit": 201}, `"awaitThrottleBurstLimit"`},
		"await throttle zero":             {map[string]any{"awaitThrottleRateLimit": 0}, `"awaitThrottleRateLimit"`},
		"await throttle lowered":          {map[string]any{"throttleRateLimit": 5, "awaitThrottleRateLimit": 1}, ""},
		"waf rate below minimum":          {map[string]any{"stage": "prod", "awaitWafRateLimit": 9}, `"awaitWafRateLimit"`},
		"waf window not offered":          {map[string]any{"stage": "prod", "awaitWafWindowSeconds": 90}, `"awaitWafWindowSeconds"`},
		"waf off in prod":                 {map[string]any{"stage": "prod", "awaitWaf": "false"}, ""},
		"tenant stage":                    {map[string]any{"stage": "prod", "tenantStages": `{"acme": {"rateLimit": 20, "burstLimit": 40}}`}, ""},
		"tenant stage bad name":           {map[string]any{"tenantStages": `{"Acme": {"rateLimit": 20, "burstLimit": 40}}`}, `"tenantStages"`},
		"tenant stage digit word":         {map[string]any{"tenantStages": `{"acme-1": {"rateLimit": 20, "burstLimit": 40}}`}, `"tenantStages"`},
		"tenant stage default":            {map[string]any{"tenantStages": `{"$default": {"rateLimit": 20, "burstLimit": 40}}`}, `"tenantStages"`},
		"tenant stage no burst":           {map[string]any{"tenantStages": `{"acme": {"rateLimit": 20}}`}, `"tenantStages"`},
		"tenant stage unknown field":      {map[string]any{"tenantStages": `{"acme": {"rate": 20, "burstLimit": 4}}`}, `"tenantStages"`},
		"tenant stage not an object":      {map[string]any{"tenantStages": `{"acme": 20}`}, `"tenantStages"`},
		"tenant stages with jwt":          {map[string]any{"jwtIssuer": "https://id.example.com", "jwtAudience": "a", "tenantStages": `{"acme": {"rateLimit": 20, "burstLimit": 40}}`}, `"tenantStages"`},
	} {
		_, err := settingsFrom(lookup(tc.ctx), "")
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", name, err, tc.want)
		}
	}
}

// Tenant stages come from a JSON object (cdk.json) or a string holding
// one (-c), each with its rate and burst; distinct valid names get
// distinct logical ids.
func TestTenantStagesFromContext(t *testing.T) {
	want := map[string]Throttle{"acme": {RateLimit: 20, BurstLimit: 40}, "big-co": {RateLimit: 0.5, BurstLimit: 1}}
	for name, v := range map[string]any{
		"string": `{"acme": {"rateLimit": 20, "burstLimit": 40}, "big-co": {"rateLimit": "0.5", "burstLimit": 1}}`,
		"json": map[string]any{"acme": map[string]any{"rateLimit": 20.0, "burstLimit": 40.0},
			"big-co": map[string]any{"rateLimit": 0.5, "burstLimit": 1.0}},
	} {
		s, err := settingsFrom(lookup(map[string]any{"stage": "prod", "tenantStages": v}), "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(s.TenantStages, want) {
			t.Errorf("%s: %+v, want %+v", name, s.TenantStages, want)
		}
	}
	ids := map[string]string{}
	for _, n := range []string{"acme", "acme-eu", "acmeeu", "a-b", "ab", "a-bc", "ab-c", "big-co", "bigco"} {
		if !tenantStageRE.MatchString(n) {
			t.Fatalf("%q is not a valid tenant stage name", n)
		}
		id := TenantStageID(n)
		if other, dup := ids[id]; dup {
			t.Errorf("%q and %q share the logical id suffix %s", n, other, id)
		}
		ids[id] = n
	}
	if got := TenantStageID("big-co"); got != "BigCo" {
		t.Errorf("TenantStageID(big-co) = %s", got)
	}
}

// diag.enabled follows the stage (on in dev, off elsewhere) unless the
// diagEnabled option says otherwise; http.tenant-source is iam unless
// tenantSource opts into iam-account.
func TestStageEnvironmentOptions(t *testing.T) {
	r := Resources{ExecutionTable: "e", PayloadTable: "p", DeadLetterTable: "d", EffectTable: "x", HistoryTable: "h", QueueURL: "q", DLQURL: "l", RejectQueueURL: "r"}
	diag := config.EnvName(config.FullKey("diag.enabled"))
	tenant := config.EnvName(config.FullKey("http.tenant-source"))
	for name, tc := range map[string]struct {
		ctx          map[string]any
		diag, tenant string
	}{
		"dev":              {map[string]any{}, "true", "iam"},
		"prod":             {map[string]any{"stage": "prod"}, "false", "iam"},
		"qa":               {map[string]any{"stage": "qa"}, "false", "iam"},
		"dev without diag": {map[string]any{"diagEnabled": false}, "false", "iam"},
		"prod with diag":   {map[string]any{"stage": "prod", "diagEnabled": "true"}, "true", "iam"},
		"prod per account": {map[string]any{"stage": "prod", "tenantSource": "iam-account"}, "false", "iam-account"},
		"jwt":              {map[string]any{"jwtIssuer": "https://id.example.com", "jwtAudience": "a"}, "true", "jwt"},
		"jwt named":        {map[string]any{"tenantSource": "jwt", "jwtIssuer": "https://id.example.com", "jwtAudience": "a"}, "true", "jwt"},
	} {
		s, err := settingsFrom(lookup(tc.ctx), "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		env, err := Environment(s, r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if env[diag] != tc.diag || env[tenant] != tc.tenant {
			t.Errorf("%s: %s=%q %s=%q, want %q and %q", name, diag, env[diag], tenant, env[tenant], tc.diag, tc.tenant)
		}
	}
	// A Settings value built by hand, past Validate, still cannot deploy
	// the header tenant source.
	s := DefaultSettings("dev")
	s.TenantSource = "header"
	if _, err := Environment(s, r); err == nil || !strings.Contains(err.Error(), "tenantSource") {
		t.Errorf("Environment with tenant source header: %v", err)
	}
	if _, err := New(awscdk.NewApp(nil), "header", Props{Settings: s}); err == nil || !strings.Contains(err.Error(), "tenantSource") {
		t.Errorf("New with tenant source header: %v", err)
	}
}

func TestEnvironmentRefusesBadConfig(t *testing.T) {
	s := DefaultSettings("dev")
	r := Resources{ExecutionTable: "e", PayloadTable: "p", DeadLetterTable: "d", EffectTable: "x", HistoryTable: "h", QueueURL: "q", DLQURL: "l", RejectQueueURL: "r"}
	if _, err := Environment(s, r); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	s.RuntimeConfig = map[string]string{"no-such-key": "1"}
	if _, err := Environment(s, r); err == nil || !strings.Contains(err.Error(), "no-such-key") {
		t.Errorf("unknown key: %v", err)
	}
	s.RuntimeConfig = map[string]string{"max-retries": "-1"}
	if _, err := Environment(s, r); err == nil || !strings.Contains(err.Error(), "max-retries") {
		t.Errorf("invalid value: %v", err)
	}
	s.RuntimeConfig = nil
	r.QueueURL = ""
	if _, err := Environment(s, r); err == nil || !strings.Contains(err.Error(), "queue-url") {
		t.Errorf("missing queue URL: %v", err)
	}
}

func TestQueueVisibility(t *testing.T) {
	q := schema.Queue{VisibilityTimeout: schema.WorkVisibility}
	if got := QueueVisibility(q, 60*time.Second); got != 6*time.Minute {
		t.Errorf("60s consumer: %v", got)
	}
	if got := QueueVisibility(q, 5*time.Second); got != schema.WorkVisibility {
		t.Errorf("5s consumer: %v, want the schema's %v", got, schema.WorkVisibility)
	}
}

// New refuses an empty dist directory, saying how to build the bundles.
func TestNewRefusesMissingBundles(t *testing.T) {
	s := DefaultSettings("dev")
	s.DistDir = t.TempDir()
	_, err := New(awscdk.NewApp(nil), "missing", Props{Settings: s})
	if err == nil || !strings.Contains(err.Error(), "build-lambda") || !strings.Contains(err.Error(), "Props.Bundles") {
		t.Errorf("New without bundles: %v", err)
	}
}

// cdk.json runs the app with `go run .`, and its context only restates
// defaults, so that `go run .` (which does not read cdk.json) and the CDK
// CLI synthesize the same stack for every stage.
func TestCDKJSON(t *testing.T) {
	raw, err := os.ReadFile("../cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		App     string         `json:"app"`
		Output  string         `json:"output"`
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.App != "go run ." || cfg.Output != "cdk.out" {
		t.Errorf("cdk.json: app %q, output %q", cfg.App, cfg.Output)
	}
	known := map[string]bool{}
	for _, k := range ContextKeys {
		known[k] = true
	}
	for k := range cfg.Context {
		if !known[k] && !strings.HasPrefix(k, "@aws-cdk/") {
			t.Errorf("cdk.json: unknown context key %q", k)
		}
	}
	for _, stage := range []string{"dev", "prod"} {
		ctx := map[string]any{}
		for k, v := range cfg.Context {
			ctx[k] = v
		}
		ctx["stage"] = stage
		got, err := settingsFrom(lookup(ctx), "")
		if err != nil {
			t.Fatalf("cdk.json with stage %s: %v", stage, err)
		}
		if want := DefaultSettings(stage); !reflect.DeepEqual(got, want) {
			t.Errorf("cdk.json changes the %s defaults:\n got  %+v\n want %+v", stage, got, want)
		}
	}
}

// samconfig.toml points `sam local invoke` at the synthesized templates.
func TestSamConfig(t *testing.T) {
	raw, err := os.ReadFile("../../../samconfig.toml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, stage := range []string{"dev", "prod"} {
		env := "default"
		if stage != "dev" {
			env = stage
		}
		section := "[" + env + ".local_invoke.parameters]"
		i := strings.Index(text, section)
		if i < 0 {
			t.Errorf("samconfig.toml: no %s", section)
			continue
		}
		want := `template_file = "infra/cdk/cdk.out/` + DefaultSettings(stage).StackName() + `.template.json"`
		if !strings.HasPrefix(strings.TrimSpace(text[i+len(section):]), want) {
			t.Errorf("samconfig.toml: %s does not start with %s", section, want)
		}
	}
}

// Names the stack shares with the runtime's code, read from its source
// so that this module does not import the AWS SDK: the lifecycle events'
// source (the condition of events:PutEvents) and the dlq function's
// metric (the dead-letter alarm).
func TestSharedNames(t *testing.T) {
	for file, want := range map[string][2]string{
		"../../../shared/internal/lifecycle/lifecycle.go": {"Source", lifecycleEventSrc},
		"../../../shared/internal/lambdahandlers/dlq.go":  {"MetricDeadLetterRecords", metricDeadLetterRecords},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, found := "", false
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if name.Name == want[0] && i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
						got, _ = strconv.Unquote(lit.Value)
						found = true
					}
				}
			}
			return true
		})
		if !found || got != want[1] {
			t.Errorf("%s: %s = %q (found %v), the stack uses %q", file, want[0], got, found, want[1])
		}
	}
}

// The stack reuses shared/schema's names for every table and queue.
func TestPhysicalNamesFromSchema(t *testing.T) {
	v := synth(t, "dev")
	n := schema.Prefixed("qasync-dev")
	for id, want := range map[string]string{
		ExecutionTableID: n.ExecutionTable, PayloadTableID: n.PayloadTable, DeadLetterTableID: n.DeadLetterTable,
		EffectTableID: n.EffectTable,
	} {
		if got := v.props(t, id)["TableName"]; got != want {
			t.Errorf("%s: %v, want %s", id, got, want)
		}
	}
	for id, want := range map[string]string{WorkQueueID: n.WorkQueue, PoisonQueueID: n.PoisonQueue, DLQQueueID: n.DLQQueue, RejectQueueID: n.RejectQueue} {
		if got := v.props(t, id)["QueueName"]; got != want {
			t.Errorf("%s: %v, want %s", id, got, want)
		}
	}
}
