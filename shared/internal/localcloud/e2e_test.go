package localcloud_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/devstack"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/schema"
)

// devTemplate is the dev stack's synthesized template, kept fresh by
// infra/cdk/stack's TestGoldenTemplate: every e2e test runs its topology,
// with its IAM policies enforced, as the functions' roles would in AWS.
func devTemplate(t *testing.T) *iamcheck.Template {
	t.Helper()
	tpl, err := iamcheck.ParseTemplate(devstack.Template)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// app is the dev stack's topology on fresh tables and queues.
type app struct {
	*localcloud.Cloud
	clients awsclient.Clients
	names   schema.Names
	urls    map[string]string
	region  string
	caller  localcloud.Caller
}

// e2eCallerARN is the IAM user the tests sign their requests as: it holds
// the stack's client and operator policies, as a deployment's operator
// would.
const e2eCallerARN = "arn:aws:iam::000000000000:user/e2e-operator"

// startApp runs the dev stack's synthesized template on fresh tables and
// queues: its five functions (built for the host) with its environment,
// timeouts and memory, its routes, event source mappings and schedule,
// its IAM policies enforced. cfg holds config keys (without KeyPrefix)
// that override the template's environment for every function, as
// qasync local's config flags do; the tests use them to shorten waits
// (retries, leases). Unless tweak changes the template, a call the
// policies deny fails the test, and the calls made are logged with the
// statements that allowed them.
func startApp(t *testing.T, cfg map[string]string, tweak func(*localcloud.Options)) *app {
	t.Helper()
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "functions")); errors.Is(err, os.ErrNotExist) {
		t.Skip("functions/ is not there yet")
	}
	clients, _ := awstest.Clients(t)
	bin := build(t, "./functions/submit", "./functions/worker", "./functions/sweeper", "./functions/dlq", "./functions/history")
	names := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(names)...)
	urls := awstest.Queues(t, clients, schema.Queues(names)...)
	local := iamcheck.LocalNames(names, urls, "", "")
	tpl := devTemplate(t)
	tp, err := localcloud.TopologyOf(tpl, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := localcloud.ConfigureQueues(t.Context(), clients.SQS, tp.QueueSettings); err != nil {
		t.Fatal(err)
	}

	keys := map[string]string{"retry-delay": "200ms"}
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

	logDir := t.TempDir()
	opts := localcloud.Options{
		RIE:             rie(t),
		Env:             env,
		Addr:            "127.0.0.1:0",
		Functions:       map[string]localcloud.FunctionOptions{},
		SQS:             clients.SQS,
		DynamoDB:        clients.DynamoDB,
		DynamoDBStreams: clients.DynamoDBStreams,
		// The work queue's visibility timeout is the stack's 6 minutes: a
		// message a killed worker held comes back sooner here.
		WaitTimeSeconds:   1,
		VisibilityTimeout: 5 * time.Second,
		RestartDelay:      300 * time.Millisecond,
		DrainTimeout:      5 * time.Second,
		LogDir:            logDir,
		Logger:            testLogger(t),
		IAM:               &localcloud.IAMOptions{Template: tpl, Local: local},
	}
	for _, fn := range localcloud.Functions {
		opts.Functions[fn] = localcloud.FunctionOptions{Bootstrap: filepath.Join(bin, fn)}
	}
	if err := tp.Apply(&opts); err != nil {
		t.Fatal(err)
	}
	// The stack sweeps every minute; the tests cannot wait that long.
	for i := range opts.Schedules {
		opts.Schedules[i].Every = time.Second
	}
	caller, err := localcloud.TemplateOperator(tpl, local, "AKIAE2EOPERATOR", awstest.Name(t, "secret"), e2eCallerARN)
	if err != nil {
		t.Fatal(err)
	}
	opts.Callers = []localcloud.Caller{caller}
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
	a := &app{Cloud: c, clients: clients, names: names, urls: urls, region: iamcheck.DefaultRegion, caller: caller}
	// With many emulators starting at once on this machine, a process can
	// lose its port to another between the port's choice and its bind and
	// exit at its first invocation; the harness restarts it on fresh ports
	// (as a platform retries a failed cold start). Wait until each
	// function has answered once, so the tests start from a settled cloud.
	eventually(t, 20*time.Second, "submit answering", func() bool {
		status, _ := a.call(t, http.MethodGet, "/healthz", "", nil)
		return status == http.StatusOK
	})
	for _, fn := range []string{localcloud.Worker, localcloud.DLQ, localcloud.History} {
		eventually(t, 20*time.Second, fn+" answering", func() bool {
			_, err := c.Invoke(t.Context(), fn, []byte(`{"Records":[]}`))
			return err == nil
		})
	}
	return a
}

// call makes an HTTP request to the front, signed with SigV4 as the
// test's IAM caller (as API Gateway's IAM routes want), and decodes a
// JSON answer.
func (a *app) call(t *testing.T, method, path, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	status, b := a.do(t, method, path, body, header, true)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, path, status, b)
	}
	return status, m
}

// do makes an HTTP request to the front, signed or not.
func (a *app) do(t *testing.T, method, path, body string, header map[string]string, sign bool) (int, []byte) {
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
	if sign {
		sum := sha256.Sum256([]byte(body))
		creds := aws.Credentials{AccessKeyID: a.caller.AccessKeyID, SecretAccessKey: a.caller.SecretAccessKey}
		if err := v4.NewSigner().SignHTTP(t.Context(), creds, req, hex.EncodeToString(sum[:]), "execute-api", a.region, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// submit submits input to pipeline and returns the execution id. The
// stack requires an Idempotency-Key: without one in header, a fresh one
// is sent.
func (a *app) submit(t *testing.T, pipeline, input string, header map[string]string) string {
	t.Helper()
	h := map[string]string{"Idempotency-Key": awstest.Name(t, "key")}
	for k, v := range header {
		h[k] = v
	}
	status, m := a.call(t, http.MethodPost, "/v1/pipelines/"+pipeline+"/executions", input, h)
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
	// The routes are the stack's: an unsigned call of an IAM route never
	// reaches the function.
	if status, body := a.do(t, http.MethodGet, "/v1/executions/"+id, "", nil, false); status != http.StatusForbidden {
		t.Errorf("unsigned status read: %d %s, want 403", status, body)
	}
	a.wholeHistory(t, id, "validate", "reserve-inventory", "capture-payment", "schedule-delivery")
	// The lifecycle event went to the stack's bus, put by the history
	// function from the stream (allowed by its role: events:source
	// qasync), into the local sink, with its deterministic id.
	eventually(t, 20*time.Second, "the lifecycle event of "+id, func() bool {
		for _, e := range a.Events() {
			if e.DetailType == "Execution Succeeded" && strings.Contains(string(e.Detail), id) {
				if e.Function != localcloud.History || e.Source != "qasync" || e.Bus != "qasync-dev-lifecycle" || !strings.Contains(string(e.Detail), `"eventId":"`) {
					t.Errorf("lifecycle event %+v", e)
				}
				return true
			}
		}
		return false
	})
}

// wholeHistory waits until the history function, fed by the execution
// table's stream through the stack's event source mapping, has stored the
// execution's whole history: numbered without gaps from SUBMITTED to
// SUCCEEDED, with each of steps succeeded.
func (a *app) wholeHistory(t *testing.T, id string, steps ...string) []map[string]any {
	t.Helper()
	var events []map[string]any
	eventually(t, 30*time.Second, "the history of "+id, func() bool {
		status, page := a.call(t, http.MethodGet, "/v1/executions/"+id+"/history?limit=100", "", nil)
		if status != http.StatusOK {
			return false
		}
		events = nil
		list, _ := page["events"].([]any)
		for _, e := range list {
			m, _ := e.(map[string]any)
			events = append(events, m)
		}
		return len(events) > 0 && events[len(events)-1]["type"] == "SUCCEEDED"
	})
	succeeded := map[string]bool{}
	for i, e := range events {
		if seq, _ := e["seq"].(float64); int(seq) != i+1 {
			t.Errorf("event %d has seq %v: %v", i, e["seq"], events)
		}
		if e["type"] == "STEP_SUCCEEDED" {
			succeeded[fmt.Sprint(e["stepName"])] = true
		}
	}
	if events[0]["type"] != "SUBMITTED" {
		t.Errorf("history starts with %v", events[0])
	}
	for _, step := range steps {
		if !succeeded[step] {
			t.Errorf("no STEP_SUCCEEDED for %s in %v", step, events)
		}
	}
	return events
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
	events := a.wholeHistory(t, id, "work")
	took := false
	for _, e := range events {
		took = took || e["type"] == "LEASE_TAKEN_OVER"
	}
	if !took {
		t.Errorf("the history does not tell the takeover: %v", events)
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

// A work item lost between the durable submit and the queue (here the
// submit function may not send to the work queue) is found by the
// sweeper on the stack's schedule, which dispatches it again: the
// execution succeeds through the sweeper alone.
func TestE2ESweeperRedispatchesLostWork(t *testing.T) {
	t.Parallel()
	cut, n := devTemplate(t).Without("SubmitFunction", "sqs:SendMessage", "WorkQueue")
	if n != 1 {
		t.Fatalf("removed %d grants, want 1", n)
	}
	a := startApp(t, map[string]string{"sweep-grace": "1s"}, func(o *localcloud.Options) { o.IAM.Template = cut })
	id := a.submit(t, "diag.drill", `{"echo":"swept"}`, nil)
	a.waitStatus(t, id, 40*time.Second, statusIs("SUCCEEDED"))
	lost := 0
	for _, d := range a.Denials() {
		if d.Function != localcloud.Submit || d.Action != "sqs:SendMessage" {
			t.Errorf("unexpected denial %v", d)
		}
		lost++
	}
	if lost == 0 {
		t.Error("the submit's dispatch was not refused: the test proved nothing")
	}
	a.wholeHistory(t, id, "work")
}

// A setting changed in the template is the one the functions run with:
// with the worker's max-retries at 0 in the template's environment, a
// step that fails once (which the stack's 3 retries would carry through)
// dead-letters at once.
func TestE2EFunctionsRunWithTheTemplatesEnvironment(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(devTemplate(t))
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), `"PIPELINE_ORCHESTRATOR_MAX_RETRIES":"3"`, `"PIPELINE_ORCHESTRATOR_MAX_RETRIES":"0"`, -1))
	tpl, err := iamcheck.ParseTemplate(b)
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, nil, func(o *localcloud.Options) {
		tp, err := localcloud.TopologyOf(tpl, o.IAM.Local, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Apply(o); err != nil {
			t.Fatal(err)
		}
		for i := range o.Schedules {
			o.Schedules[i].Every = time.Second
		}
	})
	id := a.submit(t, "diag.drill", `{"failAttempts":1,"failMode":"retryable"}`, nil)
	st := a.waitStatus(t, id, 30*time.Second, func(m map[string]any) bool { return m["status"] == "DLQ" || m["status"] == "SUCCEEDED" })
	if st["status"] != "DLQ" {
		t.Errorf("with max-retries 0 in the template, a failing step ended %v", st)
	}
}

// TestE2EUrgentExecutionTakesTheUrgentLane: on the dev template, with the
// worker's mapping on the work queue removed, an execution submitted
// with priority 1 still succeeds: the submit function sent it to the
// urgent queue (its role allows it, IAM enforced) and the worker's
// second mapping delivered it; nothing was denied.
func TestE2EUrgentExecutionTakesTheUrgentLane(t *testing.T) {
	t.Parallel()
	a := startApp(t, nil, func(o *localcloud.Options) {
		o.Queues = slices.DeleteFunc(o.Queues, func(q localcloud.QueueMapping) bool { return q.ID == "WorkerWorkQueueSource" })
	})
	h := map[string]string{"Idempotency-Key": awstest.Name(t, "key")}
	status, m := a.call(t, http.MethodPost, "/v1/pipelines/checkout.deliver-order/executions?priority=1",
		`{"orderId":"1002","items":[{"sku":"pen","qty":1}],"amountCents":150}`, h)
	id, _ := m["executionId"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("urgent submit: %d %v", status, m)
	}
	st := a.waitStatus(t, id, 30*time.Second, statusIs("SUCCEEDED"))
	if st["priority"] != 1.0 {
		t.Errorf("status %v, want priority 1", st)
	}
	if d := a.Denials(); len(d) != 0 {
		t.Errorf("denials %v", d)
	}
}
