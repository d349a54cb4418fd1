package wiring_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// noBackoff retries at once.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// TestDynamoFaultsAreRetriedLikeRealErrors: with every attempt failed, a
// call makes the retryer's full number of attempts (each a logged
// fault), never reaches the endpoint, and surfaces as a throttling or
// 500 error that the DynamoDB store translates to store.ErrUnavailable.
func TestDynamoFaultsAreRetriedLikeRealErrors(t *testing.T) {
	t.Parallel()
	buf, log := logtest.New()
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"), // nothing listens: nothing may be sent
		Credentials: aws.AnonymousCredentials{},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.Backoff, o.RateLimiter = 3, noBackoff{}, ratelimit.None
		}),
		APIOptions: []func(*middleware.Stack) error{wiring.DynamoFaults(1, log)},
	})
	st, err := dynamo.NewStateStore(db, dynamo.Options{ExecutionTable: "e"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Get(context.Background(), store.Key{TenantID: "t", ExecutionID: "x"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get: %v, want store.ErrUnavailable", err)
	}
	// The store hides SDK types (it wraps their text): check the text.
	if !strings.Contains(err.Error(), "ProvisionedThroughputExceededException") && !strings.Contains(err.Error(), "InternalServerError") {
		t.Errorf("error %v is not an injected DynamoDB error", err)
	}
	if strings.Contains(err.Error(), "connect") {
		t.Errorf("the request was sent: %v", err)
	}
	if n := strings.Count(buf.String(), `"event":"fault_injected"`); n != 3 {
		t.Errorf("%d faults logged, want one per attempt (3):\n%s", n, buf.String())
	}
}

type recorder struct {
	mu   sync.Mutex
	sent []dispatch.Message
}

func (r *recorder) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, msgs...)
	return nil
}

func TestFaultyDispatcher(t *testing.T) {
	t.Parallel()
	msgs := []dispatch.Message{{Item: dispatch.WorkItem{TenantID: "t", ExecutionID: "a"}}, {Item: dispatch.WorkItem{TenantID: "t", ExecutionID: "b"}}}
	for _, tc := range []struct {
		name      string
		dup, drop float64
		want      int
	}{{"none", 0, 0, 2}, {"duplicate", 1, 0, 4}, {"drop", 0, 1, 0}} {
		rec := &recorder{}
		buf, log := logtest.New()
		d := &wiring.FaultyDispatcher{Inner: rec, DuplicateRate: tc.dup, DropRate: tc.drop, Logger: log}
		if err := d.Dispatch(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		if len(rec.sent) != tc.want {
			t.Errorf("%s: %d messages sent, want %d", tc.name, len(rec.sent), tc.want)
		}
		if tc.want != 2 && strings.Count(buf.String(), `"event":"fault_injected"`) != 2 {
			t.Errorf("%s: faults not logged once per message:\n%s", tc.name, buf.String())
		}
	}
}

// TestOpenWrapsTheDispatcherWhenFaultsAreSet: the faults.* keys are off
// by default, validated to 0..0.5 naming the key (testkeys.Load), and
// wrap the dispatcher when set.
func TestOpenWrapsTheDispatcherWhenFaultsAreSet(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	reg, _ := pipeline.NewRegistry()
	c := config.Default()
	c.StateProvider = "memory"
	keys, err := testkeys.Load(env(nil))
	if err != nil || keys.Faults.Any() {
		t.Fatalf("faults by default: %+v, %v", keys.Faults, err)
	}
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler), withFaults(keys.Faults))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Runtime.Dispatcher().(*wiring.FaultyDispatcher); ok {
		t.Error("faults are on by default")
	}
	_ = set.Close(context.Background())
	if _, err := testkeys.Load(env(map[string]string{"PIPELINE_ORCHESTRATOR_FAULTS_DISPATCH_DROP_RATE": "0.6"})); err == nil || !strings.Contains(err.Error(), "faults.dispatch-drop-rate") {
		t.Errorf("drop rate 0.6: %v, want an error naming the key", err)
	}
	keys, err = testkeys.Load(env(map[string]string{"PIPELINE_ORCHESTRATOR_FAULTS_DISPATCH_DROP_RATE": "0.1", "PIPELINE_ORCHESTRATOR_FAULTS_DISPATCH_DUPLICATE_RATE": "0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	set, err = open(context.Background(), c, reg, slog.New(slog.DiscardHandler), withFaults(keys.Faults))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close(context.Background())
	if fd, ok := set.Runtime.Dispatcher().(*wiring.FaultyDispatcher); !ok || fd.DropRate != 0.1 || fd.DuplicateRate != 0.5 {
		t.Errorf("dispatcher %T %+v, want a FaultyDispatcher with the configured rates", set.Runtime.Dispatcher(), set.Runtime.Dispatcher())
	}
}
