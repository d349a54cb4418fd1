package lambdafn_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	submitfn "github.com/qasync/qasync/shared/lambdafn/submit"
	workerfn "github.com/qasync/qasync/shared/lambdafn/worker"
	"github.com/qasync/qasync/shared/schema"
)

// TestUrgentLaneThroughTheFunctions, on the local stack through the
// deployed wiring: with queue.urgent-url set, the submit function sends
// an execution of priority 1 to the urgent queue and one of the default
// priority to the work queue, and the worker function consuming both
// (two event source mappings) runs both to the end. (Before the urgent
// lane, both went to the work queue: the urgent one behind its backlog.)
func TestUrgentLaneThroughTheFunctions(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, c, schema.Tables(n)...)
	var qs []schema.Queue
	for _, q := range schema.Queues(n) {
		if q.Name == n.PoisonQueue || q.Name == n.WorkQueue || q.Name == n.UrgentQueue {
			qs = append(qs, q)
		}
	}
	urls := awstest.Queues(t, c, qs...)
	env := map[string]string{
		"state-provider": "dynamo", "dispatcher-provider": "sqs", "queue-url": urls[n.WorkQueue],
		"queue.urgent-url":       urls[n.UrgentQueue],
		"dynamo.execution-table": n.ExecutionTable, "dynamo.execution-payload-table": n.PayloadTable,
		"dynamo.dead-letter-table": n.DeadLetterTable, "dynamo.effect-table": n.EffectTable,
		"dynamo.history-table": n.HistoryTable, "http.tenant-source": "iam",
	}
	reg := registry(t)
	submitEnv, _ := bootStack(t, submitfn.Function, reg, env)

	post := func(query string) submitted {
		req := apiRequest(http.MethodPost, "/v1/pipelines/"+echoID+"/executions", `{"echo":"`+query+`"}`)
		req.RawQueryString = query
		if k, v, ok := strings.Cut(query, "="); ok {
			req.QueryStringParameters = map[string]string{k: v}
		}
		var resp events.APIGatewayV2HTTPResponse
		invoke(t, context.Background(), handler(t, submitEnv), req, &resp)
		var s submitted
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(resp.Body), &s) != nil {
			t.Fatalf("submit %q: %d %s", query, resp.StatusCode, resp.Body)
		}
		return s
	}
	urgent, normal := post("priority=1"), post("")

	// Each work item is on its lane's queue.
	onQueue := func(url string) []string {
		out, err := c.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 1})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range out.Messages {
			item, err := sqsbackend.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, item.ExecutionID)
		}
		return ids
	}
	if got := onQueue(urls[n.UrgentQueue]); len(got) != 1 || got[0] != urgent.ExecutionID {
		t.Errorf("urgent queue holds %v, want the priority 1 execution %s", got, urgent.ExecutionID)
	}
	if got := onQueue(urls[n.WorkQueue]); len(got) != 1 || got[0] != normal.ExecutionID {
		t.Errorf("work queue holds %v, want the default priority execution %s", got, normal.ExecutionID)
	}

	// The worker function, fed by both queues, runs both.
	workerEnv, _ := bootStack(t, workerfn.Function, reg, env)
	worker := workerOf(t, workerEnv)
	consume(t, c.SQS, urls[n.UrgentQueue], worker)
	consume(t, c.SQS, urls[n.WorkQueue], worker)
	awaitStatus(t, submitEnv, urgent.ExecutionID, "SUCCEEDED")
	awaitStatus(t, submitEnv, normal.ExecutionID, "SUCCEEDED")
}
