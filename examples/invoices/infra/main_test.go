package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/infra/cdk/stack"
	"github.com/qasync/qasync/shared/schema"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// distDir is the service's own bundle directory, ../dist; make
// examples-test builds it (linux/arm64 bootstraps and their zips).
func distDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "dist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range stack.FunctionNames {
		if _, err := os.Stat(filepath.Join(dir, fn+".zip")); err != nil {
			if os.Getenv("QASYNC_REQUIRE_BUNDLES") == "1" {
				t.Fatalf("the service's bundles are missing (%v): make examples-bundles builds them", err)
			}
			t.Skipf("the service's bundles are missing (%v): run make examples-test", err)
		}
	}
	return dir
}

// The app synthesizes the invoices stack (cdk-nag clean) on the
// service's own bundles: every function's code asset is the zip in
// ../dist and its aws:asset:path the bundle folder there, never this
// repository's dist/; the stack is named after the service and has
// qasync's tables, queues and HTTP routes.
func TestAppDeploysTheServiceBundles(t *testing.T) {
	dist := distDir(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	outdir := t.TempDir()
	app := newApp(&awscdk.AppProps{Outdir: jsii.String(outdir)})
	st, err := newStack(app, wd)
	if err != nil {
		t.Fatal(err)
	}
	assembly, err := stack.Synth(app) // refuses cdk-nag findings
	if err != nil {
		t.Fatal(err)
	}
	if got := *st.StackName(); got != "invoices-dev" {
		t.Errorf("stack %s, want invoices-dev", got)
	}
	raw, err := json.Marshal(assembly.GetStackByName(st.StackName()).Template())
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
			Metadata   map[string]any
		}
	}
	if err := json.Unmarshal(raw, &tpl); err != nil {
		t.Fatal(err)
	}
	repoDist, err := filepath.Abs(filepath.Join("..", "..", "..", "dist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range stack.FunctionNames {
		id := stack.FunctionIDs[fn]
		r := tpl.Resources[id]
		if r.Type != "AWS::Lambda::Function" {
			t.Fatalf("%s: type %q", id, r.Type)
		}
		if got := r.Properties["FunctionName"]; got != "invoices-dev-"+fn {
			t.Errorf("%s: FunctionName %v", id, got)
		}
		key, _ := r.Properties["Code"].(map[string]any)["S3Key"].(string)
		staged, err := os.ReadFile(filepath.Join(outdir, "asset."+key))
		if err != nil {
			t.Fatalf("%s: the code asset %s is not staged as a zip: %v", id, key, err)
		}
		bundle, err := os.ReadFile(filepath.Join(dist, fn+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(staged, bundle) {
			t.Errorf("%s: the code asset is not the service's %s.zip", id, fn)
		}
		path, _ := r.Metadata[stack.MetaAssetPath].(string)
		if !filepath.IsAbs(path) {
			path = filepath.Join(outdir, path)
		}
		if path = filepath.Clean(path); path != filepath.Join(dist, fn) || strings.HasPrefix(path, repoDist+string(filepath.Separator)) {
			t.Errorf("%s: %s resolves to %s, want the service's bundle %s", id, stack.MetaAssetPath, path, filepath.Join(dist, fn))
		}
	}
	names := schema.Prefixed("invoices-dev")
	var tables, queues, routes []string
	for _, r := range tpl.Resources {
		switch r.Type {
		case "AWS::DynamoDB::Table":
			tables = append(tables, r.Properties["TableName"].(string))
		case "AWS::SQS::Queue":
			queues = append(queues, r.Properties["QueueName"].(string))
		case "AWS::ApiGatewayV2::Route":
			routes = append(routes, r.Properties["RouteKey"].(string))
		}
	}
	var wantTables, wantQueues, wantRoutes []string
	for _, tb := range schema.Tables(names) {
		wantTables = append(wantTables, tb.Name)
	}
	for _, q := range schema.Queues(names) {
		wantQueues = append(wantQueues, q.Name)
	}
	if !strings.Contains(strings.Join(wantQueues, " "), "invoices-dev-history-failures") {
		t.Errorf("the schema's queues %v lack the history function's on-failure destination", wantQueues)
	}
	for _, r := range stack.Routes {
		wantRoutes = append(wantRoutes, r.Key())
	}
	for _, l := range [][]string{tables, queues, routes, wantTables, wantQueues, wantRoutes} {
		sort.Strings(l)
	}
	if !reflect.DeepEqual(tables, wantTables) || !strings.Contains(strings.Join(tables, " "), "invoices-dev-executions") {
		t.Errorf("tables %v, want %v", tables, wantTables)
	}
	if !reflect.DeepEqual(queues, wantQueues) {
		t.Errorf("queues %v, want %v", queues, wantQueues)
	}
	if !reflect.DeepEqual(routes, wantRoutes) || !strings.Contains(strings.Join(routes, ","), "POST /v1/pipelines/{pipelineId}/executions") {
		t.Errorf("routes %v, want %v", routes, wantRoutes)
	}
}
