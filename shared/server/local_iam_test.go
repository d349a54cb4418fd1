package server

import (
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/devstack"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/schema"
)

// qasync local reads its own --local-* flags (a value-less
// --local-print-topology among them), leaves the config flags to
// override the template's environment, and needs a template.
func TestLocalFlags(t *testing.T) {
	own, rest, err := splitLocalFlags([]string{"--local-template", "tpl.json", "--local-print-topology", "--lease-ms", "1500", "--local-iam=false"})
	if err != nil || own["template"] != "tpl.json" || own["print-topology"] != "true" || own["iam"] != "false" || strings.Join(rest, " ") != "--lease-ms 1500" {
		t.Fatalf("splitLocalFlags: %v %v %v", own, rest, err)
	}
	lo, err := loadLocalOptions(own)
	if err != nil || lo.iam || !lo.printTopology || lo.prefix != "local" || lo.sweepEvery != 0 || lo.workerConcurrency != 2 {
		t.Errorf("options %+v, %v", lo, err)
	}
	t.Setenv("QASYNC_LOCAL_TEMPLATE", "")
	lo, err = loadLocalOptions(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if tpl, err := localTemplate(&lo); err != nil || lo.template != builtInTemplate || len(tpl.Functions()) != 5 {
		t.Errorf("without --local-template: %q, %v", lo.template, err)
	}
	if _, _, err := splitLocalFlags([]string{"--local-iam-template", "x"}); err == nil {
		t.Error("an unknown --local- flag was accepted")
	}
	env, err := configFlagEnv(rest)
	if err != nil || len(env) != 1 || env[0] != "PIPELINE_ORCHESTRATOR_LEASE_MS=1500" {
		t.Errorf("overrides %v, %v", env, err)
	}
}

// What qasync local prints at start is the template's topology.
func TestDescribeLocalTellsTheTopology(t *testing.T) {
	tpl, err := iamcheck.ParseTemplate(devstack.Template)
	if err != nil {
		t.Fatal(err)
	}
	names := schema.Prefixed("local")
	urls := map[string]string{}
	for _, q := range schema.Queues(names) {
		urls[q.Name] = "http://127.0.0.1:1/000000000000/" + q.Name
	}
	tp, err := localcloud.TopologyOf(tpl, iamcheck.LocalNames(names, urls, "", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	var opts localcloud.Options
	if err := tp.Apply(&opts); err != nil {
		t.Fatal(err)
	}
	out := describeLocal("http://127.0.0.1:8080", localOptions{template: "dev.template.json"}, tp, opts, []string{"PIPELINE_ORCHESTRATOR_LEASE_MS=1500"})
	for _, want := range []string{
		"function worker   qasync-dev-worker: timeout " + (60 * time.Second).String(),
		"function history  qasync-dev-history",
		"queue    local-work -> worker: batch 10",
		"stream   local-executions -> history: batch 1000, window 2s, bisect true, retries 10, on failure local-history-failures",
		"schedule SweeperSchedule -> sweeper: every 1m0s",
		"with IAM authorization",
		"overridden by the command line: PIPELINE_ORCHESTRATOR_LEASE_MS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
