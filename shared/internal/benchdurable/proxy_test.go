package benchdurable

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/schema"
)

// fakeDynamo answers like DynamoDB Local: UpdateItem with a
// ConsumedCapacity object when asked, TransactWriteItems with a list, a
// ConditionExpression "fail" with ConditionalCheckFailedException; it
// records the bodies it got.
func fakeDynamo(t *testing.T) (*httptest.Server, func() []map[string]any) {
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if int64(len(b)) != r.ContentLength {
			t.Errorf("body of %d bytes, Content-Length %d", len(b), r.ContentLength)
		}
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		asked := body["ReturnConsumedCapacity"] == "INDEXES"
		switch op := r.Header.Get("X-Amz-Target"); {
		case body["ConditionExpression"] == "fail":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}`)
		case op == "DynamoDB_20120810.UpdateItem" && asked:
			io.WriteString(w, `{"ConsumedCapacity":{"TableName":"t","CapacityUnits":2.0,"Table":{"CapacityUnits":1.0},"GlobalSecondaryIndexes":{"g":{"CapacityUnits":1.0}}}}`)
		case op == "DynamoDB_20120810.TransactWriteItems" && asked:
			io.WriteString(w, `{"ConsumedCapacity":[{"TableName":"t","CapacityUnits":6.0,"Table":{"CapacityUnits":4.0},"GlobalSecondaryIndexes":{"g":{"CapacityUnits":2.0}}},{"TableName":"k","CapacityUnits":2.0,"Table":{"CapacityUnits":2.0}}]}`)
		default:
			io.WriteString(w, `{}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []map[string]any { mu.Lock(); defer mu.Unlock(); return bodies }
}

func post(t *testing.T, url, target, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if target != "" {
		req.Header.Set("X-Amz-Target", target)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestProxyCountsByOperationAndSumsCapacity: requests are counted by
// "<service>.<Operation>" from X-Amz-Target, failed ones as errors; with
// Capacity the proxy asks for ReturnConsumedCapacity INDEXES where the
// body lacks it (keeping a caller's own choice) and sums table and index
// units from objects and lists.
func TestProxyCountsByOperationAndSumsCapacity(t *testing.T) {
	srv, bodies := fakeDynamo(t)
	p, err := NewProxy(srv.URL, ProxyOptions{Capacity: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"t","Key":{"pk":{"S":"a"}}}`)
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"t","ReturnConsumedCapacity":"NONE"}`)
	if code := post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"t","ConditionExpression":"fail"}`); code != 400 {
		t.Errorf("failed conditional write: HTTP %d through the proxy, want 400", code)
	}
	post(t, p.URL, "DynamoDB_20120810.TransactWriteItems", `{"TransactItems":[]}`)
	post(t, p.URL, "DynamoDB_20120810.DescribeTable", `{"TableName":"t"}`)
	post(t, p.URL, "AmazonSQS.ReceiveMessage", `{"QueueUrl":"q"}`)
	post(t, p.URL, "", ``)
	post(t, p.URL, "DynamoDB_20120810.GetItem", " {}")

	got := p.Snapshot()
	want := map[string]OpCount{
		"DynamoDB.UpdateItem":         {Requests: 3, Errors: 1, Units: 2, TableUnits: 1, IndexUnits: 1},
		"DynamoDB.TransactWriteItems": {Requests: 1, Units: 8, TableUnits: 6, IndexUnits: 2},
		"DynamoDB.DescribeTable":      {Requests: 1},
		"SQS.ReceiveMessage":          {Requests: 1},
		"HTTP.POST":                   {Requests: 1},
		"DynamoDB.GetItem":            {Requests: 1},
	}
	if len(got) != len(want) {
		t.Errorf("operations %v, want %v", got, want)
	}
	for op, w := range want {
		g := got[op]
		if g.Nanos <= 0 {
			t.Errorf("%s: no time measured: %+v", op, g)
		}
		if g.Nanos = 0; g != w {
			t.Errorf("%s: %+v, want %+v", op, got[op], w)
		}
	}
	bs := bodies()
	if bs[0]["ReturnConsumedCapacity"] != "INDEXES" || bs[0]["TableName"] != "t" || bs[0]["Key"] == nil {
		t.Errorf("first UpdateItem reached the server as %v: want the same fields and ReturnConsumedCapacity INDEXES", bs[0])
	}
	if bs[1]["ReturnConsumedCapacity"] != "NONE" {
		t.Errorf("a caller's ReturnConsumedCapacity was replaced: %v", bs[1])
	}
	if _, set := bs[4]["ReturnConsumedCapacity"]; set {
		t.Errorf("DescribeTable was given ReturnConsumedCapacity: %v", bs[4])
	}
	if bs[7]["ReturnConsumedCapacity"] != "INDEXES" || len(bs[7]) != 1 {
		t.Errorf("an empty GetItem body reached the server as %v: want ReturnConsumedCapacity INDEXES alone", bs[7])
	}
	p.Reset()
	if n := len(p.Snapshot()); n != 0 {
		t.Errorf("after Reset: %d operations counted", n)
	}
}

// TestProxyWithoutCapacityPassesBodiesUnchanged: without
// ProxyOptions.Capacity the request bodies reach the server as sent.
func TestProxyWithoutCapacityPassesBodiesUnchanged(t *testing.T) {
	srv, bodies := fakeDynamo(t)
	p, err := NewProxy(srv.URL, ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"t"}`)
	if b := bodies()[0]; len(b) != 1 {
		t.Errorf("body reached the server as %v, want only TableName", b)
	}
	if c := p.Snapshot()["DynamoDB.UpdateItem"]; c.Requests != 1 || c.Units != 0 {
		t.Errorf("count %+v, want one request without units", c)
	}
}

// steppingClock moves on by step at every reading: a window of it holds
// a number of readings, however fast the machine makes them.
type steppingClock struct {
	f    *clock.Fake
	step time.Duration
}

func (c steppingClock) Now() time.Time { return c.f.Advance(c.step) }

// TestDynamoDBLocalIgnoresSignatures confirms on the local stack what
// ProxyOptions.Capacity relies on: DynamoDB Local answers a request whose
// SigV4 signature is wrong. It also runs the ceiling briefly: its
// conditional writes, each on the version the last one set, succeed and
// are counted. The ceiling's windows are on a clock that moves 10 ms a
// reading (two readings a write), so that the measured window holds
// about 15 writes on any machine.
func TestDynamoDBLocalIgnoresSignatures(t *testing.T) {
	clients, _ := awstest.Clients(t)
	ok, err := SignaturesUnverified(context.Background(), os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	if err != nil || !ok {
		t.Fatalf("DynamoDB Local refused a wrongly signed request (%v): the bench must skip capacity units", err)
	}
	table := awstest.Name(t, "ceiling")
	awstest.Tables(t, clients, schema.Table{Name: table, PartitionKey: schema.Attr{Name: "pk", Type: schema.String}})
	clk := steppingClock{clock.NewFake(time.Now()), 10 * time.Millisecond}
	rate, err := UpdateItemCeiling(context.Background(), clients.DynamoDB, table, 2, 100*time.Millisecond, 300*time.Millisecond, clk)
	if err != nil || rate <= 0 {
		t.Fatalf("ceiling %.0f/s, %v: want conditional writes to succeed and be counted", rate, err)
	}
}

// TestProxyCountsConnections: a client that keeps its connection opens
// one for many requests; one that closes it after each request opens as
// many as it sends; Reset zeroes the count.
func TestProxyCountsConnections(t *testing.T) {
	srv, _ := fakeDynamo(t)
	p, err := NewProxy(srv.URL, ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(c *http.Client) {
		req, _ := http.NewRequest(http.MethodPost, p.URL, strings.NewReader(`{}`))
		req.Header.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	keep := &http.Client{Transport: &http.Transport{}}
	for range 3 {
		send(keep)
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("3 requests on one kept connection: %d connections counted, want 1", n)
	}
	p.Reset()
	closing := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 3 {
		send(closing)
	}
	if n := p.Conns(); n != 3 {
		t.Errorf("3 requests closing their connections: %d connections counted, want 3", n)
	}
}

// TestProxyTrace: between StartTrace and StopTrace the proxy keeps every
// request with its operation, times, status and both bodies (the request
// as forwarded, with the capacity field it added); outside, none.
func TestProxyTrace(t *testing.T) {
	srv, _ := fakeDynamo(t)
	p, err := NewProxy(srv.URL, ProxyOptions{Capacity: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"before"}`)
	p.StartTrace()
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"t"}`)
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"t","ConditionExpression":"fail"}`)
	got := p.StopTrace()
	post(t, p.URL, "DynamoDB_20120810.UpdateItem", `{"TableName":"after"}`)
	if len(got) != 2 {
		t.Fatalf("traced %d requests, want the 2 sent while tracing: %+v", len(got), got)
	}
	ok, failed := got[0], got[1]
	if ok.Op != "DynamoDB.UpdateItem" || ok.Status != 200 || !strings.Contains(string(ok.Request), `"ReturnConsumedCapacity":"INDEXES"`) ||
		!strings.Contains(string(ok.Response), "ConsumedCapacity") || ok.End.Before(ok.Start) {
		t.Errorf("first traced request: %+v", ok)
	}
	if failed.Status != 400 || !strings.Contains(string(failed.Response), "ConditionalCheckFailed") {
		t.Errorf("second traced request: status %d, answer %s", failed.Status, failed.Response)
	}
	if again := p.StopTrace(); len(again) != 0 {
		t.Errorf("after StopTrace: %d requests kept", len(again))
	}
}
