package localcloud_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/schema"
)

// localOf maps the dev template onto tables and queues named like
// qasync provision local names them.
func localOf() (iamcheck.Local, schema.Names) {
	names := schema.Prefixed("local")
	urls := map[string]string{}
	for _, q := range schema.Queues(names) {
		urls[q.Name] = "http://127.0.0.1:9324/000000000000/" + q.Name
	}
	return iamcheck.LocalNames(names, urls, "", ""), names
}

// The dev stack's topology, read from its synthesized template, is what
// the stack's code says (infra/cdk/stack: functions.go, stack.go).
func TestTopologyOfTheDevStack(t *testing.T) {
	local, names := localOf()
	tp, err := localcloud.TopologyOf(devTemplate(t), local, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Functions) != len(localcloud.Functions) {
		t.Errorf("functions %v, want all of %v", tp.Functions, localcloud.Functions)
	}
	w := tp.Functions[localcloud.Worker]
	if w.ID != "WorkerFunction" || w.Name != "qasync-dev-worker" || w.Timeout != 60*time.Second || w.MemoryMB != 256 {
		t.Errorf("worker %s %s %v %d", w.ID, w.Name, w.Timeout, w.MemoryMB)
	}
	if got := w.Env["PIPELINE_ORCHESTRATOR_DYNAMO_EXECUTION_TABLE"]; got != names.ExecutionTable {
		t.Errorf("worker's execution table %q, want the local %q", got, names.ExecutionTable)
	}
	if got := w.Env["PIPELINE_ORCHESTRATOR_QUEUE_URL"]; !strings.HasSuffix(got, "/"+names.WorkQueue) {
		t.Errorf("worker's queue URL %q, want the local work queue", got)
	}
	if tp.Functions[localcloud.History].Timeout != 60*time.Second || tp.Functions[localcloud.Submit].Timeout != 20*time.Second {
		t.Errorf("timeouts: history %v, submit %v", tp.Functions[localcloud.History].Timeout, tp.Functions[localcloud.Submit].Timeout)
	}
	var secretFns []string
	for _, s := range tp.Secrets {
		if s.Key != "PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET_ARN" || s.Secret != "AwaitResumeTokenSecret" {
			t.Errorf("secret %+v", s)
		}
		secretFns = append(secretFns, s.Function)
	}
	if strings.Join(secretFns, ",") != "submit,worker" {
		t.Errorf("functions naming the resume token secret: %v, want submit and worker", secretFns)
	}

	queues := map[string]localcloud.QueueMapping{}
	for _, q := range tp.Queues {
		queues[q.ID] = q
	}
	for id, want := range map[string]struct{ fn, queue string }{
		"WorkerWorkQueueSource":   {localcloud.Worker, names.WorkQueue},
		"WorkerUrgentQueueSource": {localcloud.Worker, names.UrgentQueue},
		"DlqDlqQueueSource":       {localcloud.DLQ, names.DLQQueue},
		"DlqPoisonQueueSource":    {localcloud.DLQ, names.PoisonQueue},
	} {
		q, ok := queues[id]
		if !ok || q.Function != want.fn || !strings.HasSuffix(q.QueueURL, "/"+want.queue) || q.BatchSize != 10 || !q.ReportBatchItemFailures {
			t.Errorf("%s: %+v, want %s on %s, batch 10, ReportBatchItemFailures", id, q, want.fn, want.queue)
		}
	}
	if len(tp.Queues) != 4 {
		t.Errorf("%d queue mappings, want 4", len(tp.Queues))
	}
	if got := w.Env["PIPELINE_ORCHESTRATOR_QUEUE_URGENT_URL"]; !strings.HasSuffix(got, "/"+names.UrgentQueue) {
		t.Errorf("worker's urgent queue URL %q, want the local urgent queue", got)
	}

	if len(tp.Streams) != 1 {
		t.Fatalf("streams %+v, want the history function's", tp.Streams)
	}
	s := tp.Streams[0]
	if s.Function != localcloud.History || s.Table != names.ExecutionTable || s.BatchSize != 1000 || s.BatchingWindow != 2*time.Second ||
		!s.ReportBatchItemFailures || !s.BisectOnError || s.MaxRetryAttempts != 10 || s.StartingPosition != "TRIM_HORIZON" ||
		!strings.HasSuffix(s.OnFailureQueueURL, "/"+names.HistoryFailureQueue) {
		t.Errorf("history stream mapping %+v", s)
	}

	if len(tp.Schedules) != 1 {
		t.Fatalf("schedules %+v, want the sweeper's", tp.Schedules)
	}
	if sc := tp.Schedules[0]; sc.Function != localcloud.Sweeper || sc.Every != time.Minute || sc.RetryAttempts != 2 || sc.MaxEventAge != time.Minute {
		t.Errorf("schedule %+v", sc)
	}

	auth := map[string]string{}
	for _, r := range tp.Routes {
		if r.Function != localcloud.Submit {
			t.Errorf("route %s invokes %s", r.Key, r.Function)
		}
		auth[r.Key] = r.Authorization
	}
	if len(tp.Routes) < 15 || auth["POST /v1/pipelines/{pipelineId}/executions"] != "AWS_IAM" ||
		auth["POST /v1/executions/{executionId}/awaits/{awaitId}/complete"] != "NONE" {
		t.Errorf("routes %v", auth)
	}
}

// edit returns the dev template with change applied to its JSON form.
func edit(t *testing.T, change func(res map[string]any)) *iamcheck.Template {
	t.Helper()
	b, err := json.Marshal(devTemplate(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	change(doc["Resources"].(map[string]any))
	b, _ = json.Marshal(doc)
	tpl, err := iamcheck.ParseTemplate(b)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func props(res map[string]any, id string) map[string]any {
	return res[id].(map[string]any)["Properties"].(map[string]any)
}

// A setting changed in the template is the setting the harness runs, and
// what it cannot run as declared is refused naming the resource.
func TestTopologyFollowsTheTemplate(t *testing.T) {
	local, _ := localOf()
	tpl := edit(t, func(res map[string]any) {
		props(res, "WorkerWorkQueueSource")["BatchSize"] = 3.0
		props(res, "WorkerWorkQueueSource")["MaximumBatchingWindowInSeconds"] = 1.0
		delete(props(res, "DlqDlqQueueSource"), "FunctionResponseTypes")
		props(res, "SweeperSchedule")["ScheduleExpression"] = "rate(5 minutes)"
		props(res, "WorkerFunction")["MemorySize"] = 512.0
		props(res, "WorkerFunction")["Environment"].(map[string]any)["Variables"].(map[string]any)["PIPELINE_ORCHESTRATOR_LEASE_MS"] = "12345"
	})
	tp, err := localcloud.TopologyOf(tpl, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	var opts localcloud.Options
	if err := tp.Apply(&opts); err != nil {
		t.Fatal(err)
	}
	for _, q := range opts.Queues {
		switch q.ID {
		case "WorkerWorkQueueSource":
			if q.BatchSize != 3 || q.BatchingWindow != time.Second {
				t.Errorf("worker mapping %+v, want batch 3 in a 1 s window", q)
			}
		case "DlqDlqQueueSource":
			if q.ReportBatchItemFailures {
				t.Errorf("dlq mapping %+v reports item failures without the response type", q)
			}
		}
	}
	if opts.Schedules[0].Every != 5*time.Minute {
		t.Errorf("schedule %+v", opts.Schedules[0])
	}
	w := opts.Functions[localcloud.Worker]
	if w.MemoryMB != 512 || !contains(w.TemplateEnv, "PIPELINE_ORCHESTRATOR_LEASE_MS=12345") {
		t.Errorf("worker options %d %v", w.MemoryMB, w.TemplateEnv)
	}
	// The secret is replaced by one random key shared by its functions.
	secret := func(fn string) string {
		for _, kv := range opts.Functions[fn].TemplateEnv {
			if v, ok := strings.CutPrefix(kv, "PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET="); ok {
				return v
			}
		}
		return ""
	}
	if s := secret(localcloud.Submit); len(s) != 64 || s != secret(localcloud.Worker) || secret(localcloud.DLQ) != "" {
		t.Errorf("resume token secret: submit %q, worker %q, dlq %q", s, secret(localcloud.Worker), secret(localcloud.DLQ))
	}
	if !contains(w.TemplateEnv, "PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET_ARN=") {
		t.Errorf("the secret's ARN is still set: %v", w.TemplateEnv)
	}

	for name, change := range map[string]func(map[string]any){
		"SweeperSchedule.ScheduleExpression": func(res map[string]any) {
			props(res, "SweeperSchedule")["ScheduleExpression"] = "cron(0 12 * * ? *)"
		},
		"HistoryExecutionStreamSource: ParallelizationFactor": func(res map[string]any) {
			props(res, "HistoryExecutionStreamSource")["ParallelizationFactor"] = 4.0
		},
		"WorkerWorkQueueSource: FunctionName": func(res map[string]any) {
			props(res, "WorkerWorkQueueSource")["FunctionName"] = map[string]any{"Ref": "SomeOtherFunction"}
		},
		"HttpApiPOSTv1pipelinespipelineIdexecutionsSubmitIntegration75B4BDD9: only AWS_PROXY": func(res map[string]any) {
			props(res, "HttpApiPOSTv1pipelinespipelineIdexecutionsSubmitIntegration75B4BDD9")["PayloadFormatVersion"] = "1.0"
		},
	} {
		_, err := localcloud.TopologyOf(edit(t, change), local, nil)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
