package ddbmodel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
)

// TestDirectAgreesWithWire runs the differential test's request
// sequences against two models on one clock, one over the wire (Clients)
// and one with the direct path for its reads (DirectClients): every
// answer, error messages included, must be the same.
func TestDirectAgreesWithWire(t *testing.T) {
	ctx := context.Background()
	wire := ddbmodel.New(ddbmodel.Options{Clock: clock.NewFake(epoch)})
	direct := ddbmodel.New(ddbmodel.Options{Clock: clock.NewFake(epoch)})
	sides := []side{{"wire", wire.Clients().DynamoDB}, {"direct", direct.DirectClients().DynamoDB}}
	for _, s := range sides {
		if _, err := s.db.CreateTable(ctx, diffTable("tbl")); err != nil {
			t.Fatalf("%s: create table: %v", s.name, err)
		}
		if _, err := s.db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String("tbl"),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(true)}}); err != nil {
			t.Fatalf("%s: ttl: %v", s.name, err)
		}
	}
	stats := map[string]int{}
	for seq := range diffSequences {
		g := &gen{r: rand.New(rand.NewPCG(uint64(seq), 7)), table: "tbl", seq: seq, now: epoch.Unix()}
		for step := range diffSteps {
			req := g.request()
			var answers [2]string
			for i, s := range sides {
				answers[i] = req.run(ctx, s.db)
			}
			kind, _, _ := strings.Cut(answers[0], " ")
			stats[req.op+" "+kind]++
			if answers[0] != answers[1] {
				t.Fatalf("sequence %d step %d: %s %s\nwire:   %.3000s\ndirect: %.3000s", seq, step, req.op, req.describe, answers[0], answers[1])
			}
		}
	}
	for _, want := range []string{"GetItem ok", "GetItem error", "BatchGetItem ok", "Query ok", "Query error"} {
		if stats[want] == 0 {
			t.Errorf("no %q among the requests: %v", want, stats)
		}
	}
	// Malformed reads: both sides refuse them alike.
	bad := []func(db *dynamodb.Client) error{
		func(db *dynamodb.Client) error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("tbl"), Key: map[string]types.AttributeValue{"pk": str("p"), "sk": num("1x")}})
			return err
		},
		func(db *dynamodb.Client) error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("tbl"), AttributesToGet: []string{"a"}, Key: map[string]types.AttributeValue{"pk": str("p"), "sk": num("1")}})
			return err
		},
		func(db *dynamodb.Client) error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("nope"), Key: map[string]types.AttributeValue{"pk": str("p")}})
			return err
		},
		func(db *dynamodb.Client) error {
			_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("tbl"), KeyConditionExpression: aws.String("pk = :p"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": str("p"), ":s": &types.AttributeValueMemberSS{Value: []string{"a", "a"}}}})
			return err
		},
		func(db *dynamodb.Client) error {
			_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("tbl"), KeyConditionExpression: aws.String("pk = :p"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": str("p")}, ExclusiveStartKey: map[string]types.AttributeValue{}})
			return err
		},
		func(db *dynamodb.Client) error {
			_, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				"tbl": {Keys: []map[string]types.AttributeValue{{"pk": str("p"), "sk": num("1")}, {"pk": str("p"), "sk": num("1")}}}}})
			return err
		},
	}
	for i, f := range bad {
		var answers [2]string
		for j, s := range sides {
			answers[j] = answer(f(s.db), nil)
		}
		if answers[0] != answers[1] || !strings.HasPrefix(answers[0], "error ") {
			t.Errorf("malformed read %d: wire %q, direct %q", i, answers[0], answers[1])
		}
	}
}

// TestDirectFaults: the fault hook sees a direct read as a wire one, and
// its errors come back as the SDK decodes them from the wire: a typed
// throttle with the response's status, a failed send for a transport
// fault.
func TestDirectFaults(t *testing.T) {
	var fault ddbmodel.Fault
	var seen []string
	m := ddbmodel.New(ddbmodel.Options{Clock: clock.NewFake(epoch), Fault: func(r ddbmodel.Request) ddbmodel.Fault {
		seen = append(seen, fmt.Sprintf("%s %s %T", r.Op, strings.Join(r.Tables, ","), r.Input))
		return fault
	}})
	ctx := context.Background()
	db := m.DirectClients().DynamoDB
	if _, err := db.CreateTable(ctx, diffTable("tbl")); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": str("p"), "sk": num("1")}
	fault = ddbmodel.Fault{Err: ddbmodel.Throttled()}
	_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("tbl"), Key: key})
	var throttled *types.ProvisionedThroughputExceededException
	var resp *awshttp.ResponseError
	if !errors.As(err, &throttled) || !errors.As(err, &resp) || resp.HTTPStatusCode() != 400 || resp.ServiceRequestID() == "" {
		t.Fatalf("throttled read: %v", err)
	}
	fault = ddbmodel.Fault{Err: ddbmodel.InternalServerError(), AfterApply: true}
	_, err = db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("tbl"), KeyConditionExpression: aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str("p")}})
	var internal *types.InternalServerError
	if !errors.As(err, &internal) || !errors.As(err, &resp) || resp.HTTPStatusCode() != 500 {
		t.Fatalf("a read with its answer lost: %v", err)
	}
	fault = ddbmodel.Fault{Err: errors.New("connection reset")}
	_, err = db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"tbl": {Keys: []map[string]types.AttributeValue{key}}}})
	var send *smithyhttp.RequestSendError
	if !errors.As(err, &send) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("transport fault: %v", err)
	}
	want := []string{"CreateTable tbl *ddbmodel.CreateTableInput", "GetItem tbl *ddbmodel.GetItemInput", "Query tbl *ddbmodel.QueryInput", "BatchGetItem tbl *ddbmodel.BatchGetItemInput"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("the hook saw %v, want %v", seen, want)
	}
}

// TestDirectAnswersAreCopies: a direct read answers maps and lists of
// its own, however often the item is read (the members' bytes are
// shared: readers do not write into them).
func TestDirectAnswersAreCopies(t *testing.T) {
	m := ddbmodel.New(ddbmodel.Options{Clock: clock.NewFake(epoch)})
	db := m.DirectClients().DynamoDB
	ctx := context.Background()
	if _, err := db.CreateTable(ctx, diffTable("tbl")); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": str("p"), "sk": num("1")}
	item := map[string]types.AttributeValue{"pk": str("p"), "sk": num("1"), "b": &types.AttributeValueMemberB{Value: []byte("abc")},
		"m":  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": str("y")}},
		"l":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}}},
		"ss": &types.AttributeValueMemberSS{Value: []string{"a", "b"}}}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: item}); err != nil {
		t.Fatal(err)
	}
	want := normalize(item)
	for range 3 {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("tbl"), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := normalize(out.Item); got != want {
			t.Fatalf("read %s, want %s", got, want)
		}
		// What a reader does with its answer's structure stays with it.
		out.Item["m"].(*types.AttributeValueMemberM).Value["x"] = str("changed")
		out.Item["l"].(*types.AttributeValueMemberL).Value[0].(*types.AttributeValueMemberM).Value["y"] = str("added")
		out.Item["l"].(*types.AttributeValueMemberL).Value = nil
		out.Item["ss"].(*types.AttributeValueMemberSS).Value[0] = "z"
		out.Item["extra"] = str("added")
		delete(out.Item, "b")
	}
}
