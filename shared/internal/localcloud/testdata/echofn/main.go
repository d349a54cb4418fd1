// Command echofn is the localcloud tests' Lambda function. It echoes
// direct invocations, fails or sleeps on demand, answers API Gateway HTTP
// API events with a description of the request, reports partial batch
// failures for SQS and DynamoDB stream events, and appends every event it
// sees to $ECHOFN_RECORD_DIR/<kind>.jsonl so tests can inspect what it
// received (a DynamoDB stream event is one line of ddb.jsonl).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// direct is the payload of a direct invocation.
type direct struct {
	Fail    string `json:"fail"`
	SleepMs int    `json:"sleepMs"`
	Panic   bool   `json:"panic"`
	Exit    bool   `json:"exit"`
	Env     string `json:"env"`
	// Record appends the payload to direct.jsonl once the sleep (and the
	// hold) is over.
	Record bool `json:"record"`
	// Hold appends the payload to started.jsonl, then holds the
	// invocation while the file it names exists: a test kills the
	// function mid-invocation whatever the machine's speed.
	Hold string `json:"hold"`
}

// sqsBody is the body of an SQS message sent by the tests.
type sqsBody struct {
	Fail bool `json:"fail"`
	// FailBatch fails the whole invocation.
	FailBatch bool `json:"failBatch"`
}

var mu sync.Mutex

// streamFailures counts the failures reported of each stream record (by
// sequence number), for the records that fail a number of times
// ("failTimes").
var streamFailures = map[string]int{}

// handleStream answers a DynamoDB stream event. A record whose NewImage
// has the attribute "failBatch" fails the invocation; "fail" reports it
// as a batch item failure; "failTimes" (a number) reports it that many
// times, then lets it pass; "badItem" answers an itemIdentifier that is
// no record's.
func handleStream(ev events.DynamoDBEvent) (any, error) {
	record("ddb", ev)
	var resp events.DynamoDBEventResponse
	for _, r := range ev.Records {
		img := r.Change.NewImage
		if _, ok := img["failBatch"]; ok {
			return nil, errors.New("batch failure requested")
		}
		if _, ok := img["badItem"]; ok {
			return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: "no-such-record"}}}, nil
		}
		fail := false
		if _, ok := img["fail"]; ok {
			fail = true
		}
		if n, ok := img["failTimes"]; ok {
			times, _ := n.Integer()
			seq := r.Change.SequenceNumber
			mu.Lock()
			if int64(streamFailures[seq]) < times {
				streamFailures[seq]++
				fail = true
			}
			mu.Unlock()
		}
		if fail {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.Change.SequenceNumber})
		}
	}
	return resp, nil
}

func record(kind string, v any) {
	dir := os.Getenv("ECHOFN_RECORD_DIR")
	if dir == "" {
		return
	}
	b, _ := json.Marshal(v)
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(filepath.Join(dir, kind+".jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

func handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe map[string]json.RawMessage
	_ = json.Unmarshal(raw, &probe)
	switch {
	case probe["Records"] != nil && strings.Contains(string(probe["Records"]), `"eventSource":"aws:dynamodb"`):
		var ev events.DynamoDBEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		return handleStream(ev)
	case probe["Records"] != nil:
		var ev events.SQSEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			record("sqs", r)
			var b sqsBody
			_ = json.Unmarshal([]byte(r.Body), &b)
			if b.FailBatch {
				return nil, errors.New("batch failure requested")
			}
			if b.Fail {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
		}
		return resp, nil
	case probe["rawPath"] != nil:
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		record("http", ev)
		if strings.HasSuffix(ev.RawPath, "/fail") {
			return nil, errors.New("http failure requested")
		}
		if strings.HasSuffix(ev.RawPath, "/binary") {
			return events.APIGatewayV2HTTPResponse{StatusCode: 201,
				Headers:         map[string]string{"Content-Type": "application/octet-stream", "X-Echo": "bin"},
				Cookies:         []string{"a=1; Path=/", "b=2"},
				Body:            base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}),
				IsBase64Encoded: true}, nil
		}
		body, _ := json.Marshal(ev)
		return events.APIGatewayV2HTTPResponse{StatusCode: 200,
			Headers: map[string]string{"Content-Type": "application/json"}, Body: string(body)}, nil
	case probe["detail-type"] != nil:
		var ev events.EventBridgeEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		record("schedule", ev)
		return nil, nil
	}
	var d direct
	_ = json.Unmarshal(raw, &d)
	if d.SleepMs > 0 {
		// Ignore the invocation's deadline, like a handler stuck in a call:
		// returning at the deadline would race the emulator's own timeout.
		time.Sleep(time.Duration(d.SleepMs) * time.Millisecond)
	}
	if d.Hold != "" {
		record("started", raw)
		for {
			if _, err := os.Stat(d.Hold); err != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if d.Record {
		record("direct", raw)
	}
	switch {
	case d.Panic:
		panic("panic requested")
	case d.Exit:
		os.Exit(3)
	case d.Fail != "":
		return nil, errors.New(d.Fail)
	case d.Env != "":
		return map[string]string{d.Env: os.Getenv(d.Env)}, nil
	}
	return raw, nil
}

func main() { lambda.Start(handle) }
