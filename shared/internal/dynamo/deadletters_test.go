package dynamo_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// TestDeadLettersItemLayout: the item is laid out as schema.DeadLetterTable
// says (record_id, the record's JSON in record, ttl_epoch_s), and a record
// stored as binary JSON reads back too.
func TestDeadLettersItemLayout(t *testing.T) {
	clients, _ := awstest.Clients(t)
	table := awstest.Name(t, "dl")
	awstest.Tables(t, clients, schema.DeadLetterTable(table))
	rec := dynamo.NewDeadLetters(clients.DynamoDB, table, nil)
	ctx := t.Context()
	exp := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	r := deadletter.Record{ID: "poison:m1", Kind: deadletter.KindPoison, MessageID: "m1", ReceiveCount: 5,
		RecordedAt: time.Now().UTC(), ExpiresAt: exp}
	if created, err := rec.Put(ctx, r); err != nil || !created {
		t.Fatalf("Put: created = %v, error = %v", created, err)
	}
	out, err := clients.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamo.AttrRecordID: &types.AttributeValueMemberS{Value: r.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := out.Item[dynamo.AttrRecord].(*types.AttributeValueMemberS)
	if !ok {
		t.Fatalf("record attribute = %#v, want a string", out.Item[dynamo.AttrRecord])
	}
	var stored deadletter.Record
	if err := json.Unmarshal([]byte(doc.Value), &stored); err != nil || stored.ID != r.ID || stored.MessageID != "m1" {
		t.Fatalf("record JSON %s: %+v, %v", doc.Value, stored, err)
	}
	if ttl, ok := out.Item[dynamo.AttrTTL].(*types.AttributeValueMemberN); !ok || ttl.Value != strconv.FormatInt(exp.Unix(), 10) {
		t.Fatalf("ttl attribute = %#v, want %d", out.Item[dynamo.AttrTTL], exp.Unix())
	}

	bin, _ := json.Marshal(deadletter.Record{ID: "poison:m2", Kind: deadletter.KindPoison, MessageID: "m2", ReceiveCount: 6})
	if _, err := clients.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		dynamo.AttrRecordID: &types.AttributeValueMemberS{Value: "poison:m2"}, dynamo.AttrRecord: &types.AttributeValueMemberB{Value: bin},
	}}); err != nil {
		t.Fatal(err)
	}
	got, err := rec.Get(ctx, "poison:m2")
	if err != nil || got.MessageID != "m2" || got.ReceiveCount != 6 {
		t.Fatalf("Get binary record: %+v, %v", got, err)
	}
}

// TestDeadLettersThrottlingIsUnavailable: a throttling DynamoDB surfaces as
// store.ErrUnavailable after the SDK's retries, like the other stores.
func TestDeadLettersThrottlingIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(400)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}`))
	}))
	defer srv.Close()
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 2
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		}),
		DisableValidateResponseChecksum: true,
	})
	rec := dynamo.NewDeadLetters(db, "dl", nil)
	ctx := context.Background()
	if _, err := rec.Put(ctx, deadletter.Record{ID: "x", Kind: deadletter.KindPoison}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Put: error = %v, want store.ErrUnavailable", err)
	}
	if _, err := rec.Get(ctx, "x"); !errors.Is(err, store.ErrUnavailable) || errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("Get: error = %v, want store.ErrUnavailable", err)
	}
}
