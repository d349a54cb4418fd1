package ddbmodel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
)

var epoch = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// newModel returns a model on a fake clock with the diff table ("tbl",
// TTL on "ttl", a NEW_AND_OLD_IMAGES stream) and its clients.
func newModel(t *testing.T, opts ddbmodel.Options) (*ddbmodel.Model, *clock.Fake, awsclient.Clients) {
	t.Helper()
	c := clock.NewFake(epoch)
	opts.Clock = c
	m := ddbmodel.New(opts)
	cl := m.Clients()
	ctx := context.Background()
	if _, err := cl.DynamoDB.CreateTable(ctx, diffTable("tbl")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DynamoDB.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String("tbl"),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(true)}}); err != nil {
		t.Fatal(err)
	}
	return m, c, cl
}

func put(t *testing.T, cl awsclient.Clients, sk int, extra map[string]types.AttributeValue) {
	t.Helper()
	item := map[string]types.AttributeValue{"pk": str("p"), "sk": num(fmt.Sprint(sk))}
	for k, v := range extra {
		item[k] = v
	}
	if _, err := cl.DynamoDB.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: item}); err != nil {
		t.Fatal(err)
	}
}

// streamOf returns the table's stream ARN and shards.
func streamOf(t *testing.T, cl awsclient.Clients) (string, []st.Shard) {
	t.Helper()
	ctx := context.Background()
	d, err := cl.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("tbl")})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(d.Table.LatestStreamArn)
	out, err := cl.DynamoDBStreams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &arn})
	if err != nil {
		t.Fatal(err)
	}
	return arn, out.StreamDescription.Shards
}

// readShard reads a shard from its trim horizon to its end (or to what
// an open shard holds).
func readShard(t *testing.T, cl awsclient.Clients, arn, shard string) []st.Record {
	t.Helper()
	ctx := context.Background()
	it, err := cl.DynamoDBStreams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &shard,
		ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	var out []st.Record
	next := it.ShardIterator
	for next != nil {
		r, err := cl.DynamoDBStreams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: next, Limit: aws.Int32(2)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Records...)
		if len(r.Records) == 0 {
			break
		}
		next = r.NextShardIterator
	}
	return out
}

func TestStreamRollsOverShards(t *testing.T) {
	_, c, cl := newModel(t, ddbmodel.Options{ShardRecords: 3})
	for i := range 7 {
		put(t, cl, i, nil)
	}
	put(t, cl, 0, map[string]types.AttributeValue{"a": str("x")})
	put(t, cl, 0, map[string]types.AttributeValue{"a": str("x")}) // no change: no record
	arn, shards := streamOf(t, cl)
	if len(shards) != 3 {
		t.Fatalf("%d shards after 8 records at 3 a shard, want 3", len(shards))
	}
	var events []string
	for i, sh := range shards {
		if i > 0 && aws.ToString(sh.ParentShardId) != aws.ToString(shards[i-1].ShardId) {
			t.Fatalf("shard %d's parent is %q, want the shard before", i, aws.ToString(sh.ParentShardId))
		}
		if closed := sh.SequenceNumberRange.EndingSequenceNumber != nil; closed != (i < 2) {
			t.Fatalf("shard %d closed = %v", i, closed)
		}
		for _, r := range readShard(t, cl, arn, aws.ToString(sh.ShardId)) {
			events = append(events, string(r.EventName))
		}
	}
	if got := strings.Join(events, ","); got != "INSERT,INSERT,INSERT,INSERT,INSERT,INSERT,INSERT,MODIFY" {
		t.Fatalf("events %s", got)
	}
	// Time rolls the open shard over too.
	c.Advance(4 * time.Hour)
	if _, shards = streamOf(t, cl); len(shards) != 4 {
		t.Fatalf("%d shards 4 hours later, want 4", len(shards))
	}
}

func TestStreamTrimsAndIteratorsExpire(t *testing.T) {
	_, c, cl := newModel(t, ddbmodel.Options{})
	ctx := context.Background()
	put(t, cl, 1, nil)
	arn, shards := streamOf(t, cl)
	shard := shards[0].ShardId
	it, err := cl.DynamoDBStreams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: shard,
		ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	first := readShard(t, cl, arn, aws.ToString(shard))
	seq := first[0].Dynamodb.SequenceNumber
	c.Advance(16 * time.Minute)
	var expired *st.ExpiredIteratorException
	if _, err := cl.DynamoDBStreams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator}); !errors.As(err, &expired) {
		t.Fatalf("a 16-minute-old iterator: err = %v, want ExpiredIteratorException", err)
	}
	c.Advance(24 * time.Hour)
	put(t, cl, 2, nil)
	var trimmed *st.TrimmedDataAccessException
	_, err = cl.DynamoDBStreams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: shard,
		ShardIteratorType: st.ShardIteratorTypeAtSequenceNumber, SequenceNumber: seq})
	if !errors.As(err, &trimmed) {
		t.Fatalf("an iterator at a trimmed record: err = %v, want TrimmedDataAccessException", err)
	}
	// The shard rolled over (4 hours) and its first record is gone.
	_, shards = streamOf(t, cl)
	var keys []string
	for _, sh := range shards {
		for _, r := range readShard(t, cl, arn, aws.ToString(sh.ShardId)) {
			keys = append(keys, r.Dynamodb.Keys["sk"].(*st.AttributeValueMemberN).Value)
		}
	}
	if strings.Join(keys, ",") != "2" {
		t.Fatalf("records after trimming: %v, want only sk 2", keys)
	}
}

func TestTTLDeletesAfterTheLag(t *testing.T) {
	lags := map[string]time.Duration{"1": time.Hour, "2": 3 * time.Hour}
	m, c, cl := newModel(t, ddbmodel.Options{TTLLag: func(table string, key ddbmodel.Item, expiredAt time.Time) time.Duration {
		return lags[key["sk"].S]
	}})
	expiry := epoch.Add(time.Minute).Unix()
	for _, sk := range []int{1, 2, 3} {
		extra := map[string]types.AttributeValue{"ttl": num(fmt.Sprint(expiry))}
		if sk == 3 {
			extra["ttl"] = num(fmt.Sprint(expiry + 86400))
		}
		put(t, cl, sk, extra)
	}
	c.Advance(2 * time.Minute)
	m.Advance()
	if got, _ := m.Count("tbl"); got != (ddbmodel.Counts{Items: 3, Expired: 2}) {
		t.Fatalf("counts after expiry: %+v", got)
	}
	// Reads still return an expired item until TTL deletes it.
	out, err := cl.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("tbl"),
		Key: map[string]types.AttributeValue{"pk": str("p"), "sk": num("1")}})
	if err != nil || out.Item == nil {
		t.Fatalf("an expired item before its deletion: %v, %v", out, err)
	}
	c.Advance(time.Hour)
	m.Advance()
	if got, _ := m.Count("tbl"); got != (ddbmodel.Counts{Items: 2, Expired: 1}) {
		t.Fatalf("counts an hour later: %+v", got)
	}
	c.Advance(2 * time.Hour)
	m.Advance()
	dump := m.Dump("tbl")
	if len(dump) != 1 || dump[0]["sk"].S != "3" {
		t.Fatalf("left after both lags: %v", dump)
	}
	arn, shards := streamOf(t, cl)
	records := readShard(t, cl, arn, aws.ToString(shards[0].ShardId))
	var removes int
	for _, r := range records {
		if r.EventName == st.OperationTypeRemove {
			removes++
			if r.UserIdentity == nil || aws.ToString(r.UserIdentity.Type) != "Service" || aws.ToString(r.UserIdentity.PrincipalId) != "dynamodb.amazonaws.com" || r.Dynamodb.OldImage == nil {
				t.Fatalf("a TTL removal's record: %+v", r)
			}
		}
	}
	if removes != 2 {
		t.Fatalf("%d REMOVE records, want 2", removes)
	}
}

// TestDefaultTTLLagIsSeeded: the default lag is drawn from the seeded
// source, so two models with one seed delete at the same times.
func TestDefaultTTLLagIsSeeded(t *testing.T) {
	run := func(seed uint64) []int {
		m, c, cl := newModel(t, ddbmodel.Options{Seed: seed})
		for i := range 20 {
			put(t, cl, i, map[string]types.AttributeValue{"ttl": num(fmt.Sprint(epoch.Unix()))})
		}
		var left []int
		for range 48 {
			c.Advance(time.Hour)
			m.Advance()
			n, _ := m.Count("tbl")
			left = append(left, n.Items)
		}
		if left[47] != 0 {
			t.Fatalf("%d items left 48 hours after expiry", left[47])
		}
		return left
	}
	a, b := run(7), run(7)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same seed, different deletions: %v vs %v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(run(8)) {
		t.Log("two seeds deleted alike (possible, unlikely)")
	}
}

func TestFaults(t *testing.T) {
	var fault ddbmodel.Fault
	var seen []string
	m, _, cl := newModel(t, ddbmodel.Options{Fault: func(r ddbmodel.Request) ddbmodel.Fault {
		seen = append(seen, r.Op+" "+strings.Join(r.Tables, ","))
		if in, ok := r.Input.(*ddbmodel.PutItemInput); ok && in.Item["sk"].S == "9" {
			return fault
		}
		return ddbmodel.Fault{}
	}})
	ctx := context.Background()
	item := map[string]types.AttributeValue{"pk": str("p"), "sk": num("9")}
	fault = ddbmodel.Fault{Err: ddbmodel.Throttled()}
	_, err := cl.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: item})
	var throttled *types.ProvisionedThroughputExceededException
	if !errors.As(err, &throttled) || len(m.Dump("tbl")) != 0 {
		t.Fatalf("throttled put: err = %v, items %v", err, m.Dump("tbl"))
	}
	fault = ddbmodel.Fault{Err: ddbmodel.InternalServerError(), AfterApply: true}
	_, err = cl.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: item})
	var internal *types.InternalServerError
	if !errors.As(err, &internal) || len(m.Dump("tbl")) != 1 {
		t.Fatalf("lost answer: err = %v, items %v", err, m.Dump("tbl"))
	}
	fault = ddbmodel.Fault{Err: errors.New("connection reset")}
	if _, err = cl.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: item}); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("transport fault: %v", err)
	}
	if seen[0] != "CreateTable tbl" || seen[len(seen)-1] != "PutItem tbl" {
		t.Fatalf("the hook saw %v", seen)
	}
}

func TestTypedErrors(t *testing.T) {
	_, _, cl := newModel(t, ddbmodel.Options{})
	ctx := context.Background()
	put(t, cl, 1, map[string]types.AttributeValue{"a": str("old")})
	_, err := cl.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"),
		Item:                                map[string]types.AttributeValue{"pk": str("p"), "sk": num("1")},
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) || ccf.Item["a"].(*types.AttributeValueMemberS).Value != "old" {
		t.Fatalf("refused condition: %v", err)
	}
	var missing *types.ResourceNotFoundException
	if _, err := cl.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("nope"), Key: map[string]types.AttributeValue{"pk": str("p")}}); !errors.As(err, &missing) {
		t.Fatalf("missing table: %v", err)
	}
	_, err = cl.DynamoDB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("tbl"), IndexName: aws.String("inc"), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("gk = :g"), ExpressionAttributeValues: map[string]types.AttributeValue{":g": str("g")}})
	if err == nil || !strings.Contains(err.Error(), "Consistent reads are not supported") {
		t.Fatalf("a consistent read of an index: %v", err)
	}
	big := map[string]types.AttributeValue{"pk": str("p"), "sk": num("2"), "pad": &types.AttributeValueMemberB{Value: make([]byte, ddbmodel.MaxItemSize)}}
	if _, err := cl.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: big}); err == nil || !strings.Contains(err.Error(), "Item size has exceeded") {
		t.Fatalf("an item over 400 KB: %v", err)
	}
	keys := make([]map[string]types.AttributeValue, 101)
	for i := range keys {
		keys[i] = map[string]types.AttributeValue{"pk": str("p"), "sk": num(fmt.Sprint(i))}
	}
	if _, err := cl.DynamoDB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"tbl": {Keys: keys}}}); err == nil {
		t.Fatal("a BatchGetItem of 101 keys was accepted")
	}
	wrong := map[string]types.AttributeValue{"pk": str("p"), "sk": num("3"), "gk": num("1")}
	if _, err := cl.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: wrong}); err == nil || !strings.Contains(err.Error(), "Type mismatch for Index Key") {
		t.Fatalf("an index key of the wrong type: %v", err)
	}
}

// TestDeterministic: the same requests on the same clock give the same
// answers byte for byte.
func TestDeterministic(t *testing.T) {
	run := func() string {
		m := ddbmodel.New(ddbmodel.Options{Clock: clock.NewFake(epoch)})
		var b strings.Builder
		reqs := []struct{ op, body string }{
			{"CreateTable", `{"TableName":"tbl","KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],"StreamSpecification":{"StreamEnabled":true,"StreamViewType":"NEW_AND_OLD_IMAGES"},"BillingMode":"PAY_PER_REQUEST"}`},
			{"PutItem", `{"TableName":"tbl","Item":{"pk":{"S":"b"},"m":{"M":{"z":{"N":"1"},"a":{"SS":["y","x"]}}}},"ReturnConsumedCapacity":"INDEXES"}`},
			{"PutItem", `{"TableName":"tbl","Item":{"pk":{"S":"a"},"n":{"N":"1.50"}}}`},
			{"UpdateItem", `{"TableName":"tbl","Key":{"pk":{"S":"a"}},"UpdateExpression":"ADD n :one","ExpressionAttributeValues":{":one":{"N":"1"}},"ReturnValues":"ALL_NEW"}`},
			{"Scan", `{"TableName":"tbl"}`},
			{"DescribeTable", `{"TableName":"tbl"}`},
		}
		for _, r := range reqs {
			status, body, err := m.Serve("DynamoDB_20120810."+r.op, []byte(r.body))
			fmt.Fprintf(&b, "%d %s %v\n", status, body, err)
		}
		return b.String()
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	if !strings.Contains(a, `"n":{"N":"2.5"}`) {
		t.Fatalf("answers:\n%s", a)
	}
}
