package localcloud_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/schema"
)

// streamEnv is a fresh execution table (its stream NEW_AND_OLD_IMAGES, as
// in production) and the clients to write it.
type streamEnv struct {
	t       *testing.T
	clients awsclient.Clients
	names   schema.Names
	arn     string // the table's LatestStreamArn
}

func newStreamEnv(t *testing.T) *streamEnv {
	t.Helper()
	clients, _ := awstest.Clients(t)
	names := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(names.ExecutionTable))
	out, err := clients.DynamoDB.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(names.ExecutionTable)})
	if err != nil {
		t.Fatal(err)
	}
	return &streamEnv{t: t, clients: clients, names: names, arn: aws.ToString(out.Table.LatestStreamArn)}
}

// put writes item pk with the attributes ("fail", "v" ...: numbers).
func (e *streamEnv) put(pk string, attrs map[string]int) {
	e.t.Helper()
	item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
	for k, v := range attrs {
		item[k] = &types.AttributeValueMemberN{Value: strconv.Itoa(v)}
	}
	if _, err := e.clients.DynamoDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(e.names.ExecutionTable), Item: item}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *streamEnv) del(pk string) {
	e.t.Helper()
	if _, err := e.clients.DynamoDB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(e.names.ExecutionTable),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}}); err != nil {
		e.t.Fatal(err)
	}
}

// options runs echofn as the history function on the table's stream.
func (e *streamEnv) options(record string, m localcloud.StreamMapping) localcloud.Options {
	opts := echoOptions(e.t, record, localcloud.History)
	opts.DynamoDB, opts.DynamoDBStreams, opts.SQS = e.clients.DynamoDB, e.clients.DynamoDBStreams, e.clients.SQS
	m.Function, m.Table = localcloud.History, e.names.ExecutionTable
	opts.Streams = []localcloud.StreamMapping{m}
	return opts
}

// invocations returns the stream events echofn received, in order.
func invocations(t *testing.T, record string) []events.DynamoDBEvent {
	return readRecords[events.DynamoDBEvent](t, record, "ddb")
}

// keys renders each invocation as its records' pk, "|" between
// invocations: "a,b|b".
func keys(evs []events.DynamoDBEvent) string {
	var out []string
	for _, ev := range evs {
		var ks []string
		for _, r := range ev.Records {
			ks = append(ks, r.Change.Keys["pk"].String())
		}
		out = append(out, strings.Join(ks, ","))
	}
	return strings.Join(out, "|")
}

// delivered counts the records that reached the function.
func delivered(evs []events.DynamoDBEvent) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.Records)
	}
	return n
}

// The mapping delivers the stream's records in order, at most BatchSize
// an invocation, each as Lambda builds it: event name, images, keys,
// sequence numbers, the stream's ARN.
func TestStreamMappingDeliversRecordsInOrder(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	for i := 1; i <= 5; i++ {
		e.put("k"+strconv.Itoa(i), map[string]int{"v": i})
	}
	e.put("k1", map[string]int{"v": 10})
	e.del("k2")
	record := t.TempDir()
	start(t, e.options(record, localcloud.StreamMapping{BatchSize: 3}))

	eventually(t, 30*time.Second, "the 7 records delivered", func() bool { return delivered(invocations(t, record)) >= 7 })
	evs := invocations(t, record)
	if got := keys(evs); got != "k1,k2,k3|k4,k5,k1|k2" {
		t.Fatalf("invocations %q, want k1,k2,k3|k4,k5,k1|k2 (batch size 3, stream order)", got)
	}
	var recs []events.DynamoDBEventRecord
	for _, ev := range evs {
		recs = append(recs, ev.Records...)
	}
	var prev string
	for i, r := range recs {
		c := r.Change
		if r.EventSource != "aws:dynamodb" || r.EventVersion == "" || r.EventSourceArn != e.arn || r.AWSRegion == "" || r.EventID == "" {
			t.Errorf("record %d: source %q version %q arn %q (want %q) region %q id %q", i, r.EventSource, r.EventVersion, r.EventSourceArn, e.arn, r.AWSRegion, r.EventID)
		}
		if c.StreamViewType != "NEW_AND_OLD_IMAGES" || c.SizeBytes <= 0 || c.ApproximateCreationDateTime.IsZero() || c.SequenceNumber == "" {
			t.Errorf("record %d: view %q size %d created %v seq %q", i, c.StreamViewType, c.SizeBytes, c.ApproximateCreationDateTime, c.SequenceNumber)
		}
		if prev != "" && !seqLess(prev, c.SequenceNumber) {
			t.Errorf("record %d: sequence %s after %s", i, c.SequenceNumber, prev)
		}
		prev = c.SequenceNumber
	}
	num := func(img map[string]events.DynamoDBAttributeValue) string {
		if v, ok := img["v"]; ok {
			return v.Number()
		}
		return "-"
	}
	for i, want := range []struct{ name, newV, oldV string }{
		{"INSERT", "1", "-"}, {"INSERT", "2", "-"}, {"INSERT", "3", "-"}, {"INSERT", "4", "-"}, {"INSERT", "5", "-"},
		{"MODIFY", "10", "1"}, {"REMOVE", "-", "2"},
	} {
		r := recs[i]
		if r.EventName != want.name || num(r.Change.NewImage) != want.newV || num(r.Change.OldImage) != want.oldV {
			t.Errorf("record %d: %s new %s old %s, want %s new %s old %s", i, r.EventName, num(r.Change.NewImage), num(r.Change.OldImage),
				want.name, want.newV, want.oldV)
		}
		if len(r.Change.Keys) != 1 || r.Change.Keys["pk"].String() == "" {
			t.Errorf("record %d: keys %v", i, r.Change.Keys)
		}
	}
}

// seqLess compares two sequence numbers (decimal strings of any length).
func seqLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// With ReportBatchItemFailures, a reported record is retried from, with
// the records after it; the records before it are not delivered again.
func TestStreamMappingRetriesFromTheFailedItem(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	e.put("r1", nil)
	e.put("r2", map[string]int{"failTimes": 2})
	e.put("r3", nil)
	record := t.TempDir()
	start(t, e.options(record, localcloud.StreamMapping{ReportBatchItemFailures: true, MaxRetryAttempts: -1}))

	eventually(t, 30*time.Second, "three invocations", func() bool { return len(invocations(t, record)) >= 3 })
	e.put("r4", nil)
	eventually(t, 30*time.Second, "r4 delivered", func() bool { return strings.Contains(keys(invocations(t, record)), "r4") })
	if got := keys(invocations(t, record)); got != "r1,r2,r3|r2,r3|r2,r3|r4" {
		t.Errorf("invocations %q, want r1,r2,r3|r2,r3|r2,r3|r4", got)
	}
}

// A batch that keeps failing is given up after MaxRetryAttempts retries:
// its invocation record goes to the on-failure queue, with the failing
// records' range, and the mapping reads on. A response naming no record
// of the batch fails the whole batch.
func TestStreamMappingSendsExhaustedBatchesToTheOnFailureQueue(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	failURL := awstest.Queues(t, e.clients, schema.Queue{Name: awstest.Name(t, "fail"), VisibilityTimeout: time.Minute, Retention: time.Hour})
	var queueURL string
	for _, u := range failURL {
		queueURL = u
	}
	e.put("r1", nil)
	e.put("r2", map[string]int{"fail": 1})
	e.put("r3", nil)
	record := t.TempDir()
	start(t, e.options(record, localcloud.StreamMapping{ReportBatchItemFailures: true, MaxRetryAttempts: 2, OnFailureQueueURL: queueURL}))

	msgs, err := awstest.Receive(t.Context(), e.clients.SQS, queueURL, 1, 30*time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("on-failure queue: %d messages, %v", len(msgs), err)
	}
	evs := invocations(t, record)
	if got := keys(evs); got != "r1,r2,r3|r2,r3|r2,r3" {
		t.Fatalf("invocations %q, want r1,r2,r3|r2,r3|r2,r3 (two retries from r2)", got)
	}
	seq := func(i int) string { return evs[0].Records[i].Change.SequenceNumber }
	var rec localcloud.StreamFailureRecord
	body := aws.ToString(msgs[0].Body)
	if err := json.Unmarshal([]byte(body), &rec); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	info := rec.DDBStreamBatchInfo
	if info.StartSequenceNumber != seq(1) || info.EndSequenceNumber != seq(2) || info.BatchSize != 2 || info.StreamARN != e.arn ||
		!strings.HasPrefix(info.ShardID, "shardId-") {
		t.Errorf("DDBStreamBatchInfo %+v, want r2..r3 (%s..%s), 2 records, stream %s", info, seq(1), seq(2), e.arn)
	}
	for _, ts := range []string{info.ApproximateArrivalOfFirstRecord, info.ApproximateArrivalOfLastRecord} {
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("arrival %q: %v", ts, err)
		}
	}
	if _, err := time.Parse(time.RFC3339, rec.Timestamp); err != nil || rec.Version != "1.0" {
		t.Errorf("timestamp %q (%v), version %q", rec.Timestamp, err, rec.Version)
	}
	rc := rec.RequestContext
	if rc.Condition != "RetryAttemptsExhausted" || rc.ApproximateInvokeCount != 3 || rc.RequestID == "" ||
		!strings.HasPrefix(rc.FunctionARN, "arn:aws:lambda:") || !strings.HasSuffix(rc.FunctionARN, ":function:qasync-history") {
		t.Errorf("requestContext %+v", rc)
	}
	if r := rec.ResponseContext; r.StatusCode != 200 || r.ExecutedVersion != "$LATEST" || r.FunctionError != "" {
		t.Errorf("responseContext %+v (a batch item failure is no function error)", r)
	}
	for _, s := range []string{`"Keys"`, `"NewImage"`, `"r2"`} {
		if strings.Contains(body, s) {
			t.Errorf("the failure record carries the records (%s): %s", s, body)
		}
	}

	// The mapping goes on; a response naming no record of the batch fails
	// it whole: it too is given up, and what follows is delivered.
	e.put("r4", nil)
	eventually(t, 30*time.Second, "r4 delivered", func() bool { return strings.Contains(keys(invocations(t, record)), "r4") })
	e.put("r5", map[string]int{"badItem": 1})
	msgs, err = awstest.Receive(t.Context(), e.clients.SQS, queueURL, 1, 30*time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("on-failure queue after r5: %d messages, %v", len(msgs), err)
	}
	e.put("r6", nil)
	eventually(t, 30*time.Second, "r6 delivered", func() bool { return strings.Contains(keys(invocations(t, record)), "r6") })
	got := keys(invocations(t, record))
	if rest, _ := strings.CutPrefix(got, "r1,r2,r3|r2,r3|r2,r3|"); rest != "r4|r5|r5|r5|r6" {
		t.Errorf("invocations %q, want r4 delivered, r5 given up after 2 retries, then r6", got)
	}
	if err := json.Unmarshal([]byte(aws.ToString(msgs[0].Body)), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.DDBStreamBatchInfo.BatchSize != 1 || rec.RequestContext.ApproximateInvokeCount != 3 {
		t.Errorf("second failure record %+v", rec)
	}
}

// BisectOnError splits a batch whose invocation failed and tries the
// halves in order, down to the failing record, without spending retries:
// the good records are delivered, the bad one given up after its retry.
func TestStreamMappingBisectsAFailedBatch(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	e.put("a1", nil)
	e.put("a2", nil)
	e.put("bad", map[string]int{"failBatch": 1})
	e.put("a3", nil)
	record := t.TempDir()
	start(t, e.options(record, localcloud.StreamMapping{BisectOnError: true, MaxRetryAttempts: 1}))

	want := "a1,a2,bad,a3|a1,a2|bad,a3|bad|bad|a3"
	eventually(t, 30*time.Second, "the batch bisected down to the bad record", func() bool { return len(invocations(t, record)) >= 6 })
	e.put("a4", nil)
	eventually(t, 30*time.Second, "a4 delivered", func() bool { return strings.Contains(keys(invocations(t, record)), "a4") })
	if got := keys(invocations(t, record)); got != want+"|a4" {
		t.Errorf("invocations %q, want %q", got, want+"|a4")
	}
}

// BatchingWindow gathers records read over several polls into one
// invocation (here: up to BatchSize), and invokes with what it has when
// the window ends.
func TestStreamMappingBatchingWindowGathersWrites(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	record := t.TempDir()
	start(t, e.options(record, localcloud.StreamMapping{BatchSize: 4, BatchingWindow: 8 * time.Second}))
	// Apart by more than a poll (250 ms): without the window, each write
	// would be an invocation of its own.
	for i := 1; i <= 4; i++ {
		e.put("w"+strconv.Itoa(i), nil)
		time.Sleep(400 * time.Millisecond)
	}
	eventually(t, 30*time.Second, "the 4 writes delivered", func() bool { return delivered(invocations(t, record)) >= 4 })
	e.put("w5", nil)
	eventually(t, 30*time.Second, "w5 delivered when its window ends", func() bool { return delivered(invocations(t, record)) >= 5 })
	if got := keys(invocations(t, record)); got != "w1,w2,w3,w4|w5" {
		t.Errorf("invocations %q, want w1,w2,w3,w4|w5", got)
	}
}

// StartLatest skips what the stream held when the cloud started.
func TestStreamMappingStartsAtLatest(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	e.put("old", nil)
	record := t.TempDir()
	start(t, e.options(record, localcloud.StreamMapping{StartingPosition: localcloud.StartLatest}))
	// The poller opens the shard at its tip some time after Start: write
	// until a write is delivered.
	for i := 0; delivered(invocations(t, record)) == 0; i++ {
		if i > 100 {
			t.Fatal("no write delivered")
		}
		e.put("new"+strconv.Itoa(i), nil)
		time.Sleep(300 * time.Millisecond)
	}
	if got := keys(invocations(t, record)); strings.Contains(got, "old") {
		t.Errorf("invocations %q: the record before the start was delivered", got)
	}
}

// A stream mapping on a table without a stream refuses to start; one of a
// disabled function is left out (its table is not even looked up).
func TestStreamMappingNeedsTheTablesStream(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	awstest.Tables(t, e.clients, schema.PayloadTable(e.names.PayloadTable))
	opts := e.options(t.TempDir(), localcloud.StreamMapping{})
	opts.Streams[0].Table = e.names.PayloadTable
	c, err := localcloud.Start(t.Context(), opts)
	if err == nil {
		c.Close()
		t.Fatal("started on a table without a stream")
	}
	if !strings.Contains(err.Error(), "no stream enabled") || !strings.HasPrefix(err.Error(), "localcloud: ") {
		t.Errorf("error %v", err)
	}

	opts = echoOptions(t, t.TempDir(), localcloud.Submit)
	opts.DynamoDB, opts.DynamoDBStreams = e.clients.DynamoDB, e.clients.DynamoDBStreams
	opts.Streams = []localcloud.StreamMapping{{Function: localcloud.History, Table: "no-such-table"}}
	start(t, opts)
}

// Stream mappings are checked before anything starts.
func TestStartRefusesBadStreamMappings(t *testing.T) {
	t.Parallel()
	db, streams := dynamodb.New(dynamodb.Options{Region: "us-east-1"}), dynamodbstreams.New(dynamodbstreams.Options{Region: "us-east-1"})
	ok := localcloud.StreamMapping{Function: localcloud.History, Table: "t"}
	for _, c := range []struct {
		name    string
		m       localcloud.StreamMapping
		noDB    bool
		noStrms bool
		want    string
	}{
		{"no DynamoDB client", ok, true, false, "Options.DynamoDB is required"},
		{"no streams client", ok, false, true, "Options.DynamoDBStreams is required"},
		{"unknown function", localcloud.StreamMapping{Function: "nope", Table: "t"}, false, false, `unknown function "nope"`},
		{"no table", localcloud.StreamMapping{Function: localcloud.History}, false, false, "Table is required"},
		{"batch too large", localcloud.StreamMapping{Function: localcloud.History, Table: "t", BatchSize: 10001}, false, false, "BatchSize 10001"},
		{"negative batch", localcloud.StreamMapping{Function: localcloud.History, Table: "t", BatchSize: -1}, false, false, "BatchSize -1"},
		{"window", localcloud.StreamMapping{Function: localcloud.History, Table: "t", BatchingWindow: 301 * time.Second}, false, false, "BatchingWindow"},
		{"retries", localcloud.StreamMapping{Function: localcloud.History, Table: "t", MaxRetryAttempts: -2}, false, false, "MaxRetryAttempts -2"},
		{"position", localcloud.StreamMapping{Function: localcloud.History, Table: "t", StartingPosition: "AT_TIMESTAMP"}, false, false, `StartingPosition "AT_TIMESTAMP"`},
		{"destination without SQS", localcloud.StreamMapping{Function: localcloud.History, Table: "t", OnFailureQueueURL: "http://127.0.0.1:1/q"}, false, false, "Options.SQS is required"},
	} {
		opts := echoOptions(t, t.TempDir(), localcloud.History)
		opts.DynamoDB, opts.DynamoDBStreams = db, streams
		if c.noDB {
			opts.DynamoDB = nil
		}
		if c.noStrms {
			opts.DynamoDBStreams = nil
		}
		opts.Streams = []localcloud.StreamMapping{c.m}
		cl, err := localcloud.Start(t.Context(), opts)
		if err == nil {
			cl.Close()
			t.Errorf("%s: started", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "localcloud: ") {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// A stream mapping needs its function's role to read the stream (and to
// send to its on-failure queue), as Lambda checks when the mapping is
// created: without one of those grants the cloud does not start, and
// says which.
func TestIAMRefusesStreamMappingWithoutReadGrant(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	failName := awstest.Name(t, "fail")
	failURL := awstest.Queues(t, e.clients, schema.Queue{Name: failName, VisibilityTimeout: time.Minute, Retention: time.Hour})[failName]
	local := iamcheck.LocalNames(e.names, nil, "", "")
	local.Queues["HistoryFailureQueue"] = failURL
	for _, c := range []struct{ action, resource, want string }{
		{"dynamodb:GetRecords", "ExecutionTable", "missing Allow dynamodb:GetRecords on ${ExecutionTable.StreamArn}"},
		{"dynamodb:GetShardIterator", "ExecutionTable", "missing Allow dynamodb:GetShardIterator on ${ExecutionTable.StreamArn}"},
		{"dynamodb:DescribeStream", "ExecutionTable", "missing Allow dynamodb:DescribeStream on ${ExecutionTable.StreamArn}"},
		{"dynamodb:ListStreams", "ExecutionTable", "missing Allow dynamodb:ListStreams on ${ExecutionTable.StreamArn}"},
		{"sqs:SendMessage", "HistoryFailureQueue", "missing Allow sqs:SendMessage on ${HistoryFailureQueue.Arn}"},
	} {
		cut, n := devTemplate(t).Without("HistoryFunction", c.action, c.resource)
		if n != 1 {
			t.Fatalf("%s: removed %d grants, want 1", c.action, n)
		}
		opts := e.options(t.TempDir(), localcloud.StreamMapping{OnFailureQueueURL: failURL})
		opts.IAM = &localcloud.IAMOptions{Template: cut, Local: local,
			DynamoDB: os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), SQS: os.Getenv("AWS_ENDPOINT_URL_SQS")}
		cl, err := localcloud.Start(t.Context(), opts)
		if err == nil {
			cl.Close()
			t.Errorf("started without the history function's %s", c.action)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}

	// With the stack's own policies it starts and delivers.
	record := t.TempDir()
	opts := e.options(record, localcloud.StreamMapping{OnFailureQueueURL: failURL})
	opts.IAM = &localcloud.IAMOptions{Template: devTemplate(t), Local: local,
		DynamoDB: os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), SQS: os.Getenv("AWS_ENDPOINT_URL_SQS")}
	c := start(t, opts)
	e.put("x", nil)
	eventually(t, 30*time.Second, "x delivered", func() bool { return delivered(invocations(t, record)) >= 1 })
	if d := c.Denials(); len(d) != 0 {
		t.Errorf("denials %v", d)
	}
}
