package stack

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// distDir holds placeholder zips and bootstrap folders, laid out like
// make build-lambda's dist/: the tests never need the real bundles. It
// stands for this repository's dist/ (Settings.DistDir).
var distDir string

// serviceDir holds the bundles of another service (variant "service"),
// laid out like distDir but with other contents; serviceSweeper is that
// service's sweeper bundle, a folder elsewhere without a zip.
var serviceDir, serviceSweeper string

func TestMain(m *testing.M) {
	root, err := os.MkdirTemp("", "qasync-cdk-dist-")
	if err != nil {
		panic(err)
	}
	distDir, serviceDir = filepath.Join(root, "dist"), filepath.Join(root, "service", "dist")
	serviceSweeper = filepath.Join(root, "service", "build", "sweeper")
	for _, fn := range FunctionNames {
		if err := placeholderDist(distDir, fn); err != nil {
			panic(err)
		}
		if err := placeholderBundle(filepath.Join(serviceDir, fn), true, serviceContent(fn)); err != nil {
			panic(err)
		}
	}
	if err := placeholderBundle(serviceSweeper, false, serviceContent("sweeper (own folder)")); err != nil {
		panic(err)
	}
	code := m.Run()
	jsii.Close()
	os.RemoveAll(root)
	os.Exit(code)
}

// placeholderDist writes dir/<fn>.zip and the executable
// dir/<fn>/bootstrap, as make build-lambda does.
func placeholderDist(dir, fn string) error {
	return placeholderBundle(filepath.Join(dir, fn), true, "placeholder bootstrap of "+fn)
}

// serviceContent is what the bundles of the "service" variant hold.
func serviceContent(fn string) string { return "invoices bundle of " + fn }

// placeholderBundle writes the executable folder/bootstrap printing
// content and, with zip, folder.zip holding content as bootstrap.
func placeholderBundle(folder string, zip bool, content string) error {
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return err
	}
	if zip {
		if err := placeholderZip(folder+".zip", content); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(folder, "bootstrap"), []byte("#!/bin/sh\necho "+content+"\n"), 0o755)
}

// placeholderZip writes a zip holding one file named bootstrap.
func placeholderZip(path, content string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	w, err := zw.Create("bootstrap")
	if err == nil {
		_, err = w.Write([]byte(content))
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// synthesized is one synthesized variant of the stack.
type synthesized struct {
	settings Settings
	stack    awscdk.Stack
	tpl      assertions.Template
	doc      map[string]any            // the whole template
	res      map[string]map[string]any // Resources by logical id
	took     time.Duration
}

var variants = map[string]*synthesized{}

// settingsFor returns the settings of a named test variant.
func settingsFor(variant string) Settings {
	switch variant {
	case "dev":
		s := DefaultSettings("dev")
		s.DistDir = distDir
		return s
	case "prod":
		s := DefaultSettings("prod")
		s.DistDir = distDir
		return s
	case "prod-tenants": // prod with the await front turned off, and two tenant stages
		s := DefaultSettings("prod")
		s.DistDir = distDir
		s.AwaitWAF = false
		s.TenantStages = map[string]Throttle{"acme": {RateLimit: 20, BurstLimit: 40}, "big-co": {RateLimit: 50, BurstLimit: 100}}
		return s
	case "service": // another service's stack on its own bundles (bundlesFor)
		s := DefaultServiceSettings("invoices", "dev")
		s.DistDir = distDir // never used: Props.Bundles wins
		return s
	case "local-cloud": // dev with the settings local-cloud runs changed
		s := DefaultSettings("dev")
		s.DistDir = distDir
		s.WorkerBatchSize, s.WorkerBatchingWindow = 4, 3*time.Second
		s.WorkerTimeout = 90 * time.Second
		s.SweeperRate = 7 * time.Minute
		s.HistoryBatchSize = 50
		s.MemoryMB = 512
		s.RuntimeConfig = map[string]string{"max-retries": "6"}
		return s
	case "no-urgent": // dev without the urgent lane
		s := DefaultSettings("dev")
		s.DistDir = distDir
		s.UrgentLane = false
		return s
	case "full": // every option on
		s := DefaultSettings("staging")
		s.DistDir = distDir
		s.Tracing = true
		s.AlarmEmail = "ops@example.com"
		s.JWTIssuer, s.JWTAudience = "https://issuer.example.com/", []string{"qasync-api", "qasync-cli"}
		s.WorkerTimeout, s.Lease = 120*time.Second, 45*time.Second
		s.WorkerMaxConcurrency, s.DLQMaxConcurrency, s.UrgentMaxConcurrency = 50, 2, 7
		s.WorkerBatchSize, s.WorkerBatchingWindow = 5, 2*time.Second
		s.ReservedConcurrency = map[string]int{Worker: 60, Sweeper: 1}
		s.SweeperRate = 5 * time.Minute
		s.RuntimeConfig = map[string]string{"max-retries": "5", "pipeline.orchestrator.retry-delay": "2s", "tracing.exporter": "xray"}
		s.OutputBucket = true
		s.AwaitWAFRateLimit, s.AwaitWAFWindow = 300, 5*time.Minute
		return s
	}
	panic("unknown variant " + variant)
}

// bundlesFor returns Props.Bundles of a named test variant: none but for
// "service", whose functions come from serviceDir and its sweeper from a
// folder of its own.
func bundlesFor(variant string) Bundles {
	if variant == "service" {
		return Bundles{Dir: serviceDir, Functions: map[string]string{Sweeper: serviceSweeper}}
	}
	return Bundles{}
}

// synth synthesizes a variant once (with cdk-nag applied) and caches it.
func synth(t *testing.T, variant string) *synthesized {
	t.Helper()
	if v, ok := variants[variant]; ok {
		return v
	}
	s := settingsFor(variant)
	start := time.Now()
	// Annotations_FromStack reads the assembly later: keep it for the run.
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(distDir, "cdk.out-"+variant))})
	st, err := New(app, s.StackName(), Props{Settings: s, Bundles: bundlesFor(variant)})
	if err != nil {
		t.Fatalf("New(%s): %v", variant, err)
	}
	AddNagChecks(st, false)
	tpl := assertions.Template_FromStack(st, nil)
	took := time.Since(start)
	raw, err := json.Marshal(tpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	res := map[string]map[string]any{}
	for id, r := range doc["Resources"].(map[string]any) {
		res[id] = r.(map[string]any)
	}
	v := &synthesized{settings: s, stack: st, tpl: tpl, doc: doc, res: res, took: took}
	variants[variant] = v
	t.Logf("variant %s: synthesized %d resources in %v", variant, len(res), took.Round(time.Millisecond))
	return v
}

// ofType returns the logical ids of the resources of type typ, sorted.
func (v *synthesized) ofType(typ string) []string {
	var ids []string
	for id, r := range v.res {
		if r["Type"] == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// typeCounts counts the template's resources by type.
func (v *synthesized) typeCounts() map[string]int {
	out := map[string]int{}
	for _, r := range v.res {
		out[fmt.Sprint(r["Type"])]++
	}
	return out
}

// props returns the Properties of resource id, failing if it is missing.
func (v *synthesized) props(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := v.res[id]
	if !ok {
		t.Fatalf("resource %s missing from the template", id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

// str renders a template value, intrinsics included, as a string:
// {"Ref": "X"} as <X>, {"Fn::GetAtt": ["X", "Arn"]} as <X.Arn>, Fn::Join
// joined.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	case bool:
		return fmt.Sprint(x)
	case map[string]any:
		if r, ok := x["Ref"]; ok {
			return "<" + fmt.Sprint(r) + ">"
		}
		if g, ok := x["Fn::GetAtt"].([]any); ok && len(g) == 2 {
			return "<" + fmt.Sprint(g[0]) + "." + fmt.Sprint(g[1]) + ">"
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			parts := j[1].([]any)
			out := make([]string, len(parts))
			for i, p := range parts {
				out[i] = str(p)
			}
			return strings.Join(out, fmt.Sprint(j[0]))
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// list returns v as a list (a single value becomes a one-item list).
func list(v any) []any {
	if v == nil {
		return nil
	}
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

// statements returns the statements of every policy resource: inline
// policies (AWS::IAM::Policy), managed policies and roles' inline
// policies, keyed by the resource's logical id.
func (v *synthesized) statements() map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for id, r := range v.res {
		p, _ := r["Properties"].(map[string]any)
		var docs []any
		switch r["Type"] {
		case "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy":
			docs = append(docs, p["PolicyDocument"])
		case "AWS::IAM::Role":
			for _, pol := range list(p["Policies"]) {
				docs = append(docs, pol.(map[string]any)["PolicyDocument"])
			}
		}
		for _, d := range docs {
			for _, s := range list(d.(map[string]any)["Statement"]) {
				out[id] = append(out[id], s.(map[string]any))
			}
		}
	}
	return out
}

// grantsOf returns "action resource" for every statement of the inline
// policy attached to role, sorted.
func (v *synthesized) grantsOf(t *testing.T, role string) []string {
	t.Helper()
	var out []string
	found := false
	for _, id := range v.ofType("AWS::IAM::Policy") {
		p := v.props(t, id)
		attached := false
		for _, r := range list(p["Roles"]) {
			attached = attached || str(r) == "<"+role+">"
		}
		if !attached {
			continue
		}
		found = true
		for _, s := range list(p["PolicyDocument"].(map[string]any)["Statement"]) {
			st := s.(map[string]any)
			if st["Effect"] != "Allow" || st["NotAction"] != nil || st["NotResource"] != nil {
				t.Errorf("%s: statement %v is not a plain Allow", id, st)
			}
			cond := ""
			if c, ok := st["Condition"]; ok {
				cond = " if " + str(c)
			}
			for _, a := range list(st["Action"]) {
				for _, r := range list(st["Resource"]) {
					out = append(out, str(a)+" "+str(r)+cond)
				}
			}
		}
	}
	if !found {
		t.Fatalf("no policy attached to role %s", role)
	}
	sort.Strings(out)
	return out
}

// env returns a function's environment with values rendered by str.
func (v *synthesized) env(t *testing.T, fnID string) map[string]string {
	t.Helper()
	vars := v.props(t, fnID)["Environment"].(map[string]any)["Variables"].(map[string]any)
	out := map[string]string{}
	for k, x := range vars {
		out[k] = str(x)
	}
	return out
}

// num reads a numeric property.
func num(t *testing.T, v any) float64 {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	return f
}
