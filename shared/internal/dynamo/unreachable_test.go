package dynamo_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// closedEndpoint returns the URL of a loopback port nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// unreachableDB is a DynamoDB client whose endpoint refuses connections,
// with two attempts and no backoff so that the test is fast.
func unreachableDB(t *testing.T) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(closedEndpoint(t)), Credentials: aws.AnonymousCredentials{},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 2
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		}),
	})
}

// TestRefusedConnectionIsUnavailable: a DynamoDB that refuses connections
// (nothing listening on its endpoint) is store.ErrUnavailable, like
// throttling, for the state, payload, effect and dead-letter adapters;
// the end of the caller's context stays a context error.
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	db := unreachableDB(t)
	st, err := dynamo.NewStateStore(db, dynamo.Options{ExecutionTable: "e"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = st.Get(ctx, store.Key{TenantID: "t", ExecutionID: "x"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("state Get: %v, want store.ErrUnavailable", err)
	}
	ps := dynamo.NewPayloadStore(db, "p", nil)
	if _, err := ps.GetPart(ctx, "id", "part"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("payload GetPart: %v, want store.ErrUnavailable", err)
	}
	if err := ps.PutPart(ctx, payload.Part{PayloadID: "id", Name: "part", Data: []byte("x")}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("payload PutPart: %v, want store.ErrUnavailable", err)
	}
	done, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-done.Done()
	_, err = st.Get(done, store.Key{TenantID: "t", ExecutionID: "x"})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("state Get with an ended context: %v, want context.DeadlineExceeded", err)
	}
}

// nopDispatcher accepts work items and drops them.
type nopDispatcher struct{}

func (nopDispatcher) Dispatch(context.Context, ...dispatch.Message) error { return nil }

// TestSubmitToUnreachableDynamoIs503WithRetryAfter: an httpapi server on
// DynamoDB stores whose endpoint refuses connections answers a submit
// with 503 and Retry-After (the client retries with its Idempotency-Key),
// as for throttling, not with a 500.
func TestSubmitToUnreachableDynamoIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	db := unreachableDB(t)
	st, err := dynamo.NewStateStore(db, dynamo.Options{ExecutionTable: "e"})
	if err != nil {
		t.Fatal(err)
	}
	echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	})
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "echo", Steps: []pipeline.Step{echo}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	rt, err := engine.New(engine.Config{WorkerID: "test"}, engine.Deps{
		Registry: reg, Store: st, Payloads: dynamo.NewPayloadStore(db, "p", nil),
		Dispatcher: nopDispatcher{}, DeadLetter: memory.NewLogDLQ(log), Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(rt, httpapi.Options{Logger: log}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/pipelines/echo/executions", strings.NewReader(`{"a":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("submit: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if ct := resp.Header.Get("Content-Type"); ct != httpapi.ContentTypeProblem {
		t.Fatalf("Content-Type %q", ct)
	}
}
