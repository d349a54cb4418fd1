package sim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/schema"
)

// dynamoBackend is the real DynamoDB adapter against the in-process
// model of the DynamoDB API (TTL deletion lagging up to 48 hours, the
// stream), with the work and dead-letter queues modelled on SQS. Every
// process has its own adapter instances, judging expiry by its own clock
// as a Lambda function does; the history is fed from the stream by the
// real stream feed, as the history function is. The processes and the
// feed reach the model over the wire (the SDK's whole request path); the
// simulator's own fault-free view reads through the model's direct path
// (ddbmodel.DirectConfig: the same adapter code and answers, without the
// JSON, the signing and the HTTP), since its audits read every live
// execution every ten virtual minutes, many times the runtime's own requests.
type dynamoBackend struct {
	w       *world
	model   *ddbmodel.Model
	clients awsclient.Clients
	names   schema.Names
	// god is the fault-free view on the true clock (on the direct path).
	god  view
	feed *dynamo.StreamFeed
}

func newDynamoBackend(w *world) (backend, error) {
	w.mu.Lock()
	seed := w.rng.Uint64()
	w.mu.Unlock()
	names := schema.Prefixed("sim")
	m := ddbmodel.New(ddbmodel.Options{Clock: clock.System{}, Seed: seed, MaxTTLLag: 48 * time.Hour, Fault: feedFaults(w, names)})
	b := &dynamoBackend{w: w, model: m, clients: m.Clients(), names: names}
	ctx := context.Background()
	if _, err := provision.CreateTables(ctx, b.clients.DynamoDB, schema.Tables(b.names)); err != nil {
		return nil, fmt.Errorf("sim: create the tables on the model: %w", err)
	}
	w.newQueues()
	prov, err := b.adapters(b.clients.DynamoDB, clock.System{})
	if err != nil {
		return nil, err
	}
	god, err := b.adapters(m.DirectClients().DynamoDB, clock.System{})
	if err != nil {
		return nil, err
	}
	b.god = view{state: god.state, payloads: god.payloads, recorder: god.recorder, history: god.history}
	h := prov.history.(*dynamo.History)
	if b.feed, err = dynamo.NewStreamFeed(b.clients.DynamoDBStreams, b.clients.DynamoDB, h, dynamo.StreamOptions{ExecutionTable: b.names.ExecutionTable,
		Then: dynamo.NewEventPublisher(w.eventSink(), simEventTypes, slog.New(slog.DiscardHandler))}); err != nil {
		return nil, err
	}
	// The history function, as its event source mapping invokes it: when
	// the stream has new records (looked at every minute), and again while
	// a failed batch waits for its retry (the event source retries it on
	// its own, new records or not).
	var seen uint64
	w.every(time.Minute, "history_feed", time.Time{}, func() {
		if n := m.StreamRecords(); n != seen || b.feed.Retrying() {
			seen = n
			w.async(func() { _, _ = b.feed.Poll(context.Background()) })
		}
	})
	return b, nil
}

// feedFaults is the model's fault hook: the history feed's requests (the
// stream reads, the history table's page and position writes) are
// throttled now and then, sometimes after the write landed, while the
// faults are on. The feed must retry them (a throttle is never a reason to
// skip a batch): the history invariant finds any event lost. The
// runtime's own requests meet their faults in the processes instead.
func feedFaults(w *world, names schema.Names) func(ddbmodel.Request) ddbmodel.Fault {
	return func(r ddbmodel.Request) ddbmodel.Fault {
		feed := r.Op == "GetRecords" || r.Op == "GetShardIterator" || (r.Op == "PutItem" && slices.Contains(r.Tables, names.HistoryTable))
		if !feed || w.settling || !w.chance(w.cfg.rates.feedError) {
			return ddbmodel.Fault{}
		}
		w.fault("history_feed_throttled")
		return ddbmodel.Fault{Err: ddbmodel.Throttled(), AfterApply: r.Op == "PutItem" && w.chance(0.5)}
	}
}

// adapters builds the DynamoDB adapters on client db and clock c.
func (b *dynamoBackend) adapters(db *dynamodb.Client, c clock.Clock) (providers, error) {
	st, err := dynamo.NewStateStore(db, dynamo.Options{ExecutionTable: b.names.ExecutionTable, Clock: c, DueShards: b.w.cfg.dueShards})
	if err != nil {
		return providers{}, err
	}
	h, err := dynamo.NewHistory(db, st, dynamo.HistoryOptions{Table: b.names.HistoryTable})
	if err != nil {
		return providers{}, err
	}
	dead := dynamo.NewDeadLetters(db, b.names.DeadLetterTable, c)
	return providers{
		state: st, payloads: dynamo.NewPayloadStore(db, b.names.PayloadTable, c), effects: dynamo.NewEffects(db, b.names.EffectTable, c),
		recorder: dead, lister: dead, history: h,
	}, nil
}

func (b *dynamoBackend) providers(p *proc) (providers, error) {
	prov, err := b.adapters(b.clients.DynamoDB, skewClock{p.skew})
	if err != nil {
		return providers{}, err
	}
	prov.dispatcher = &queueDispatcher{w: b.w, q: b.w.work}
	prov.publisher = &queuePublisher{q: b.w.dlq}
	return prov, nil
}

func (b *dynamoBackend) view() view { return b.god }

// parts counts the payload table's items that have not expired.
func (b *dynamoBackend) parts() int {
	c, _ := b.model.Count(b.names.PayloadTable)
	return c.Items - c.Expired
}

// catchUp applies the stream until it holds nothing new (the end of a
// run: the history is checked then).
func (b *dynamoBackend) catchUp() {
	// A read can come back empty while the shard has records past it (a
	// stream's GetRecords may, and a shard that rotated is listed at the
	// next description): poll until a few passes in a row find nothing.
	empty := 0
	for range 200 {
		if n, _ := b.feed.Poll(context.Background()); n > 0 {
			empty = 0
			continue
		}
		if empty++; empty >= 5 {
			return
		}
	}
}

func (b *dynamoBackend) processCrashed(*proc)   {}
func (b *dynamoBackend) close()                 {}
func (b *dynamoBackend) woken() <-chan struct{} { return nil }

// nothingDue asks the model directly (no request: the simulation asks
// this often) whether any shard of the sweep index holds a row due by by.
func (b *dynamoBackend) nothingDue(by time.Time) bool {
	for shard := range b.w.cfg.dueShards {
		first, ok := b.model.IndexFirst(b.names.ExecutionTable, schema.DueIndexName, ddbmodel.Value{T: ddbmodel.TypeN, S: strconv.Itoa(shard)})
		if !ok {
			continue
		}
		at, err := strconv.ParseInt(first[dynamo.AttrSweepAt].S, 10, 64)
		if err != nil || at <= by.UnixMilli() {
			return false
		}
	}
	return true
}
