package localcloud_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// repoRoot finds the module root above the test's working directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/qasync/qasync\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("localcloud test: cannot find the repository root (go.mod of github.com/qasync/qasync) above the working directory")
		}
		dir = parent
	}
}

// rie returns the emulator binary, failing the test when it is missing.
func rie(t testing.TB) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), ".cache", "bin", "aws-lambda-rie")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("localcloud test: %s is missing: run `make rie` (make test-unit does it)", p)
	}
	return p
}

var builds sync.Map // package list -> *buildResult

type buildResult struct {
	once sync.Once
	dir  string
	err  error
}

var buildRoot = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "localcloud-test-") })

// build builds the packages (relative to the repository root) for the
// host with -tags lambda.norpc, once per test binary, and returns the
// directory holding one binary per package, named after its last path
// element.
func build(t testing.TB, pkgs ...string) string {
	t.Helper()
	root := repoRoot(t)
	v, _ := builds.LoadOrStore(strings.Join(pkgs, " "), &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		base, err := buildRoot()
		if err != nil {
			b.err = err
			return
		}
		b.dir, b.err = os.MkdirTemp(base, "bin-")
		if b.err != nil {
			return
		}
		args := append([]string{"build", "-tags", "lambda.norpc", "-o", b.dir + string(filepath.Separator)}, pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("localcloud test: build: %v", b.err)
	}
	return b.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := buildRoot(); err == nil && dir != "" {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// echoOptions returns Options running echofn as every function named in
// fns (the others disabled), logging into the test's temp directory.
func echoOptions(t *testing.T, record string, fns ...string) localcloud.Options {
	t.Helper()
	bin := filepath.Join(build(t, "./shared/internal/localcloud/testdata/echofn"), "echofn")
	logDir := t.TempDir()
	opts := localcloud.Options{
		RIE:          rie(t),
		Functions:    map[string]localcloud.FunctionOptions{},
		Addr:         "127.0.0.1:0",
		RestartDelay: 200 * time.Millisecond,
		DrainTimeout: 3 * time.Second,
		LogDir:       logDir,
		Env:          []string{"ECHOFN_RECORD_DIR=" + record},
		Logger:       testLogger(t),
	}
	for _, fn := range localcloud.Functions {
		opts.Functions[fn] = localcloud.FunctionOptions{Disabled: true}
	}
	for _, fn := range fns {
		opts.Functions[fn] = localcloud.FunctionOptions{Bootstrap: bin, Concurrency: 1}
	}
	t.Cleanup(func() { dumpLogs(t, logDir) })
	return opts
}

// dumpLogs prints the functions' output when the test failed.
func dumpLogs(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("--- %s (tail) ---\n%s", e.Name(), b)
	}
}

// testLogger writes the harness's events to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func start(t *testing.T, opts localcloud.Options) *localcloud.Cloud {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := localcloud.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// readRecords reads the events echofn appended to dir/kind.jsonl.
func readRecords[T any](t *testing.T, dir, kind string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, kind+".jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			continue // a line being written
		}
		out = append(out, v)
	}
	return out
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHTTPFrontMapsRequestsAndResponses(t *testing.T) {
	t.Parallel()
	record := t.TempDir()
	opts := echoOptions(t, record, localcloud.Submit)
	opts.IAMAccountID = "123456789012"
	c := start(t, opts)

	body := []byte{0xff, 0xfe, 0x00, 'h', 'i'}
	req, _ := http.NewRequest(http.MethodPost, c.URL()+"/v1/things/a%2Fb?x=1&x=2&y=z%20w", bytes.NewReader(body))
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	req.Header.Set("User-Agent", "localcloud-test/1")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Cookie", "c1=v1; c2=v2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Apigw-Requestid") == "" {
		t.Fatalf("status %d, apigw-requestid %q: %s", resp.StatusCode, resp.Header.Get("Apigw-Requestid"), out)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(out, &ev); err != nil {
		t.Fatalf("echoed event: %v: %s", err, out)
	}
	rc := ev.RequestContext
	checks := []struct {
		name      string
		got, want any
	}{
		{"version", ev.Version, "2.0"},
		{"routeKey", ev.RouteKey, "$default"},
		{"rawPath", ev.RawPath, "/v1/things/a%2Fb"},
		{"rawQueryString", ev.RawQueryString, "x=1&x=2&y=z%20w"},
		{"queryStringParameters.x", ev.QueryStringParameters["x"], "1,2"},
		{"queryStringParameters.y", ev.QueryStringParameters["y"], "z w"},
		{"headers.x-multi", ev.Headers["x-multi"], "a,b"},
		{"headers.content-type", ev.Headers["content-type"], "application/octet-stream"},
		{"headers.user-agent", ev.Headers["user-agent"], "localcloud-test/1"},
		{"headers.cookie", ev.Headers["cookie"], ""},
		{"headers.host", ev.Headers["host"], strings.TrimPrefix(c.URL(), "http://")},
		{"cookies", strings.Join(ev.Cookies, "|"), "c1=v1|c2=v2"},
		{"isBase64Encoded", ev.IsBase64Encoded, true},
		{"body", ev.Body, base64.StdEncoding.EncodeToString(body)},
		{"http.method", rc.HTTP.Method, "POST"},
		{"http.path", rc.HTTP.Path, "/v1/things/a/b"},
		{"http.sourceIp", rc.HTTP.SourceIP, "127.0.0.1"},
		{"http.userAgent", rc.HTTP.UserAgent, "localcloud-test/1"},
		{"stage", rc.Stage, "$default"},
		{"requestContext.routeKey", rc.RouteKey, "$default"},
		{"requestId", rc.RequestID, resp.Header.Get("Apigw-Requestid")},
		{"domainName", rc.DomainName, "127.0.0.1"},
		{"authorizer.iam.accountId", rc.Authorizer != nil && rc.Authorizer.IAM != nil && rc.Authorizer.IAM.AccountID == "123456789012", true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}
	if d := time.Since(time.UnixMilli(rc.TimeEpoch)); d < 0 || d > time.Minute {
		t.Errorf("timeEpoch %d is %v away from now", rc.TimeEpoch, d)
	}
	if _, err := time.Parse("02/Jan/2006:15:04:05 -0700", rc.Time); err != nil {
		t.Errorf("time %q: %v", rc.Time, err)
	}

	// A UTF-8 body travels as text; no authorizer unless configured is
	// checked in the error test below.
	resp, err = http.Post(c.URL()+"/text", "application/json", strings.NewReader(`{"héllo":1}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	ev = events.APIGatewayV2HTTPRequest{}
	_ = json.Unmarshal(out, &ev)
	if ev.IsBase64Encoded || ev.Body != `{"héllo":1}` || ev.RawQueryString != "" || ev.RequestContext.HTTP.Method != "POST" {
		t.Errorf("text body: isBase64Encoded %v body %q rawQueryString %q", ev.IsBase64Encoded, ev.Body, ev.RawQueryString)
	}

	// Response mapping: status, headers, cookies, base64 body.
	resp, err = http.Get(c.URL() + "/binary")
	if err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || !bytes.Equal(out, []byte{0, 1, 2, 0xff}) || resp.Header.Get("X-Echo") != "bin" ||
		strings.Join(resp.Header.Values("Set-Cookie"), "|") != "a=1; Path=/|b=2" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("binary response: %d %v %q", resp.StatusCode, resp.Header, out)
	}

	// A failed invocation is API Gateway's 502.
	resp, err = http.Get(c.URL() + "/fail")
	if err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || strings.TrimSpace(string(out)) != `{"message":"Internal Server Error"}` {
		t.Errorf("failed invocation: %d %s", resp.StatusCode, out)
	}
}

func TestInvokeDetectsFailures(t *testing.T) {
	t.Parallel()
	opts := echoOptions(t, t.TempDir(), localcloud.Submit)
	opts.Functions[localcloud.Submit] = localcloud.FunctionOptions{Bootstrap: opts.Functions[localcloud.Submit].Bootstrap, Timeout: time.Second}
	c := start(t, opts)
	ctx := t.Context()

	out, err := c.Invoke(ctx, localcloud.Submit, []byte(`{"x":1}`))
	if err != nil || string(out) != `{"x":1}` {
		t.Fatalf("echo: %q, %v", out, err)
	}
	out, err = c.Invoke(ctx, localcloud.Submit, []byte(`{"env":"AWS_LAMBDA_FUNCTION_TIMEOUT"}`))
	if err != nil || string(out) != `{"AWS_LAMBDA_FUNCTION_TIMEOUT":"1"}` {
		t.Fatalf("timeout env: %q, %v", out, err)
	}
	// A development topology: the functions may take the tenant from the
	// X-Tenant-Id header (lambdafn.Boot refuses it in Lambda otherwise).
	out, err = c.Invoke(ctx, localcloud.Submit, []byte(`{"env":"PIPELINE_ORCHESTRATOR_HTTP_ALLOW_HEADER_TENANT"}`))
	if err != nil || string(out) != `{"PIPELINE_ORCHESTRATOR_HTTP_ALLOW_HEADER_TENANT":"true"}` {
		t.Fatalf("allow-header-tenant env: %q, %v", out, err)
	}

	cases := []struct {
		payload    string
		kind       string
		status     int
		errorType  string
		errMessage string
	}{
		// RIE answers a handler error with 200 and no X-Amz-Function-Error.
		{`{"fail":"boom"}`, localcloud.FailFunction, 200, "errorString", "boom"},
		{`{"panic":true}`, localcloud.FailStatus, 502, "string", "panic requested"},
		{`{"exit":true}`, localcloud.FailStatus, 502, "Runtime.ExitError", ""},
		{`{"sleepMs":3000}`, localcloud.FailTimeout, 200, "Sandbox.Timedout", ""},
	}
	for _, tc := range cases {
		_, err := c.Invoke(ctx, localcloud.Submit, []byte(tc.payload))
		var ie *localcloud.InvokeError
		if !errors.As(err, &ie) {
			t.Errorf("%s: error %v, want an *InvokeError", tc.payload, err)
			continue
		}
		if ie.Kind != tc.kind || ie.StatusCode != tc.status || ie.ErrorType != tc.errorType || !strings.Contains(ie.ErrorMessage, tc.errMessage) {
			t.Errorf("%s: got kind %s status %d type %q message %q, want %s %d %q %q", tc.payload,
				ie.Kind, ie.StatusCode, ie.ErrorType, ie.ErrorMessage, tc.kind, tc.status, tc.errorType, tc.errMessage)
		}
		// The emulator recovers: the next invocation works.
		if out, err := c.Invoke(ctx, localcloud.Submit, []byte(`{"after":1}`)); err != nil || string(out) != `{"after":1}` {
			t.Errorf("after %s: %q, %v", tc.payload, out, err)
		}
	}
	// A response that merely mentions errorType is not an error.
	if out, err := c.Invoke(ctx, localcloud.Submit, []byte(`{"errorType":"x"}`)); err != nil || string(out) != `{"errorType":"x"}` {
		t.Errorf("errorType alone: %q, %v", out, err)
	}
	if _, err := c.Invoke(ctx, "nope", nil); err == nil {
		t.Error("unknown function: no error")
	}
	cs := c.ColdStarts()
	if len(cs) == 0 || cs[0].Function != localcloud.Submit || cs[0].Ready <= 0 {
		t.Errorf("cold starts: %+v", cs)
	}
}

func TestRestartAfterSIGKILL(t *testing.T) {
	t.Parallel()
	record := t.TempDir()
	opts := echoOptions(t, record, localcloud.Submit)
	c := start(t, opts)
	ctx := t.Context()
	if _, err := c.Invoke(ctx, localcloud.Submit, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	pid := c.PID(localcloud.Submit)
	if pid == 0 {
		t.Fatal("no pid")
	}

	// Kill the emulator while it runs an invocation (held by the function
	// until the hold file goes): the invocation fails and the function
	// process it left behind is killed too, so its work never completes
	// (as when a Lambda environment dies).
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"hold": hold, "record": true})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Invoke(ctx, localcloud.Submit, payload)
		errc <- err
	}()
	eventually(t, 20*time.Second, "the invocation running in the function", func() bool {
		return len(readRecords[json.RawMessage](t, record, "started")) > 0
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ie *localcloud.InvokeError
	if err := <-errc; !errors.As(err, &ie) || ie.Kind != localcloud.FailTransport {
		t.Fatalf("invocation during the kill: %v, want a transport failure", err)
	}
	eventually(t, 10*time.Second, "a new emulator process", func() bool {
		p := c.PID(localcloud.Submit)
		return p != 0 && p != pid
	})
	if n := c.Restarts(localcloud.Submit); n != 1 {
		t.Errorf("restarts = %d, want 1", n)
	}
	out, err := c.Invoke(ctx, localcloud.Submit, []byte(`{"again":true}`))
	if err != nil || string(out) != `{"again":true}` {
		t.Fatalf("after restart: %q, %v", out, err)
	}
	// Release the hold: a function process the kill left behind would
	// record the killed invocation now.
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if got := readRecords[json.RawMessage](t, record, "direct"); len(got) != 0 {
		t.Errorf("the killed invocation completed in a leftover process: %s", got)
	}
	if cs := c.ColdStarts(); len(cs) != 2 || cs[1].PID == pid {
		t.Errorf("cold starts %+v, want one per process", cs)
	}
}

// sqsRecord is what echofn records of each SQS message.
type sqsRecord = events.SQSMessage

func TestSQSMappingHonoursBatchItemFailures(t *testing.T) {
	t.Parallel()
	clients, _ := awstest.Clients(t)
	names := awstest.Names(t)
	urls := awstest.Queues(t, clients, schema.Queues(names)...)
	workURL, dlqURL, poisonURL := urls[names.WorkQueue], urls[names.DLQQueue], urls[names.PoisonQueue]
	ctx := t.Context()

	derived, err := sqsbackend.RedriveTargetURL(ctx, clients.SQS, workURL)
	if err != nil || derived != poisonURL {
		t.Fatalf("RedriveTargetURL = %q, %v; want the poison queue %q", derived, err, poisonURL)
	}

	record := t.TempDir()
	opts := echoOptions(t, record, localcloud.Worker, localcloud.DLQ)
	opts.SQS = clients.SQS
	opts.WorkQueueURL, opts.DLQQueueURL, opts.PoisonQueueURL = workURL, dlqURL, derived
	opts.WaitTimeSeconds = 1
	opts.VisibilityTimeout = time.Second
	c := start(t, opts)
	_ = c

	send := func(url, body string) string {
		out, err := clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{
				"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
			}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.MessageId)
	}
	ok1 := send(workURL, `{"n":1}`)
	ok2 := send(workURL, `{"n":2}`)
	bad := send(workURL, `{"fail":true}`)
	whole := send(dlqURL, `{"failBatch":true}`)

	byID := func() map[string][]sqsRecord {
		m := map[string][]sqsRecord{}
		for _, r := range readRecords[sqsRecord](t, record, "sqs") {
			m[r.MessageId] = append(m[r.MessageId], r)
		}
		return m
	}
	// The item failure comes back (receive count growing) until the
	// redrive policy moves it to the poison queue, which the dlq function
	// consumes; the whole-batch failure comes back too.
	eventually(t, 30*time.Second, "the failed item in the poison queue and the failed batch redelivered", func() bool {
		m := byID()
		poisoned := false
		for _, r := range m[bad] {
			poisoned = poisoned || r.EventSourceARN != m[ok1][0].EventSourceARN
		}
		return len(m[ok1]) > 0 && len(m[whole]) >= 3 && poisoned
	})
	m := byID()
	for _, id := range []string{ok1, ok2} {
		if len(m[id]) != 1 {
			t.Errorf("message %s handled %d times, want once (deleted after success)", id, len(m[id]))
		}
	}
	counts := func(rs []sqsRecord) []int {
		var out []int
		for _, r := range rs {
			n, _ := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
			out = append(out, n)
		}
		return out
	}
	badWork := 0
	for i, n := range counts(m[bad]) {
		if m[bad][i].EventSourceARN == m[ok1][0].EventSourceARN {
			badWork++
			if n != badWork {
				t.Errorf("item failure receive counts %v, want 1, 2, ...", counts(m[bad]))
				break
			}
		}
	}
	if badWork != schema.PoisonAfter {
		t.Errorf("item failure received %d times from the work queue, want %d (then the poison queue)", badWork, schema.PoisonAfter)
	}
	if wc := counts(m[whole]); wc[0] != 1 || wc[len(wc)-1] < 3 {
		t.Errorf("whole-batch failure receive counts %v, want 1 ... 3+", wc)
	}

	// Lambda's record shape.
	r := m[ok1][0]
	arn, _ := clients.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(workURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	sum := md5.Sum([]byte(`{"n":1}`))
	if r.Body != `{"n":1}` || r.EventSource != "aws:sqs" || r.EventSourceARN != arn.Attributes["QueueArn"] ||
		r.AWSRegion == "" || r.ReceiptHandle == "" || r.Md5OfBody != hex.EncodeToString(sum[:]) {
		t.Errorf("record %+v", r)
	}
	for _, a := range []string{"ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} {
		if r.Attributes[a] == "" {
			t.Errorf("attribute %s missing: %v", a, r.Attributes)
		}
	}
	if a := r.MessageAttributes["tenant"]; a.DataType != "String" || a.StringValue == nil || *a.StringValue != "acme" {
		t.Errorf("message attribute tenant = %+v", a)
	}
}

func TestScheduleInvokesSweeper(t *testing.T) {
	t.Parallel()
	record := t.TempDir()
	opts := echoOptions(t, record, localcloud.Sweeper)
	opts.SweepEvery = 200 * time.Millisecond
	// A relative path works although processes run in the bootstrap's
	// directory.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, opts.RIE)
	if err != nil {
		t.Fatal(err)
	}
	opts.RIE = rel
	opts.Region, opts.AccountID = "eu-west-1", "111122223333"
	start(t, opts)
	eventually(t, 10*time.Second, "two scheduled invocations", func() bool {
		return len(readRecords[events.EventBridgeEvent](t, record, "schedule")) >= 2
	})
	ev := readRecords[events.EventBridgeEvent](t, record, "schedule")[0]
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" || ev.AccountID != "111122223333" || ev.Region != "eu-west-1" ||
		len(ev.Resources) != 1 || !strings.HasPrefix(ev.Resources[0], "arn:aws:events:eu-west-1:111122223333:rule/") ||
		ev.ID == "" || time.Since(ev.Time) > time.Minute || string(ev.Detail) != "{}" {
		t.Errorf("event %+v", ev)
	}
}

func TestStartRefusesMissingPieces(t *testing.T) {
	t.Parallel()
	if _, err := localcloud.Start(t.Context(), localcloud.Options{}); err == nil || !strings.Contains(err.Error(), "RIE") {
		t.Errorf("no RIE: %v", err)
	}
	_, err := localcloud.Start(t.Context(), localcloud.Options{RIE: rie(t), BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "bootstrap not found") {
		t.Errorf("no bootstraps: %v", err)
	}
}

func TestForwardEnv(t *testing.T) {
	got := localcloud.ForwardEnv([]string{"PATH=/bin", "AWS_REGION=x", "AWS_LAMBDA_FUNCTION_NAME=y",
		"PIPELINE_ORCHESTRATOR_LEASE_MS=5", "HOME=/root", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1"})
	want := []string{"AWS_REGION=x", "PIPELINE_ORCHESTRATOR_LEASE_MS=5", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ForwardEnv = %v, want %v", got, want)
	}
}
