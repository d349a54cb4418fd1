package iamcheck_test

import (
	"testing"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// DynamoDB Local's stream ARNs (region ddblocal) map onto the local
// region and account, keeping the stream's label; other ARNs are left as
// they are.
func TestLocalStreamARN(t *testing.T) {
	l := iamcheck.Local{Region: "us-east-1", AccountID: "000000000000", Partition: "aws"}
	for in, want := range map[string]string{
		"arn:aws:dynamodb:ddblocal:000000000000:table/t1/stream/2026-01-02T03:04:05.678": "arn:aws:dynamodb:us-east-1:000000000000:table/t1/stream/2026-01-02T03:04:05.678",
		"arn:aws:dynamodb:ddblocal:000000000000:table/t1":                                "arn:aws:dynamodb:ddblocal:000000000000:table/t1",
		"arn:aws:sqs:us-east-1:000000000000:q":                                           "arn:aws:sqs:us-east-1:000000000000:q",
	} {
		if got := l.StreamARN(in); got != want {
			t.Errorf("StreamARN(%s) = %s, want %s", in, got, want)
		}
	}
}
