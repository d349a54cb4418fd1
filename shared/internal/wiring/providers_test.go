package wiring_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
)

func TestOpenRefusesInvalidConfig(t *testing.T) {
	c := config.Default()
	c.StateProvider = "memory"
	c.SweepLimit = 0
	if _, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "sweep-limit") {
		t.Fatalf("err = %v, want one naming sweep-limit", err)
	}
}

// TestConfiguredZeroMeansZero: sweep-grace=0 and
// payload.inline-budget-bytes=0 reach the runtime as zero (they became the
// defaults before), and every key reaches its runtime setting.
func TestConfiguredZeroMeansZero(t *testing.T) {
	c := config.Default()
	c.StateProvider = "memory"
	c.SweepGrace, c.InlineBudgetBytes, c.ClockSkewTolerance = 0, 0, 0
	c.PipelineVersionWait, c.DispatchTimeout, c.ReleaseLimit = 3*time.Minute, 150*time.Millisecond, 4
	reg, _ := pipeline.NewRegistry()
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close(context.Background())
	got := set.Runtime.Config()
	if got.SweepGrace != 0 || got.InlineBudget != 0 || got.ClockSkewTolerance != 0 ||
		got.PipelineVersionWait != 3*time.Minute || got.DispatchTimeout != 150*time.Millisecond || got.ReleaseLimit != 4 {
		t.Fatalf("runtime config = %+v", got)
	}
	dc := config.Default()
	dc.StateProvider = "memory"
	def, err := open(context.Background(), dc, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close(context.Background())
	if g := def.Runtime.Config(); g.ClockSkewTolerance != 2*time.Second || g.SweepGrace != 10*time.Second || g.ReleaseLimit != 10 {
		t.Fatalf("default runtime config = %+v", g)
	}
}

func TestOpenMapsConfig(t *testing.T) {
	c := config.Default()
	c.StateProvider = "memory"
	c.Lease, c.MaxRetries = 1234e6, 7
	reg, _ := pipeline.NewRegistry()
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close(context.Background())
	got := set.Runtime.Config()
	if got.Lease != c.Lease || got.Retry.MaxRetries != 7 || got.InlineBudget != c.InlineBudgetBytes || string(got.IdempotencyPolicy) != c.IdempotencyPolicy {
		t.Fatalf("runtime config = %+v", got)
	}
	if _, ok := set.Seams.Dispatcher.(*memory.Dispatcher); !ok || len(set.Seams.Loops) != 0 {
		t.Fatalf("memory configuration built dispatcher %T and %d loops, want the in-process pool and none", set.Seams.Dispatcher, len(set.Seams.Loops))
	}
}

// TestStrictStartupNamesEveryMissingResource: strict durable startup with
// no tables and no queues fails with one error per key.
func TestStrictStartupNamesEveryMissingResource(t *testing.T) {
	t.Parallel()
	awstest.Require(t)
	n := awstest.Names(t) // never created
	c := durableConfig(n, "http://127.0.0.1:1/000000000000/"+n.WorkQueue, "http://127.0.0.1:1/000000000000/"+n.DLQQueue, "http://127.0.0.1:1/000000000000/"+n.RejectQueue)
	c.StrictStartup = true
	_, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("strict startup accepted missing tables and queues")
	}
	for _, key := range []string{"dynamo.execution-table", "dynamo.execution-payload-table", "dynamo.dead-letter-table", "dynamo.effect-table", "dynamo.history-table", "queue-url", "dlq-url", "item-reject.queue-url"} {
		if !strings.Contains(err.Error(), config.FullKey(key)+":") {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
}

// TestStrictStartupAcceptsProvisionedStack: the same checks pass once the
// schema's tables and queues exist.
func TestStrictStartupAcceptsProvisionedStack(t *testing.T) {
	t.Parallel()
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(n)...)
	urls := awstest.Queues(t, clients, schema.Queues(n)...)
	c := durableConfig(n, urls[n.WorkQueue], urls[n.DLQQueue], urls[n.RejectQueue])
	c.StrictStartup = true
	set, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("strict startup on a provisioned stack: %v", err)
	}
	defer set.Close(context.Background())
	// The poller, the DLQ and poison queues' consumers, the stream feed.
	if _, ok := set.Seams.Dispatcher.(*sqsbackend.Dispatcher); !ok || len(set.Seams.Loops) != 4 {
		t.Fatalf("sqs configuration built dispatcher %T and %d loops, want SQS and 4", set.Seams.Dispatcher, len(set.Seams.Loops))
	}
}

func durableConfig(n schema.Names, queueURL, dlqURL, rejectURL string) config.Config {
	c := config.Default()
	c.StateProvider, c.DispatcherProvider, c.DLQProvider = "dynamo", "sqs", "sqs"
	c.ExecutionTable, c.PayloadTable, c.DeadLetterTable = n.ExecutionTable, n.PayloadTable, n.DeadLetterTable
	c.EffectTable, c.HistoryTable = n.EffectTable, n.HistoryTable
	c.QueueURL, c.DLQURL = queueURL, dlqURL
	c.ItemRejectProvider, c.ItemRejectQueueURL = "sqs", rejectURL
	c.IdempotencyPolicy = "CLIENT_KEY_REQUIRED"
	c.TenantSource = "none" // strict startup refuses the X-Tenant-Id header
	return c
}

// TestStrictStartupRefusesInProcessProvidersBeforeAnyAWSCall: strict
// startup with state-provider dynamo refuses a log DLQ, the in-process
// dispatcher, a log reject sink, OPTIONAL_CLIENT_KEY and tenant-source
// header, one error naming each key, without calling AWS (no stack
// needed); the same configuration without strict startup is not refused
// for them.
func TestStrictStartupRefusesInProcessProvidersBeforeAnyAWSCall(t *testing.T) {
	// Any AWS call would go to a closed port and fail differently.
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	c := config.Default()
	c.StateProvider, c.StrictStartup = "dynamo", true // dlq-provider log, dispatcher-provider event, tenant-source header by default
	counter := awsclient.NewCounter()
	_, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler), withAPIOptions(counter.APIOption))
	if err == nil {
		t.Fatal("strict startup accepted in-process providers with state-provider dynamo")
	}
	for _, key := range []string{"dlq-provider", "dispatcher-provider", "item-reject.provider", "idempotency-policy", "http.tenant-source"} {
		if !strings.Contains(err.Error(), config.FullKey(key)+":") {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
	if strings.Contains(err.Error(), "dynamo.execution-table") {
		t.Errorf("resources were checked although the configuration was refused: %v", err)
	}
	if calls := counter.Snapshot(); len(calls) != 0 {
		t.Errorf("AWS calls before the refusal: %v", calls)
	}
}

// TestStrictStartupRefusesHeaderTenant: strict startup refuses
// tenant-source header on the memory providers too (qasync serve with
// strict-startup), and accepts none.
func TestStrictStartupRefusesHeaderTenant(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.StateProvider = "memory"
	c.StrictStartup = true
	_, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "pipeline.orchestrator.http.tenant-source:") {
		t.Fatalf("strict startup with tenant-source header: error %v, want one naming pipeline.orchestrator.http.tenant-source", err)
	}
	c.TenantSource = "none"
	set, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("strict startup with tenant-source none: %v", err)
	}
	_ = set.Close(context.Background())
}

// TestStrictStartupRefusesNonDurableRejectSink: with state-provider
// dynamo, strict startup refuses the log and memory Item Reject Sinks and
// names the key; without strict startup they are accepted.
func TestStrictStartupRefusesNonDurableRejectSink(t *testing.T) {
	t.Parallel()
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(n)...)
	urls := awstest.Queues(t, clients, schema.Queues(n)...)
	for _, provider := range []string{"log", "memory"} {
		c := durableConfig(n, urls[n.WorkQueue], urls[n.DLQQueue], "")
		c.ItemRejectProvider = provider
		c.StrictStartup = true
		_, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "pipeline.item-reject.provider:") {
			t.Fatalf("strict startup with item-reject.provider=%s: error %v, want one naming pipeline.item-reject.provider", provider, err)
		}
		c.StrictStartup = false
		set, err := open(context.Background(), c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("non-strict startup with item-reject.provider=%s: %v", provider, err)
		}
		_ = set.Close(context.Background())
	}
}

// TestLifecycleEventsArePublishedByTheProcessesThatOfferThem: with
// events.bus-name set, a process assembled with a Lifecycle part drains
// its store's outbox to EventBridge through it (the lifecycle_outbox
// loop), and one without starts and logs lifecycle_events_not_published.
func TestLifecycleEventsArePublishedByTheProcessesThatOfferThem(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.StateProvider, c.EventsBusName = "memory", "orders-bus"
	p := pipeline.Pipeline{ID: "t.one", Steps: []pipeline.Step{pipeline.NewStep("one", func(_ context.Context, _ pipeline.StepInfo, in any) (any, error) { return in, nil })}}
	reg, err := pipeline.NewRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	puts := make(chan *eventbridge.PutEventsInput, 16)
	opts := wiring.Options{Backends: map[string]backend.Backend{"memory": memory.Backend()}, Logger: slog.New(slog.DiscardHandler),
		Lifecycle: func(context.Context) (lifecycle.PutEventsAPI, error) { return putEventsFunc(puts), nil }}
	proc, err := wiring.Assemble(context.Background(), c, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	loops := make(chan struct{})
	go func() { defer close(loops); proc.RunLoops(ctx, wiring.LoopLifecycleOutbox) }()
	defer func() { cancel(); <-loops }()
	in, _ := payload.JSON(map[string]int{})
	if _, err := proc.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: "t", PipelineID: p.ID, IdempotencyKey: "k", Input: in}); err != nil {
		t.Fatal(err)
	}
	select {
	case put := <-puts:
		e := put.Entries[0]
		if aws.ToString(e.EventBusName) != "orders-bus" || aws.ToString(e.DetailType) != lifecycle.DetailTypeSucceeded {
			t.Errorf("entry bus %q, detail type %q", aws.ToString(e.EventBusName), aws.ToString(e.DetailType))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no terminal event reached EventBridge")
	}

	logs, log := logtest.New()
	opts.Lifecycle, opts.Logger = nil, log
	quiet, err := wiring.Assemble(context.Background(), c, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close(context.Background())
	if !strings.Contains(logs.String(), `"event":"lifecycle_events_not_published"`) {
		t.Errorf("no lifecycle_events_not_published warning:\n%s", logs.String())
	}
}

// putEventsFunc is an EventBridge that takes every entry, handing each
// request to puts.
type putEventsFunc chan *eventbridge.PutEventsInput

func (f putEventsFunc) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f <- in
	out := &eventbridge.PutEventsOutput{}
	for range in.Entries {
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: aws.String("e")})
	}
	return out, nil
}
