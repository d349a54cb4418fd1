package localcloud_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// devTemplate is the dev stack's synthesized template, kept fresh by
// infra/cdk/stack's TestGoldenTemplate: every e2e test runs with its IAM
// policies enforced, as the functions' roles would in AWS.
func devTemplate(t *testing.T) *iamcheck.Template {
	t.Helper()
	tpl, err := iamcheck.LoadTemplate(filepath.Join(repoRoot(t), "shared", "internal", "iamcheck", "testdata", "dev.template.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// app is the real topology on fresh tables and queues.
type app struct {
	*localcloud.Cloud
	clients awsclient.Clients
	names   schema.Names
	urls    map[string]string
}

// startApp builds the functions qasync local runs (submit, worker,
// sweeper, dlq) for the host, provisions fresh
// tables and queues, and starts them under the harness with the config
// keys in cfg (without KeyPrefix) on top of the durable providers, with
// the dev template's IAM policies enforced. Unless tweak changes the
// template, a call the policies deny fails the test, and the calls made
// are logged with the statements that allowed them.
func startApp(t *testing.T, cfg map[string]string, tweak func(*localcloud.Options)) *app {
	t.Helper()
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "functions")); errors.Is(err, os.ErrNotExist) {
		t.Skip("functions/ is not there yet")
	}
	clients, _ := awstest.Clients(t)
	bin := build(t, "./functions/submit", "./functions/worker", "./functions/sweeper", "./functions/dlq")
	names := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(names)...)
	urls := awstest.Queues(t, clients, schema.Queues(names)...)

	keys := map[string]string{
		"state-provider": "dynamo", "dispatcher-provider": "sqs", "dlq-provider": "sqs",
		"queue-url": urls[names.WorkQueue], "dlq-url": urls[names.DLQQueue],
		"dynamo.execution-table":         names.ExecutionTable,
		"dynamo.execution-payload-table": names.PayloadTable, "dynamo.dead-letter-table": names.DeadLetterTable,
		"dynamo.effect-table": names.EffectTable, "dynamo.history-table": names.HistoryTable,
		"idempotency-policy": "OPTIONAL_CLIENT_KEY", "retry-delay": "200ms",
		"diag.enabled": "true", // the tests submit diag.drill
	}
	for k, v := range cfg {
		keys[k] = v
	}
	var env []string
	for _, kv := range localcloud.ForwardEnv(os.Environ()) {
		if strings.HasPrefix(kv, "AWS_") { // not the test process's own PIPELINE_ORCHESTRATOR_*
			env = append(env, kv)
		}
	}
	for k, v := range keys {
		env = append(env, config.EnvName(config.KeyPrefix+k)+"="+v)
	}

	poison, err := sqsbackend.RedriveTargetURL(t.Context(), clients.SQS, urls[names.WorkQueue])
	if err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	opts := localcloud.Options{
		RIE:  rie(t),
		Env:  env,
		Addr: "127.0.0.1:0",
		Functions: map[string]localcloud.FunctionOptions{
			localcloud.Submit: {Bootstrap: filepath.Join(bin, "submit")},
			// The worker starts a record only with at least a lease of time
			// left: its timeout must exceed the lease (default 30 s).
			localcloud.Worker:  {Bootstrap: filepath.Join(bin, "worker"), Timeout: 60 * time.Second},
			localcloud.Sweeper: {Bootstrap: filepath.Join(bin, "sweeper")},
			localcloud.DLQ:     {Bootstrap: filepath.Join(bin, "dlq")},
			localcloud.History: {Disabled: true},
		},
		SQS:               clients.SQS,
		WorkQueueURL:      urls[names.WorkQueue],
		DLQQueueURL:       urls[names.DLQQueue],
		PoisonQueueURL:    poison,
		WaitTimeSeconds:   1,
		VisibilityTimeout: 5 * time.Second,
		SweepEvery:        time.Second,
		RestartDelay:      300 * time.Millisecond,
		DrainTimeout:      5 * time.Second,
		LogDir:            logDir,
		Logger:            testLogger(t),
		IAM:               &localcloud.IAMOptions{Template: devTemplate(t), Local: iamcheck.LocalNames(names, urls, "", "")},
	}
	full := opts.IAM.Template
	if tweak != nil {
		tweak(&opts)
	}
	t.Cleanup(func() { dumpLogs(t, logDir) })
	c := start(t, opts)
	if opts.IAM != nil && opts.IAM.Template == full {
		t.Cleanup(func() {
			for _, d := range c.Denials() {
				t.Errorf("denied with the stack's own policies: %v", d)
			}
			t.Logf("AWS calls allowed by the template's policies:\n%s", localcloud.FormatCalls(c.IAMCalls()))
		})
	}
	t.Cleanup(func() {
		for _, cs := range c.ColdStarts() {
			t.Logf("cold start %s[%d] pid %d: ready %v (first invoke %v; init %v, RIE REPORT Init Duration %v)",
				cs.Function, cs.Instance, cs.PID, cs.Ready.Round(time.Millisecond), cs.Invoke.Round(100*time.Microsecond),
				cs.Init.Round(10*time.Microsecond), cs.ReportedInit.Round(10*time.Microsecond))
		}
	})
	a := &app{Cloud: c, clients: clients, names: names, urls: urls}
	// With many emulators starting at once on this machine, a process can
	// lose its port to another between the port's choice and its bind and
	// exit at its first invocation; the harness restarts it on fresh ports
	// (as a platform retries a failed cold start). Wait until each
	// function has answered once, so the tests start from a settled cloud.
	eventually(t, 20*time.Second, "submit answering", func() bool {
		status, _ := a.call(t, http.MethodGet, "/healthz", "", nil)
		return status == http.StatusOK
	})
	for _, fn := range []string{localcloud.Worker, localcloud.DLQ} {
		eventually(t, 20*time.Second, fn+" answering", func() bool {
			_, err := c.Invoke(t.Context(), fn, []byte(`{"Records":[]}`))
			return err == nil
		})
	}
	return a
}

// call makes an HTTP request to the front and decodes a JSON answer.
func (a *app) call(t *testing.T, method, path, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, a.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// submit submits input to pipeline and returns the execution id.
func (a *app) submit(t *testing.T, pipeline, input string, header map[string]string) string {
	t.Helper()
	status, m := a.call(t, http.MethodPost, "/v1/pipelines/"+pipeline+"/executions", input, header)
	id, _ := m["executionId"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("submit %s: %d %v", pipeline, status, m)
	}
	return id
}

// waitStatus polls the status endpoint until the execution's status is
// want (or cond holds, when given) and returns the last status document.
func (a *app) waitStatus(t *testing.T, id string, d time.Duration, cond func(map[string]any) bool) map[string]any {
	t.Helper()
	var last map[string]any
	eventually(t, d, "execution "+id, func() bool {
		_, last = a.call(t, http.MethodGet, "/v1/executions/"+id, "", nil)
		return cond(last)
	})
	return last
}

func statusIs(want string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["status"] == want }
}

func TestE2ESubmitOverHTTPSucceeds(t *testing.T) {
	t.Parallel()
	a := startApp(t, nil, nil)
	// Each function answers its trigger's event right away (these are the
	// cold starts the test logs: process start to first invocation).
	if status, m := a.call(t, http.MethodGet, "/healthz", "", nil); status != http.StatusOK {
		t.Errorf("healthz: %d %v", status, m)
	}
	for _, fn := range []string{localcloud.Worker, localcloud.DLQ} {
		out, err := a.Invoke(t.Context(), fn, []byte(`{"Records":[]}`))
		if err != nil || !strings.Contains(string(out), `"batchItemFailures":[]`) {
			t.Errorf("%s with an empty batch: %s, %v", fn, out, err)
		}
	}
	if _, err := a.Invoke(t.Context(), localcloud.Sweeper, []byte(`{"version":"0","id":"x","detail-type":"Scheduled Event","source":"aws.events","account":"000000000000","time":"2026-11-29T08:44:00Z","region":"us-east-1","resources":[],"detail":{}}`)); err != nil {
		t.Errorf("sweeper: %v", err)
	}

	input := `{"orderId":"1001","items":[{"sku":"book","qty":2}],"amountCents":4599}`
	key := map[string]string{"Idempotency-Key": "order-1001"}
	id := a.submit(t, "checkout.deliver-order", input, key)
	st := a.waitStatus(t, id, 30*time.Second, statusIs("SUCCEEDED"))
	if st["stepName"] != "schedule-delivery" {
		t.Errorf("status %v", st)
	}
	status, res := a.call(t, http.MethodGet, "/v1/executions/"+id+"/result", "", nil)
	if status != http.StatusOK || res["orderId"] != "1001" || res["status"] != "DELIVERY_SCHEDULED" ||
		res["reservationId"] == nil || res["paymentId"] == nil || res["deliveryId"] == nil {
		t.Errorf("result: %d %v", status, res)
	}
	status, dup := a.call(t, http.MethodPost, "/v1/pipelines/checkout.deliver-order/executions", input, key)
	if status != http.StatusOK || dup["duplicate"] != true || dup["executionId"] != id {
		t.Errorf("duplicate submit: %d %v", status, dup)
	}
	if status, _ := a.call(t, http.MethodGet, "/v1/executions/nope-not-an-id", "", nil); status/100 != 4 {
		t.Errorf("unknown execution: %d", status)
	}
}

func TestE2EDeadLetterRecordedByDLQFunction(t *testing.T) {
	t.Parallel()
	a := startApp(t, nil, nil)
	id := a.submit(t, "diag.drill", `{"failAttempts":1,"failMode":"non_retryable"}`, nil)
	st := a.waitStatus(t, id, 30*time.Second, statusIs("DLQ"))
	if e, _ := st["error"].(map[string]any); e == nil || e["terminalReason"] != "non_retryable" || st["stepName"] != "work" {
		t.Errorf("status %v", st)
	}

	// The envelope went through the DLQ queue to the real dlq function,
	// which stored the record under the failed attempt's transition key.
	recs := dynamo.NewDeadLetters(a.clients.DynamoDB, a.names.DeadLetterTable, nil)
	key := fmt.Sprintf("%s:%d:%d", id, 1, 1)
	var rec deadletter.Record
	eventually(t, 20*time.Second, "the dead-letter record "+key, func() bool {
		var err error
		rec, err = recs.Get(t.Context(), key)
		if err != nil && !errors.Is(err, deadletter.ErrNotFound) {
			t.Fatalf("Get %s: %v", key, err)
		}
		return err == nil
	})
	if rec.Kind != deadletter.KindExecution || rec.ExecutionID != id || rec.Envelope == nil ||
		rec.Envelope.TerminalReason != "non_retryable" || rec.Envelope.StepName != "work" {
		t.Errorf("record %+v", rec)
	}
	// And the mapping deleted the envelope once the function handled it.
	eventually(t, 10*time.Second, "the DLQ queue drained", func() bool {
		out, err := a.clients.SQS.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(a.urls[a.names.DLQQueue]),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
				sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	})
}

func TestE2EWorkerKilledMidStepIsTakenOver(t *testing.T) {
	t.Parallel()
	a := startApp(t, map[string]string{"lease-ms": "1500", "sweep-grace": "1s"}, func(o *localcloud.Options) {
		w := o.Functions[localcloud.Worker]
		w.Concurrency = 1
		o.Functions[localcloud.Worker] = w
	})
	id := a.submit(t, "diag.drill", `{"sleepMs":3000,"echo":"takeover"}`, nil)
	a.waitStatus(t, id, 20*time.Second, func(m map[string]any) bool {
		return m["status"] == "RUNNING" && m["stepName"] == "work"
	})
	pid := a.PID(localcloud.Worker) // killed at once, inside the 3 s step
	if pid == 0 {
		t.Fatal("worker not running")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed worker pid %d during step work", pid)

	a.waitStatus(t, id, 40*time.Second, statusIs("SUCCEEDED"))
	status, res := a.call(t, http.MethodGet, "/v1/executions/"+id+"/result", "", nil)
	attempt, _ := res["workAttempt"].(float64)
	if status != http.StatusOK || attempt < 2 || res["echo"] != "takeover" {
		t.Errorf("result: %d %v, want workAttempt >= 2 (the killed attempt counts)", status, res)
	}
	if n := a.Restarts(localcloud.Worker); n < 1 {
		t.Errorf("worker restarts = %d, want at least 1", n)
	}
	t.Logf("workAttempt %s after the kill", strconv.FormatFloat(attempt, 'f', -1, 64))
}

// With one grant removed from the stack (the worker's dynamodb:UpdateItem
// on the execution table), the HA scenario fails: the worker cannot
// commit a step, and the denial names the missing action and resource.
func TestE2EMissingGrantFailsNamingIt(t *testing.T) {
	t.Parallel()
	cut, n := devTemplate(t).Without("WorkerFunction", "dynamodb:UpdateItem", "ExecutionTable")
	if n != 1 {
		t.Fatalf("removed %d grants, want 1", n)
	}
	a := startApp(t, nil, func(o *localcloud.Options) { o.IAM.Template = cut })
	id := a.submit(t, "diag.drill", `{"echo":"denied"}`, nil)
	var denial iamcheck.Denial
	eventually(t, 30*time.Second, "the worker's denied UpdateItem", func() bool {
		for _, d := range a.Denials() {
			if d.Function == localcloud.Worker && d.Action == "dynamodb:UpdateItem" {
				denial = d
				return true
			}
		}
		return false
	})
	t.Logf("denial: %v", denial)
	if !strings.HasSuffix(denial.Resource, ":table/"+a.names.ExecutionTable) || denial.Missing != "Allow dynamodb:UpdateItem on ${ExecutionTable.Arn}" {
		t.Errorf("denial %+v, want the execution table and its missing grant named", denial)
	}
	// Every write of the worker to the execution table is an UpdateItem:
	// the step can never commit.
	_, st := a.call(t, http.MethodGet, "/v1/executions/"+id, "", nil)
	if st["status"] == "SUCCEEDED" {
		t.Errorf("the execution succeeded without the worker's grant: %v", st)
	}
	for _, d := range a.Denials() {
		if d.Function != localcloud.Worker || d.Action != "dynamodb:UpdateItem" {
			t.Errorf("unexpected denial %v", d)
		}
	}
}
