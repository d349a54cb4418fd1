package dynamo_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/store"
)

// TestThrottlingAndServerErrorsAreRetriedThenUnavailable: a DynamoDB that
// only throttles (or fails with 500) is retried by the SDK's retryer, and
// the store then reports store.ErrUnavailable, which callers treat as
// retryable, without any SDK error type.
func TestThrottlingAndServerErrorsAreRetriedThenUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"throttling", 400, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}`},
		{"provisioned throughput", 400, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}`},
		{"server error", 500, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"oops"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			db := dynamodb.New(dynamodb.Options{
				Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{},
				Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts = 3
					o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
				}),
				DisableValidateResponseChecksum: true,
			})
			st, err := dynamo.NewStateStore(db, dynamo.Options{ExecutionTable: "e"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Get(context.Background(), store.Key{TenantID: "t", ExecutionID: "x"})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("err = %v, want store.ErrUnavailable", err)
			}
			if calls.Load() != 3 {
				t.Fatalf("%d attempts, want 3 (the SDK's retries)", calls.Load())
			}
		})
	}
}
