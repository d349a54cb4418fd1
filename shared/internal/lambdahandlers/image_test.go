package lambdahandlers_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/internal/lambdahandlers"
)

// An image of every attribute type survives ToLambdaImage then
// FromLambdaImage unchanged, and its Lambda form marshals as a stream
// event carries it ({"S": ...}, {"NULL": true} ...).
func TestLambdaImageRoundTrip(t *testing.T) {
	img := map[string]types.AttributeValue{
		"s":    &types.AttributeValueMemberS{Value: "x"},
		"n":    &types.AttributeValueMemberN{Value: "12.5"},
		"b":    &types.AttributeValueMemberB{Value: []byte{0, 1, 0xff}},
		"t":    &types.AttributeValueMemberBOOL{Value: true},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"1", "2"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
		"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"inner": &types.AttributeValueMemberL{Value: []types.AttributeValue{
				&types.AttributeValueMemberS{Value: "y"}, &types.AttributeValueMemberN{Value: "3"},
				&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
			}},
		}},
	}
	lambda := lambdahandlers.ToLambdaImage(img)
	if back := lambdahandlers.FromLambdaImage(lambda); !reflect.DeepEqual(back, img) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", back, img)
	}
	b, err := json.Marshal(lambda)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]events.DynamoDBAttributeValue
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if back := lambdahandlers.FromLambdaImage(decoded); !reflect.DeepEqual(back, img) {
		t.Fatalf("through JSON %s:\n got %#v\nwant %#v", b, back, img)
	}
	if lambdahandlers.ToLambdaImage(nil) != nil {
		t.Error("nil image converted to non-nil")
	}
}
