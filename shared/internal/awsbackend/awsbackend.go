// Package awsbackend is the DynamoDB + SQS provider as a backend.Backend
// (state-provider dynamo): the state store, the history, payloads, the
// effect log and the dead-letter records in DynamoDB (package dynamo),
// the work queue, the dead-letter queue and the item reject queue in SQS
// (package sqsbackend), on the clients of one awsclient.Session.
//
// New is what the Lambda functions run on: their event sources deliver
// the work items, dead letters and stream records, so it opens no loop.
// NewServing adds the loops a long-running process (qasync serve) runs in
// their place: the work queue's poller, the consumers of the dead-letter
// and poison queues, and the execution table's stream feed.
package awsbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// The names of NewServing's loops (backend.Loop.Name).
const (
	// LoopPoller is the work queue's poller.
	LoopPoller = "work_queue_poller"
	// LoopDeadLetters is a consumer of the DLQ queue or of the poison
	// queue.
	LoopDeadLetters = "dead_letter_consumer"
	// LoopStreamFeed is the execution table's stream feed into the
	// history table.
	LoopStreamFeed = "history_stream_feed"
)

// DefaultDrainTimeout is how long the poller of NewServing waits for
// in-flight transitions once its loop's context ends, before it cancels
// them (their leases are then handed back).
const DefaultDrainTimeout = 20 * time.Second

// ServingOptions tune NewServing.
type ServingOptions struct {
	// DrainTimeout replaces DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// New returns the backend of the Lambda functions: every seam on the
// session's DynamoDB and SQS clients, no loop.
func New(sess *awsclient.Session) backend.Backend {
	return &provider{clients: clientsOf(sess)}
}

// NewServing returns the backend of a long-running process: New's seams
// and the loops that stand in for the Lambda event sources (see
// servingLoops).
func NewServing(sess *awsclient.Session, o ServingOptions) backend.Backend {
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	c := clientsOf(sess)
	c.streams = func(ctx context.Context) (*dynamodbstreams.Client, error) {
		return awsclient.DynamoDBStreams(ctx, sess)
	}
	c.events = func(ctx context.Context) (lifecycle.PutEventsAPI, error) { return awsclient.EventBridge(ctx, sess) }
	return &provider{clients: c, loops: servingLoops, drain: o.DrainTimeout}
}

// clients are the session's clients the backend uses, as functions: the
// backend (a value held in an interface) never holds the session itself,
// whose type reaches every client (see awsclient.Session on reflection).
type clients struct {
	dynamoDB func(context.Context) (*dynamodb.Client, error)
	sqs      func(context.Context) (*sqs.Client, error)
	// streams is NewServing's only (the stream feed).
	streams func(context.Context) (*dynamodbstreams.Client, error)
	// events is the EventBridge client of the stream feed's lifecycle
	// events (NewServing only).
	events func(context.Context) (lifecycle.PutEventsAPI, error)
}

func clientsOf(sess *awsclient.Session) clients {
	return clients{
		dynamoDB: func(ctx context.Context) (*dynamodb.Client, error) { return awsclient.DynamoDB(ctx, sess) },
		sqs:      func(ctx context.Context) (*sqs.Client, error) { return awsclient.SQS(ctx, sess) },
	}
}

// provider is the DynamoDB + SQS backend.
type provider struct {
	clients clients
	// loops adds the serving loops to opened seams (nil: none).
	loops func(ctx context.Context, o *opened) error
	drain time.Duration
}

// opened is what Open built, for the serving loops.
type opened struct {
	clients clients
	env     backend.Env
	seams   *backend.Seams
	db      *dynamodb.Client
	sqs     *sqs.Client
	history *dynamo.History
	drain   time.Duration
}

// Open implements backend.Backend. Under strict startup it checks,
// concurrently, that the tables and queues exist as the schema defines
// them (every error names its key); what the configuration alone shows to
// be unfit is refused before, by the assembly, without an AWS call.
func (p *provider) Open(ctx context.Context, env backend.Env) (*backend.Seams, error) {
	c := env.Config
	db, err := p.clients.dynamoDB(ctx)
	if err != nil {
		return nil, fmt.Errorf("awsbackend: AWS configuration: %w", err)
	}
	var q *sqs.Client
	if c.DispatcherProvider == "sqs" || c.DLQProvider == "sqs" || c.ItemRejectProvider == "sqs" {
		if q, err = p.clients.sqs(ctx); err != nil {
			return nil, fmt.Errorf("awsbackend: AWS configuration: %w", err)
		}
	}
	if c.StrictStartup {
		if err := checkResources(ctx, c, db, q); err != nil {
			return nil, err
		}
	}
	state, err := dynamo.NewStateStore(db, dynamo.Options{ExecutionTable: c.ExecutionTable, DueShards: c.DueShards(), Clock: env.Clock})
	if err != nil {
		return nil, err
	}
	hist, err := dynamo.NewHistory(db, state, dynamo.HistoryOptions{
		Table: c.HistoryTable, Retention: time.Duration(c.ExecutionTTLDays) * 24 * time.Hour, Logger: env.Logger})
	if err != nil {
		return nil, err
	}
	s := &backend.Seams{
		State: state, History: hist,
		Payloads: dynamo.NewPayloadStore(db, c.PayloadTable, env.Clock),
		Effects:  dynamo.NewEffects(db, c.EffectTable, env.Clock),
		Recorder: dynamo.NewDeadLetters(db, c.DeadLetterTable, env.Clock),
	}
	if c.DispatcherProvider == "sqs" {
		s.Dispatcher = sqsbackend.NewDispatcher(q, c.QueueURL, sqsbackend.WithLogger(env.Logger),
			sqsbackend.WithUrgentLane(c.UrgentQueueURL, c.UrgentAt))
	}
	if c.DLQProvider == "sqs" {
		s.DeadLetters = sqsbackend.NewDLQ(q, c.DLQURL)
	}
	if c.ItemRejectProvider == "sqs" {
		s.Rejects = sqsbackend.NewRejects(q, c.ItemRejectQueueURL)
	}
	if p.loops != nil {
		if err := p.loops(ctx, &opened{clients: p.clients, env: env, seams: s, db: db, sqs: q, history: hist, drain: p.drain}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// checkResources verifies the tables and queues the configuration names,
// all at once (a cold start waits for the slowest answer, not their sum),
// naming the key of each problem.
func checkResources(ctx context.Context, c config.Config, db *dynamodb.Client, q *sqs.Client) error {
	type check struct {
		key string
		run func() error
	}
	table := func(t schema.Table) func() error {
		return func() error { return provision.CheckTables(ctx, db, []schema.Table{t}) }
	}
	queue := func(url string) func() error { return func() error { return provision.CheckQueue(ctx, q, url) } }
	checks := []check{
		{"dynamo.execution-table", table(schema.ExecutionTable(c.ExecutionTable))},
		{"dynamo.execution-payload-table", table(schema.PayloadTable(c.PayloadTable))},
		{"dynamo.dead-letter-table", table(schema.DeadLetterTable(c.DeadLetterTable))},
		{"dynamo.effect-table", table(schema.EffectTable(c.EffectTable))},
		{"dynamo.history-table", table(schema.HistoryTable(c.HistoryTable))},
	}
	if c.DispatcherProvider == "sqs" {
		checks = append(checks, check{"queue-url", queue(c.QueueURL)})
		if c.UrgentQueueURL != "" {
			checks = append(checks, check{"queue.urgent-url", queue(c.UrgentQueueURL)})
		}
	}
	if c.DLQProvider == "sqs" {
		checks = append(checks, check{"dlq-url", queue(c.DLQURL)})
	}
	if c.ItemRejectProvider == "sqs" {
		checks = append(checks, check{"item-reject.queue-url", queue(c.ItemRejectQueueURL)})
	}
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, ch := range checks {
		wg.Go(func() {
			if err := ch.run(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", config.FullKey(ch.key), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// servingLoops adds to o's seams the loops of a long-running process, in
// place of the Lambda event sources: with dispatcher-provider sqs the
// work queue's poller (calling Env.Work); with dlq-provider sqs the
// consumers of the DLQ queue and of the work queue's poison queue (the
// target of its RedrivePolicy, read with GetQueueAttributes; a work queue
// without one is logged as poison_queue_not_consumed), each calling
// Env.DeadLetter; and with history.stream-poller on, the execution
// table's stream feed into the history table.
func servingLoops(ctx context.Context, o *opened) error {
	c, log, s := o.env.Config, o.env.Logger, o.seams
	if c.DispatcherProvider == "sqs" {
		poller := sqsbackend.NewPoller(o.sqs, c.QueueURL, o.env.Work, sqsbackend.PollerOptions{
			WaitTimeSeconds: int32(c.SQSWaitSeconds), Concurrency: c.WorkerConcurrency,
			VisibilityTimeout: c.SQSVisibility, DrainTimeout: o.drain, Logger: log,
			UrgentURL: c.UrgentQueueURL,
		})
		s.Loops = append(s.Loops, backend.Loop{Name: LoopPoller, Run: poller.Run})
	}
	if c.DLQProvider == "sqs" {
		urls := []string{c.DLQURL}
		poison := ""
		if c.DispatcherProvider == "sqs" {
			u, err := sqsbackend.RedriveTargetURL(ctx, o.sqs, c.QueueURL)
			if err != nil {
				return fmt.Errorf("%s: %w", config.FullKey("queue-url"), err)
			}
			poison = u
		}
		if poison == "" {
			log.LogAttrs(ctx, slog.LevelInfo, "poison_queue_not_consumed", slog.String("event", "poison_queue_not_consumed"),
				slog.String("queue_url", c.QueueURL), slog.String("reason", "the work queue has no redrive policy (or the dispatcher is not sqs)"))
		} else if poison != c.DLQURL {
			urls = append(urls, poison)
		}
		for _, u := range urls {
			consumer := sqsbackend.NewConsumer(o.sqs, u, deadLetterBatches(o.env.DeadLetter), sqsbackend.ConsumerOptions{
				WaitTimeSeconds: int32(c.SQSWaitSeconds), VisibilityTimeout: c.SQSVisibility, Logger: log,
			})
			s.Loops = append(s.Loops, backend.Loop{Name: LoopDeadLetters, Run: consumer.Run})
		}
	}
	if c.HistoryStreamPoller {
		streams, err := o.clients.streams(ctx)
		if err != nil {
			return fmt.Errorf("awsbackend: AWS configuration: %w", err)
		}
		opts := dynamo.StreamOptions{ExecutionTable: c.ExecutionTable, Interval: c.HistoryPollInterval, Logger: log}
		// The lifecycle events: derived from the stream's images after the
		// history, at least once (the commit is the outbox).
		sink, types, err := lifecycle.Configured(ctx, c, o.clients.events, log)
		if err != nil {
			return err
		}
		if sink != nil {
			opts.Then = dynamo.NewEventPublisher(sink, types, log)
		}
		feed, err := dynamo.NewStreamFeed(streams, o.db, o.history, opts)
		if err != nil {
			return err
		}
		s.Loops = append(s.Loops, backend.Loop{Name: LoopStreamFeed, Run: feed.Run})
	}
	return nil
}

// deadLetterBatches hands each record of a consumed batch to record and
// reports the records it failed as batch item failures.
func deadLetterBatches(record func(context.Context, backend.DeadLetterMessage) error) sqsbackend.BatchHandler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		for _, m := range ev.Records {
			receives, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			if err := record(ctx, backend.DeadLetterMessage{ID: m.MessageId, Body: m.Body, Receives: receives}); err != nil {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return resp, nil
	}
}
