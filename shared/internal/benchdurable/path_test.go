package benchdurable

import (
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/schema"
)

// TestPathOfPicksOneExecutionsRequests: of everything the proxies traced,
// the path keeps the requests whose bodies name the execution, and the
// delete of the message received for it (its request names only the
// receipt handle); another execution's requests, an empty receive and
// the delete of another message are left out. Requests are ordered by
// start, named by their table or queue, and those after the
// execution_succeeded line are marked.
func TestPathOfPicksOneExecutionsRequests(t *testing.T) {
	names := schema.Names{ExecutionTable: "t-exec", HistoryTable: "t-hist", WorkQueue: "t-work"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	req := func(op string, start, end int, body, answer string) Traced {
		return Traced{Op: op, Start: at(start), End: at(end), Status: 200, Request: []byte(body), Response: []byte(answer)}
	}
	// The execution table's keys carry the slot, the work items the id.
	const id = "exec-1.inc1"
	traced := []Traced{
		req("DynamoDB.PutItem", 1, 3, `{"TableName":"t-exec","Item":{"pk":{"S":"default#exec-1"}}}`, `{}`),
		req("SQS.SendMessage", 3, 4, `{"QueueUrl":"http://h/000/t-work","MessageBody":"{\"executionId\":\"exec-1\"}"}`, `{}`),
		req("SQS.ReceiveMessage", -500, 5, `{"QueueUrl":"http://h/000/t-work"}`,
			`{"Messages":[{"ReceiptHandle":"rh-1","Body":"{\"executionId\":\"exec-1\"}"},{"ReceiptHandle":"rh-2","Body":"{\"executionId\":\"exec-2\"}"}]}`),
		req("SQS.ReceiveMessage", 5, 1005, `{"QueueUrl":"http://h/000/t-work"}`, `{}`),
		req("DynamoDB.GetItem", 6, 7, `{"TableName":"t-exec","Key":{"pk":{"S":"default#exec-2"}}}`, `{}`),
		req("DynamoDB.UpdateItem", 8, 10, `{"TableName":"t-exec","Key":{"pk":{"S":"default#exec-1"}}}`, `{}`),
		req("SQS.DeleteMessage", 12, 13, `{"QueueUrl":"http://h/000/t-work","ReceiptHandle":"rh-1"}`, `{}`),
		req("SQS.DeleteMessage", 12, 13, `{"QueueUrl":"http://h/000/t-work","ReceiptHandle":"rh-2"}`, `{}`),
		req("DynamoDBStreams.GetRecords", 850, 860, `{"ShardIterator":"arn:aws:dynamodb:ddblocal:000000000000:table/t-exec/stream/2026|001|c2g="}`,
			`{"Records":[{"dynamodb":{"NewImage":{"pk":{"S":"default#exec-1"}}}}]}`),
		req("DynamoDB.PutItem", 900, 901, `{"TableName":"t-hist","Item":{"pk":{"S":"default#exec-1"}}}`, `{}`),
	}
	p := pathOf(id, traced, t0, at(4), at(11), names)
	var got []string
	for _, r := range p.Requests {
		s := r.Op + " " + r.Target
		if r.AfterSuccess {
			s += " after"
		}
		got = append(got, s)
	}
	want := []string{
		"SQS.ReceiveMessage work queue", "DynamoDB.PutItem execution table", "SQS.SendMessage work queue",
		"DynamoDB.UpdateItem execution table", "SQS.DeleteMessage work queue after",
		"DynamoDBStreams.GetRecords execution table's stream after", "DynamoDB.PutItem history table after",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("path:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p.Critical() != 4 || p.Requests[0].StartMs != -500 || p.Requests[0].EndMs != 5 || p.AnsweredMs != 4 || p.SucceededMs != 11 {
		t.Errorf("path figures: %+v", p)
	}
	md := p.Markdown()
	for _, want := range []string{"| 1 | SQS.ReceiveMessage | work queue | -500.0 | 5.0 |", "| 5 | SQS.DeleteMessage (after SUCCEEDED) | work queue |",
		"4 requests before it"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
