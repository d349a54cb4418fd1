package iamcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/qasync/qasync/shared/schema"
)

// upstream is a fake AWS JSON endpoint answering {} and recording the
// targets it got.
func upstream(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Amz-Target"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

func TestRequests(t *testing.T) {
	l := Local{Region: "us-east-1", AccountID: "000000000000"}
	tbl := func(n string) string { return "arn:aws:dynamodb:us-east-1:000000000000:table/" + n }
	for _, c := range []struct {
		target, body string
		want         []string
	}{
		{"DynamoDB_20120810.UpdateItem", `{"TableName":"e"}`, []string{"dynamodb:UpdateItem " + tbl("e")}},
		{"DynamoDB_20120810.Query", `{"TableName":"e","IndexName":"sweep"}`, []string{"dynamodb:Query " + tbl("e") + "/index/sweep"}},
		{"DynamoDB_20120810.Query", `{"TableName":"e"}`, []string{"dynamodb:Query " + tbl("e")}},
		{"DynamoDB_20120810.GetItem", `{"TableName":"` + tbl("x") + `"}`, []string{"dynamodb:GetItem " + tbl("x")}},
		{"DynamoDB_20120810.BatchGetItem", `{"RequestItems":{"b":{},"a":{}}}`, []string{"dynamodb:BatchGetItem " + tbl("a"), "dynamodb:BatchGetItem " + tbl("b")}},
		{"DynamoDB_20120810.BatchWriteItem", `{"RequestItems":{"a":[]}}`, []string{"dynamodb:BatchWriteItem " + tbl("a")}},
		{"DynamoDB_20120810.TransactWriteItems", `{"TransactItems":[{"Put":{"TableName":"a"}},{"Update":{"TableName":"b"}},{"ConditionCheck":{"TableName":"a"}},{"Delete":{"TableName":"c"}}]}`,
			[]string{"dynamodb:PutItem " + tbl("a"), "dynamodb:UpdateItem " + tbl("b"), "dynamodb:ConditionCheckItem " + tbl("a"), "dynamodb:DeleteItem " + tbl("c")}},
		{"DynamoDB_20120810.TransactGetItems", `{"TransactItems":[{"Get":{"TableName":"a"}}]}`, []string{"dynamodb:GetItem " + tbl("a")}},
		{"DynamoDB_20120810.ListTables", `{}`, []string{"dynamodb:ListTables *"}},
		{"DynamoDBStreams_20120810.GetRecords", `{"ShardIterator":"000|arn:aws:dynamodb:ddblocal:000000000000:table/e/stream/2026-12-02T00:00:00.000|rest"}`,
			[]string{"dynamodb:GetRecords " + tbl("e") + "/stream/2026-12-02T00:00:00.000"}},
		{"DynamoDBStreams_20120810.DescribeStream", `{"StreamArn":"arn:aws:dynamodb:ddblocal:000000000000:table/e/stream/L"}`, []string{"dynamodb:DescribeStream " + tbl("e") + "/stream/L"}},
		{"DynamoDBStreams_20120810.ListStreams", `{"TableName":"e"}`, []string{"dynamodb:ListStreams " + tbl("e") + "/stream/*"}},
		{"AmazonSQS.SendMessageBatch", `{"QueueUrl":"http://127.0.0.1:1/000000000000/w"}`, []string{"sqs:SendMessage arn:aws:sqs:us-east-1:000000000000:w"}},
		{"AmazonSQS.ReceiveMessage", `{"QueueUrl":"http://127.0.0.1:1/000000000000/w"}`, []string{"sqs:ReceiveMessage arn:aws:sqs:us-east-1:000000000000:w"}},
		{"AmazonSQS.GetQueueUrl", `{"QueueName":"w"}`, []string{"sqs:GetQueueUrl arn:aws:sqs:us-east-1:000000000000:w"}},
		{"", "Action=DeleteMessage&QueueUrl=http%3A%2F%2F127.0.0.1%3A1%2F000000000000%2Fw", []string{"sqs:DeleteMessage arn:aws:sqs:us-east-1:000000000000:w"}},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
		if c.target != "" {
			r.Header.Set("X-Amz-Target", c.target)
		} else {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		reqs, err := Requests(r, []byte(c.body), l)
		if err != nil {
			t.Errorf("%s %s: %v", c.target, c.body, err)
			continue
		}
		var got []string
		for _, q := range reqs {
			got = append(got, q.Action+" "+q.Resource)
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s %s:\n got %v\nwant %v", c.target, c.body, got, c.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/bucket/key", nil)
	if _, err := Requests(r, nil, l); err == nil || !strings.HasPrefix(err.Error(), "iamcheck: ") {
		t.Errorf("S3 GET: %v", err)
	}
}

// workerProxy is a proxy for the dev template's worker, on fake
// upstreams, with the worker's grant of dynamodb:UpdateItem on the
// execution table removed.
func workerProxy(t *testing.T) (*Proxy, schema.Names, string, func() []string, func() []string, *bytes.Buffer) {
	t.Helper()
	tp, err := LoadTemplate("../devstack/dev.template.json")
	if err != nil {
		t.Fatal(err)
	}
	tp, _ = tp.Without("WorkerFunction", "dynamodb:UpdateItem", "ExecutionTable")
	ddb, ddbGot := upstream(t)
	sq, sqsGot := upstream(t)
	names := schema.Prefixed("p")
	queueURL := sq.URL + "/000000000000/" + names.WorkQueue
	ps, err := tp.Policies(LocalNames(names, map[string]string{names.WorkQueue: queueURL}, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p, err := NewProxy(ProxyOptions{Function: "worker", Policy: ps["WorkerFunction"], DynamoDB: ddb.URL, SQS: sq.URL,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, names, queueURL, ddbGot, sqsGot, &logs
}

// The AWS SDK, pointed at the proxy, gets an AccessDeniedException for a
// call the policy does not allow, which never reaches the server, and
// the allowed ones go through.
func TestProxyDeniesAsAWS(t *testing.T) {
	p, names, queueURL, ddbGot, sqsGot, logs := workerProxy(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), RetryMaxAttempts: 1}
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(p.URL) })
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL) })
	key := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "x"}}
	ctx := t.Context()

	if _, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(names.ExecutionTable), Key: key}); err != nil {
		t.Errorf("GetItem: %v", err)
	}
	_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(names.ExecutionTable), Key: key})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDeniedException" ||
		!strings.Contains(apiErr.ErrorMessage(), "dynamodb:UpdateItem") || !strings.Contains(apiErr.ErrorMessage(), "WorkerFunctionRole") {
		t.Errorf("UpdateItem: %v", err)
	}
	if _, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(names.EffectTable), Key: key}); err != nil {
		t.Errorf("UpdateItem on the effect table: %v", err)
	}
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("m")}); err != nil {
		t.Errorf("SendMessage: %v", err)
	}
	_, err = q.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(queueURL)})
	if !errors.As(err, &apiErr) || (apiErr.ErrorCode() != "AccessDeniedException" && apiErr.ErrorCode() != "AccessDenied") {
		t.Errorf("PurgeQueue: %v", err)
	}
	if got := ddbGot(); strings.Join(got, ",") != "DynamoDB_20120810.GetItem,DynamoDB_20120810.UpdateItem" {
		t.Errorf("DynamoDB got %v", got)
	}
	if got := sqsGot(); strings.Join(got, ",") != "AmazonSQS.SendMessage" {
		t.Errorf("SQS got %v", got)
	}

	ds := p.Denials()
	if len(ds) != 2 {
		t.Fatalf("denials %+v", ds)
	}
	exec := "arn:aws:dynamodb:us-east-1:000000000000:table/" + names.ExecutionTable
	if d := ds[0]; d.Function != "worker" || d.Action != "dynamodb:UpdateItem" || d.Resource != exec ||
		d.Missing != "Allow dynamodb:UpdateItem on ${ExecutionTable.Arn}" || !strings.Contains(d.Nearest, "(CommandEffects)") {
		t.Errorf("denial %+v", d)
	}
	if !strings.Contains(ds[0].Error(), "missing Allow dynamodb:UpdateItem on ${ExecutionTable.Arn}") {
		t.Errorf("Error() = %s", ds[0].Error())
	}
	if ds[1].Action != "sqs:PurgeQueue" {
		t.Errorf("denial %+v", ds[1])
	}
	calls := p.Calls()
	var lines []string
	for _, c := range calls {
		lines = append(lines, c.Action+" "+c.Statement)
	}
	if len(calls) != 3 || !strings.Contains(strings.Join(lines, "\n"), "dynamodb:GetItem WorkerFunctionPolicy statement 4 (ExecutionRows)") {
		t.Errorf("calls %v", lines)
	}
	var denied int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["event"] == "iam_denied" {
			denied++
			if m["function"] != "worker" || m["missing"] == nil {
				t.Errorf("log %v", m)
			}
		}
	}
	if denied != 2 {
		t.Errorf("%d iam_denied events in %s", denied, logs.String())
	}
}

// A request the proxy cannot map to an authorization is refused rather
// than let through unchecked.
func TestProxyDeniesUnrecognized(t *testing.T) {
	p, _, _, ddbGot, _, _ := workerProxy(t)
	resp, err := http.Post(p.URL, "application/octet-stream", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "AccessDeniedException") || len(ddbGot()) != 0 {
		t.Errorf("%d %s, upstream got %v", resp.StatusCode, b, ddbGot())
	}
}

// A denied SQS query-protocol request gets the query protocol's error: 403
// with an ErrorResponse of code AccessDenied.
func TestProxyDeniesQueryProtocol(t *testing.T) {
	p, _, queueURL, _, sqsGot, _ := workerProxy(t)
	resp, err := http.Post(p.URL, "application/x-www-form-urlencoded; charset=utf-8",
		strings.NewReader("Action=PurgeQueue&QueueUrl="+url.QueryEscape(queueURL)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "<Code>AccessDenied</Code>") ||
		!strings.Contains(string(b), "sqs:PurgeQueue") || len(sqsGot()) != 0 {
		t.Errorf("%d %s, upstream got %v", resp.StatusCode, b, sqsGot())
	}
	resp, err = http.Post(p.URL, "application/x-www-form-urlencoded",
		strings.NewReader("Action=SendMessage&MessageBody=m&QueueUrl="+url.QueryEscape(queueURL)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(sqsGot()) != 1 {
		t.Errorf("allowed SendMessage: %d, upstream got %v", resp.StatusCode, sqsGot())
	}
}

// PutEvents is authorized per entry on the bus's ARN with its source as
// the events:source condition key: the dev stack's functions may put
// events of source qasync on the lifecycle bus (the history function,
// which publishes them from the stream), and nothing else.
func TestPutEventsNeedsTheBusAndTheSource(t *testing.T) {
	tp, err := LoadTemplate("../devstack/dev.template.json")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := tp.Policies(LocalNames(schema.Prefixed("p"), nil, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	bus, err := tp.ResolveString(map[string]any{"Ref": "LifecycleEventBus"}, ps["WorkerFunction"].Local())
	if err != nil || bus != "qasync-dev-lifecycle" {
		t.Fatalf("Ref of the bus: %q, %v", bus, err)
	}
	put := func(busName, source string) []Request {
		body := fmt.Sprintf(`{"Entries":[{"EventBusName":%q,"Source":%q,"DetailType":"Execution Succeeded","Detail":"{}"}]}`, busName, source)
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("X-Amz-Target", "AWSEvents.PutEvents")
		reqs, err := Requests(r, []byte(body), ps["WorkerFunction"].Local())
		if err != nil || len(reqs) != 1 {
			t.Fatalf("Requests: %v %v", reqs, err)
		}
		return reqs
	}
	for _, c := range []struct {
		fn, bus, source string
		allowed         bool
	}{
		{"HistoryFunction", bus, "qasync", true},
		{"HistoryFunction", "arn:aws:events:us-east-1:000000000000:event-bus/" + bus, "qasync", true},
		{"HistoryFunction", bus, "someone-else", false},
		{"HistoryFunction", "default", "qasync", false},
		{"WorkerFunction", bus, "qasync", false},
		{"SubmitFunction", bus, "qasync", false},
	} {
		if got := ps[c.fn].Evaluate(put(c.bus, c.source)[0]).Allowed; got != c.allowed {
			t.Errorf("%s PutEvents on %s from %s: allowed %v, want %v", c.fn, c.bus, c.source, got, c.allowed)
		}
	}
}
