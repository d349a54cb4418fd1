package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// Stack is one test's own tables and queues on the local AWS stack, with
// readers for checking what the processes did.
type Stack struct {
	// Clients reach the local stack.
	Clients awsclient.Clients
	// Names are the tables and queues.
	Names schema.Names
	// URLs are the queue URLs by queue name.
	URLs map[string]string
	// Store reads execution rows.
	Store *dynamo.StateStore
	// DeadLetters reads the dead-letter consumer's records.
	DeadLetters *dynamo.DeadLetters
}

// StackOption adjusts NewStack.
type StackOption func(*stackOptions)

type stackOptions struct {
	queues func(schema.Names) []schema.Queue
}

// WithQueues provisions the queues queues(names) returns instead of
// schema.Queues(names), for example a work queue with a small
// MaxReceiveCount. Queues must be listed after the queue they redrive to.
func WithQueues(queues func(n schema.Names) []schema.Queue) StackOption {
	return func(o *stackOptions) { o.queues = queues }
}

// NewStack provisions fresh tables and queues (awstest names; deleted
// when the test ends, after the processes started later are killed) or
// skips the test without the local stack.
func NewStack(t testing.TB, opts ...StackOption) *Stack {
	t.Helper()
	o := stackOptions{queues: schema.Queues}
	for _, opt := range opts {
		opt(&o)
	}
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(n)...)
	urls := awstest.Queues(t, clients, o.queues(n)...)
	st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	return &Stack{Clients: clients, Names: n, URLs: urls, Store: st,
		DeadLetters: dynamo.NewDeadLetters(clients.DynamoDB, n.DeadLetterTable, nil)}
}

// WorkQueueURL is the work queue's URL.
func (s *Stack) WorkQueueURL() string { return s.URLs[s.Names.WorkQueue] }

// DLQURL is the DLQ queue's URL.
func (s *Stack) DLQURL() string { return s.URLs[s.Names.DLQQueue] }

// PoisonQueueURL is the poison queue's URL.
func (s *Stack) PoisonQueueURL() string { return s.URLs[s.Names.PoisonQueue] }

// Settings are configuration keys by short name (config.ShortKey:
// "lease-ms", "item-reject.provider") and their values.
type Settings map[string]string

// GateTimings are the short timings of the HA gate: a 1.5 s lease, a
// sweep every second with 1 s grace, 2 retries 1 s apart, 1 s long polls
// and a 3 s visibility timeout, logging at info (the checks read
// lease_claimed and transition_committed events).
var GateTimings = Settings{
	"lease-ms": "1500", "sweep-interval": "1s", "sweep-grace": "1s",
	"max-retries": "2", "retry-delay": "1s", "retry-multiplier": "2",
	"sqs.wait-seconds": "1", "sqs.visibility-timeout": "3s", "log-level": "info",
}

// Env returns the environment of a `qasync serve` on the stack: the
// durable providers (DynamoDB state, SQS work queue and DLQ) on its tables
// and queues, strict startup, CLIENT_KEY_REQUIRED, tenant-source none,
// diag.drill enabled, a 1 s long poll, a
// sweep every second with 5 s grace and warn-level logs; then the
// settings, later ones winning. The process's own environment (the AWS
// endpoints of the local stack) is inherited, minus any
// PIPELINE_ORCHESTRATOR_* variable.
func (s *Stack) Env(settings ...Settings) []string {
	set := Settings{
		"state-provider": "dynamo", "dispatcher-provider": "sqs", "dlq-provider": "sqs",
		"queue-url": s.WorkQueueURL(), "dlq-url": s.DLQURL(),
		"dynamo.execution-table":         s.Names.ExecutionTable,
		"dynamo.execution-payload-table": s.Names.PayloadTable, "dynamo.dead-letter-table": s.Names.DeadLetterTable,
		"dynamo.effect-table": s.Names.EffectTable, "dynamo.history-table": s.Names.HistoryTable,
		"item-reject.provider": "sqs", "item-reject.queue-url": s.URLs[s.Names.RejectQueue],
		"idempotency-policy": "CLIENT_KEY_REQUIRED", "strict-startup": "true",
		// Strict startup refuses the X-Tenant-Id header; every request is
		// tenant "default". The tests submit diag.drill, off by default.
		"http.tenant-source": "none", "diag.enabled": "true",
		"sqs.wait-seconds": "1", "sweep-interval": "1s", "sweep-grace": "5s", "log-level": "warn",
	}
	return serveEnv(append([]Settings{set}, settings...)...)
}

// MemoryEnv returns the environment of a `qasync serve` that shares
// nothing: the memory providers (memory state, in-process dispatcher, log
// DLQ), tenant-source none, diag.drill enabled and warn-level logs; then
// the settings, later ones winning. It needs no local stack: RunChaos runs
// its crash-free reference on it. The process's own environment is
// inherited as in Stack.Env.
func MemoryEnv(settings ...Settings) []string {
	set := Settings{
		"state-provider": "memory", "dispatcher-provider": "event", "dlq-provider": "log",
		"http.tenant-source": "none", "diag.enabled": "true", "log-level": "warn",
	}
	return serveEnv(append([]Settings{set}, settings...)...)
}

// EmbeddedEnv returns the environment of a `qasync serve` on the
// embedded store in dir (every seam durable in that one directory; one
// process at a time), tenant-source none, diag.drill enabled, a sweep
// every second and warn-level logs; then the settings, later ones
// winning. It needs no local stack. The process's own environment is
// inherited as in Stack.Env.
func EmbeddedEnv(dir string, settings ...Settings) []string {
	set := Settings{
		"state-provider": "embedded", "embedded.data-dir": dir,
		"http.tenant-source": "none", "diag.enabled": "true", "sweep-interval": "1s", "log-level": "warn",
	}
	return serveEnv(append([]Settings{set}, settings...)...)
}

// serveEnv is the process's environment minus any PIPELINE_ORCHESTRATOR_*
// variable, plus the settings (later ones winning) as variables.
func serveEnv(settings ...Settings) []string {
	set := Settings{}
	for _, extra := range settings {
		maps.Copy(set, extra)
	}
	prefix, rejectPrefix := config.EnvName(config.KeyPrefix), config.EnvName(config.ItemRejectPrefix)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, prefix) || strings.HasPrefix(kv, rejectPrefix)
	})
	for _, k := range slices.Sorted(maps.Keys(set)) {
		env = append(env, config.EnvName(config.FullKey(k))+"="+set[k])
	}
	return env
}

// Row reads one execution row of tenant "default" (the tenant of requests
// without X-Tenant-Id).
func (s *Stack) Row(ctx context.Context, executionID string) (store.Execution, error) {
	return s.Store.Get(ctx, store.Key{TenantID: "default", ExecutionID: executionID})
}

// AwaitRow polls the row until ok accepts it or within has passed; it
// returns the last row read and whether ok accepted it.
func (s *Stack) AwaitRow(ctx context.Context, executionID string, within time.Duration, ok func(store.Execution) bool) (store.Execution, bool) {
	deadline := time.Now().Add(within)
	for {
		e, err := s.Row(ctx, executionID)
		if err == nil && ok(e) {
			return e, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return e, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CountItems counts a table's items with a consistent Scan (tests only:
// the runtime never scans).
func (s *Stack) CountItems(ctx context.Context, table string) (int, error) {
	return s.count(ctx, &dynamodb.ScanInput{TableName: aws.String(table)})
}

// CountExecutions counts the execution rows of the execution table (the
// table's meta item, which is no execution, left out) with a consistent
// Scan (tests only).
func (s *Stack) CountExecutions(ctx context.Context) (int, error) {
	return s.count(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Names.ExecutionTable),
		FilterExpression: aws.String("attribute_exists(#p)"), ExpressionAttributeNames: map[string]string{"#p": dynamo.AttrPipelineID}})
}

func (s *Stack) count(ctx context.Context, in *dynamodb.ScanInput) (int, error) {
	n := 0
	var start map[string]dbtypes.AttributeValue
	for {
		in.Select, in.ConsistentRead, in.ExclusiveStartKey = dbtypes.SelectCount, aws.Bool(true), start
		out, err := s.Clients.DynamoDB.Scan(ctx, in)
		if err != nil {
			return n, err
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n, nil
		}
		start = out.LastEvaluatedKey
	}
}

// DeadLetterRecords reads every record of the dead-letter table with a
// consistent Scan (tests only).
func (s *Stack) DeadLetterRecords(ctx context.Context) ([]deadletter.Record, error) {
	var recs []deadletter.Record
	var start map[string]dbtypes.AttributeValue
	for {
		out, err := s.Clients.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Names.DeadLetterTable),
			ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			return recs, err
		}
		for _, item := range out.Items {
			v, ok := item[dynamo.AttrRecord].(*dbtypes.AttributeValueMemberS)
			if !ok {
				return recs, fmt.Errorf("crashtest: dead-letter item without a string %s", dynamo.AttrRecord)
			}
			var r deadletter.Record
			if err := json.Unmarshal([]byte(v.Value), &r); err != nil {
				return recs, err
			}
			recs = append(recs, r)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return recs, nil
		}
		start = out.LastEvaluatedKey
	}
}

// Drain receives and deletes every message of the queue at url until a
// receive of up to one second returns nothing (at most limit messages).
func (s *Stack) Drain(ctx context.Context, url string, limit int) ([]sqstypes.Message, error) {
	var got []sqstypes.Message
	for len(got) < limit {
		out, err := s.Clients.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return got, err
		}
		if len(out.Messages) == 0 {
			return got, nil
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := s.Clients.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return got, err
			}
		}
	}
	return got, nil
}

// QueueDepth is the queue's approximate number of visible, in-flight and
// delayed messages.
func (s *Stack) QueueDepth(ctx context.Context, url string) (int, error) {
	out, err := s.Clients.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		var k int
		fmt.Sscan(v, &k)
		n += k
	}
	return n, nil
}
