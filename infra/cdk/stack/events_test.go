package stack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
)

// Every example event names a function of the template and has the shape
// of that function's trigger; every function has an example event.
func TestEventTargets(t *testing.T) {
	v := synth(t, "dev")
	files, err := filepath.Glob(filepath.Join("..", EventsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no example events in %s", filepath.Join("..", EventsDir))
	}
	routeKeys := map[string]bool{}
	for _, r := range Routes {
		routeKeys[r.Method+" "+r.Path] = true
	}
	covered := map[string][]string{}
	for _, f := range files {
		name := filepath.Base(f)
		target, ok := EventTargets[name]
		if !ok {
			t.Errorf("events/%s: no target function in EventTargets (stack/events.go)", name)
			continue
		}
		if v.res[target]["Type"] != "AWS::Lambda::Function" {
			t.Errorf("events/%s: target %s is not a function of the template", name, target)
			continue
		}
		covered[target] = append(covered[target], name)
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Version    string `json:"version"`
			RouteKey   string `json:"routeKey"`
			Source     string `json:"source"`
			DetailType string `json:"detail-type"`
			Records    []struct {
				EventSource string `json:"eventSource"`
			} `json:"Records"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Errorf("events/%s: %v", name, err)
			continue
		}
		switch target {
		case SubmitFunctionID: // API Gateway HTTP API, payload format 2.0
			if ev.Version != "2.0" || !routeKeys[ev.RouteKey] {
				t.Errorf("events/%s: version %q, routeKey %q: want 2.0 and a route of the API", name, ev.Version, ev.RouteKey)
			}
		case WorkerFunctionID, DLQFunctionID: // SQS batches
			if len(ev.Records) == 0 || ev.Records[0].EventSource != "aws:sqs" {
				t.Errorf("events/%s: not an SQS batch", name)
			}
		case HistoryFunctionID: // the execution table's DynamoDB stream
			if len(ev.Records) == 0 || ev.Records[0].EventSource != "aws:dynamodb" {
				t.Errorf("events/%s: not a DynamoDB stream batch", name)
			}
		case SweeperFunctionID: // EventBridge schedule
			if ev.Source != "aws.events" || ev.DetailType != "Scheduled Event" {
				t.Errorf("events/%s: not a scheduled event (source %q, detail-type %q)", name, ev.Source, ev.DetailType)
			}
		}
	}
	for file := range EventTargets {
		if _, err := os.Stat(filepath.Join("..", EventsDir, file)); err != nil {
			t.Errorf("EventTargets lists events/%s, which does not exist", file)
		}
	}
	for _, id := range v.ofType("AWS::Lambda::Function") {
		if len(covered[id]) == 0 {
			t.Errorf("function %s has no example event in events/", id)
		}
		sort.Strings(covered[id])
		t.Logf("sam local invoke %s: %v", id, covered[id])
	}
}

// Every function of the template is ready for `sam local invoke`: its
// metadata names, relative to the template's directory as SAM CLI
// resolves it, a folder holding an executable bootstrap, for the Code
// property.
func TestSamAssetMetadata(t *testing.T) {
	for _, variant := range []string{"dev", "prod", "full"} {
		v := synth(t, variant)
		outdir := *awscdk.Stage_Of(v.stack).Outdir()
		if _, err := os.Stat(filepath.Join(outdir, *v.stack.TemplateFile())); err != nil {
			t.Fatalf("%s: the template is not in %s: %v", variant, outdir, err)
		}
		fns := v.ofType("AWS::Lambda::Function")
		if len(fns) != len(FunctionNames) {
			t.Fatalf("%s: functions %v", variant, fns)
		}
		for _, id := range fns {
			md, _ := v.res[id]["Metadata"].(map[string]any)
			path, _ := md[MetaAssetPath].(string)
			if md[MetaAssetProperty] != "Code" || path == "" || md[MetaAssetBundled] != true {
				t.Errorf("%s %s: metadata %v: want %s, %s Code and %s true", variant, id, md, MetaAssetPath, MetaAssetProperty, MetaAssetBundled)
				continue
			}
			dir := path
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(outdir, dir)
			}
			boot := filepath.Join(dir, "bootstrap")
			st, err := os.Stat(boot)
			if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
				t.Errorf("%s %s: %s (from %s %q) is not an executable file: %v", variant, id, boot, MetaAssetPath, path, err)
				continue
			}
			var name string
			for n, fid := range FunctionIDs {
				if fid == id {
					name = n
				}
			}
			if want := filepath.Join(distDir, name); filepath.Clean(dir) != want {
				t.Errorf("%s %s: %s resolves to %s, want %s", variant, id, MetaAssetPath, dir, want)
			}
		}
	}
}

// New refuses a dist directory with the zips but without the unzipped
// bootstraps that `sam local invoke` runs.
func TestNewRefusesMissingBootstrap(t *testing.T) {
	dir := t.TempDir()
	for _, fn := range FunctionNames {
		if err := placeholderZip(filepath.Join(dir, fn+".zip"), "zip only"); err != nil {
			t.Fatal(err)
		}
	}
	s := DefaultSettings("dev")
	s.DistDir = dir
	_, err := New(awscdk.NewApp(nil), "nobootstrap", Props{Settings: s})
	if err == nil || !strings.Contains(err.Error(), "bootstrap") || !strings.Contains(err.Error(), "build-lambda") {
		t.Errorf("New without bootstraps: %v", err)
	}
}
