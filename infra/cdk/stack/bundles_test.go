package stack

import (
	"archive/zip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/shared/schema"
)

// stagedBootstrap returns the bootstrap inside the code asset that the
// function's Code names, as the CDK staged it into the app's output
// directory (asset.<hash>.zip for a zip, asset.<hash>/ for a folder).
func stagedBootstrap(t *testing.T, outdir string, code map[string]any) string {
	t.Helper()
	key, _ := code["S3Key"].(string)
	hash := strings.TrimSuffix(key, ".zip")
	if hash == "" || hash == key {
		t.Fatalf("Code %v: want an asset's S3Key <hash>.zip", code)
	}
	if zr, err := zip.OpenReader(filepath.Join(outdir, "asset."+hash+".zip")); err == nil {
		defer zr.Close()
		for _, f := range zr.File {
			if f.Name == "bootstrap" {
				r, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				b, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
		}
		t.Fatalf("asset %s.zip holds no bootstrap", hash)
	}
	b, err := os.ReadFile(filepath.Join(outdir, "asset."+hash, "bootstrap"))
	if err != nil {
		t.Fatalf("asset %s staged neither as a zip nor as a folder with a bootstrap: %v", hash, err)
	}
	return string(b)
}

// A stack built for another service on its own bundles (Props.Bundles: a
// dist directory, and one function in a folder of its own without a zip)
// deploys those bundles, and points `sam local invoke` at them, never at
// Settings.DistDir (this repository's dist/); its names follow its
// service.
func TestBundlesOfAnotherService(t *testing.T) {
	v := synth(t, "service")
	outdir := *awscdk.Stage_Of(v.stack).Outdir()
	want := map[string]string{Submit: filepath.Join(serviceDir, Submit), Worker: filepath.Join(serviceDir, Worker),
		Sweeper: serviceSweeper, DLQ: filepath.Join(serviceDir, DLQ), History: filepath.Join(serviceDir, History)}
	for _, name := range FunctionNames {
		id := FunctionIDs[name]
		p := v.props(t, id)
		boot := stagedBootstrap(t, outdir, p["Code"].(map[string]any))
		content := serviceContent(name)
		if name == Sweeper {
			content = serviceContent("sweeper (own folder)")
		}
		if !strings.Contains(boot, content) || strings.Contains(boot, "placeholder") {
			t.Errorf("%s: the code asset's bootstrap is %q, want the service's bundle (%q)", id, boot, content)
		}
		md := v.res[id]["Metadata"].(map[string]any)
		path, _ := md[MetaAssetPath].(string)
		if !filepath.IsAbs(path) {
			path = filepath.Join(outdir, path)
		}
		if filepath.Clean(path) != want[name] {
			t.Errorf("%s: %s resolves to %s, want the service's bundle %s", id, MetaAssetPath, path, want[name])
		}
		if strings.HasPrefix(filepath.Clean(path), distDir) {
			t.Errorf("%s: %s points into Settings.DistDir %s", id, MetaAssetPath, distDir)
		}
		if got := p["FunctionName"]; got != "invoices-dev-"+name {
			t.Errorf("%s: FunctionName %v, want invoices-dev-%s", id, got, name)
		}
		if got := v.env(t, id)["PIPELINE_ORCHESTRATOR_METRICS_NAMESPACE"]; got != "invoices/dev" {
			t.Errorf("%s: metrics namespace %q, want invoices/dev", id, got)
		}
	}
	if got := *v.stack.StackName(); got != "invoices-dev" {
		t.Errorf("stack name %s, want invoices-dev", got)
	}
	if got := v.doc["Description"]; got != "invoices on the qasync durable queue-async runtime, stage dev" {
		t.Errorf("description %v", got)
	}
	n := schema.Prefixed("invoices-dev")
	for id, name := range map[string]string{ExecutionTableID: n.ExecutionTable, PayloadTableID: n.PayloadTable,
		DeadLetterTableID: n.DeadLetterTable, EffectTableID: n.EffectTable} {
		if got := v.props(t, id)["TableName"]; got != name {
			t.Errorf("%s: TableName %v, want %s", id, got, name)
		}
	}
	v.tpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"TableName": "invoices-dev-executions",
		"Tags":      assertions.Match_ArrayWith(&[]any{map[string]any{"Key": "app", "Value": "invoices"}}),
	})
	ann := assertions.Annotations_FromStack(v.stack)
	for _, m := range *ann.FindError(jsii.String("*"), assertions.Match_AnyValue()) {
		t.Errorf("service: error annotation at %s: %v", *m.Id, m.Entry.Data)
	}
}

// New refuses Bundles naming an unknown function or a folder without an
// executable bootstrap, naming what is wrong.
func TestBundlesRefused(t *testing.T) {
	s := DefaultServiceSettings("invoices", "dev")
	s.DistDir = distDir
	empty := t.TempDir()
	for name, tc := range map[string]struct {
		bundles Bundles
		want    []string
	}{
		"unknown function": {Bundles{Dir: serviceDir, Functions: map[string]string{"api": serviceSweeper}}, []string{"Bundles.Functions", "api"}},
		"no bootstrap":     {Bundles{Dir: serviceDir, Functions: map[string]string{Worker: empty}}, []string{filepath.Join(empty, "bootstrap"), "Props.Bundles"}},
		"empty dir":        {Bundles{Dir: empty}, []string{filepath.Join(empty, Submit, "bootstrap"), "not executable"}},
	} {
		_, err := New(awscdk.NewApp(nil), "refused", Props{Settings: s, Bundles: tc.bundles})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: New: %v, want an error naming %q", name, err, w)
			}
		}
	}
}

// A service's settings: its stack, prefix and metrics namespace follow
// its name, from DefaultServiceSettings or from context "service"; a
// malformed name is refused naming the context key.
func TestServiceSettings(t *testing.T) {
	s := DefaultServiceSettings("invoices", "prod")
	if s.StackName() != "invoices-prod" || s.Prefix != "invoices-prod" || s.MetricsNamespace != "invoices/prod" || !s.Retain {
		t.Errorf("DefaultServiceSettings: %+v", s)
	}
	got, err := settingsFrom(lookup(map[string]any{"service": "invoices", "stage": "prod"}), "")
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("context service invoices, stage prod:\n got  %+v (%v)\n want %+v", got, err, s)
	}
	if d := DefaultSettings("dev"); d.Service != DefaultService || d.StackName() != "qasync-dev" {
		t.Errorf("DefaultSettings: service %q, stack %s", d.Service, d.StackName())
	}
	if _, err := settingsFrom(lookup(map[string]any{"service": "Invoices!"}), ""); err == nil || !strings.Contains(err.Error(), `"service"`) {
		t.Errorf("malformed service: %v", err)
	}
	// An app of another service gives its name as a context default.
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{CtxService: "invoices"}})
	if s, err := SettingsFromContext(app.Node(), ""); err != nil || s.Service != "invoices" {
		t.Errorf("AppProps context service: %q, %v", s.Service, err)
	}
}

// Synth refuses an app with an error annotation (as the CDK CLI does),
// naming it.
func TestSynthRefusesErrorAnnotations(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	st := awscdk.NewStack(app, jsii.String("annotated"), nil)
	awscdk.NewCfnWaitConditionHandle(st, jsii.String("Placeholder"), nil) // a stack needs a resource
	awscdk.Annotations_Of(st).AddError(jsii.String("a test error"))
	if _, err := Synth(app); err == nil || !strings.Contains(err.Error(), "a test error") {
		t.Errorf("Synth of an annotated app: %v", err)
	}
}
