package lambdahandlers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// historyFixtureKey is the execution events/history-stream-batch.json
// carries three writes of: its submit, its first claim, and the commit
// of its first step that claims the second.
var historyFixtureKey = store.Key{TenantID: fixtureTenant, ExecutionID: "01a2267a-7b21-7a10-9f3e-4c5d6e7f8091"}

// TestHistoryFunctionStoresTheBatch runs the sample stream batch through
// the history handler on DynamoDB Local: the execution's history reads
// back as the four events of its three writes; a second delivery of the
// batch adds nothing.
func TestHistoryFunctionStoresTheBatch(t *testing.T) {
	t.Parallel()
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(n.ExecutionTable), schema.HistoryTable(n.HistoryTable))
	var batch events.DynamoDBEvent
	raw := fixture(t, "history-stream-batch.json")
	if err := json.Unmarshal(raw, &batch); err != nil {
		t.Fatal(err)
	}
	// The row as the batch's last write left it (the reader reads it).
	last := batch.Records[len(batch.Records)-1].Change.NewImage
	if _, err := clients.DynamoDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(n.ExecutionTable),
		Item: lambdahandlers.FromLambdaImage(last)}); err != nil {
		t.Fatal(err)
	}
	state, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dynamo.NewHistory(clients.DynamoDB, state, dynamo.HistoryOptions{Table: n.HistoryTable})
	if err != nil {
		t.Fatal(err)
	}
	handler := lambdahandlers.History(h, nil)
	for range 2 {
		var resp events.DynamoDBEventResponse
		invoke(t, context.Background(), handler, raw, &resp)
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch item failures %+v", resp.BatchItemFailures)
		}
	}
	evs, err := h.History(context.Background(), historyFixtureKey)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Type)+" "+e.StepName)
	}
	want := "SUBMITTED validate, STEP_STARTED validate, STEP_SUCCEEDED validate, STEP_STARTED schedule-delivery"
	if strings.Join(got, ", ") != want {
		t.Fatalf("history:\n  %s\nwant\n  %s", strings.Join(got, ", "), want)
	}
	if evs[1].Worker != "ip-10-0-1-17-6b1f2c" || evs[0].Seq != 1 || evs[3].Seq != 4 {
		t.Errorf("events %+v", evs)
	}
}

// TestHistoryFunctionReportsTheFirstFailedRecord: when the pages cannot be
// written (here: no history table), the handler reports the batch's
// first record of the failed execution, so that Lambda retries from
// there, and logs history_batch_failed.
func TestHistoryFunctionReportsTheFirstFailedRecord(t *testing.T) {
	t.Parallel()
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t) // the history table is never created
	state, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dynamo.NewHistory(clients.DynamoDB, state, dynamo.HistoryOptions{Table: n.HistoryTable})
	if err != nil {
		t.Fatal(err)
	}
	logs, log := logtest.New()
	var resp events.DynamoDBEventResponse
	invoke(t, context.Background(), lambdahandlers.History(h, log), fixture(t, "history-stream-batch.json"), &resp)
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "4421584500000000017450439091" {
		t.Fatalf("batch item failures %+v, want the first record's sequence number", resp.BatchItemFailures)
	}
	if !strings.Contains(logs.String(), `"event":"history_batch_failed"`) {
		t.Errorf("logs: %s", logs.String())
	}
}
