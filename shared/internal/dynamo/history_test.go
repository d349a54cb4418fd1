package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// historyStack is an execution table (with its stream) and a history
// table of one test.
type historyStack struct {
	t       *testing.T
	clients awsclient.Clients
	state   *dynamo.StateStore
	hist    *dynamo.History
	exec    string
	table   string
}

func newHistoryStack(t *testing.T, mw ...func(*middleware.Stack) error) *historyStack {
	t.Helper()
	clients, _ := awstest.Clients(t)
	if len(mw) > 0 {
		cfg := clients.Config.Copy()
		cfg.APIOptions = append(cfg.APIOptions, mw...)
		clients = awsclient.FromConfig(cfg)
	}
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(n.ExecutionTable), schema.HistoryTable(n.HistoryTable))
	state, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dynamo.NewHistory(clients.DynamoDB, state, dynamo.HistoryOptions{Table: n.HistoryTable})
	if err != nil {
		t.Fatal(err)
	}
	return &historyStack{t: t, clients: clients, state: state, hist: h, exec: n.ExecutionTable, table: n.HistoryTable}
}

// image reads the execution's item as DynamoDB holds it (what a stream
// record's image is).
func (s *historyStack) image(k store.Key) map[string]types.AttributeValue {
	s.t.Helper()
	out, err := s.clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(s.exec),
		Key: map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: k.TenantID + "#" + store.Slot(k.ExecutionID)}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		s.t.Fatal(err)
	}
	return out.Item
}

// run writes one execution's lifecycle of steps steps through the store
// (submit, claim, each commit claiming the next step, success) and
// returns the changes its writes made, in order, as the stream carries
// them; record is called after each write.
func (s *historyStack) run(tenant, id string, steps int) []dynamo.Change {
	s.t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	row := store.Execution{TenantID: tenant, ExecutionID: id, PipelineID: "p", Status: store.Queued, Version: 1, StepName: "s0", Attempt: 1,
		NextDueAt: now, SweepAt: now.Add(time.Minute), CreateToken: "ct-" + id, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
		Input: payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 2, SHA256: payload.Digest([]byte("{}")), Inline: []byte("{}")}}
	var changes []dynamo.Change
	var prev map[string]types.AttributeValue
	snap := func() {
		cur := s.image(row.Key())
		changes = append(changes, dynamo.Change{Sequence: fmt.Sprint(len(changes)), Old: prev, New: cur})
		prev = cur
	}
	if _, _, err := s.state.CreateOrGet(ctx, store.CreateRequest{Execution: row}); err != nil {
		s.t.Fatal(err)
	}
	snap()
	got, err := s.state.Claim(ctx, store.ClaimRequest{Key: row.Key(), ExpectVersion: 1, Owner: "w1", Now: now, DueBy: now, TakeoverBy: now,
		LeaseUntil: now.Add(time.Minute), Attempt: 1})
	if err != nil {
		s.t.Fatal(err)
	}
	snap()
	for i := range steps {
		next := got
		next.UpdatedAt = now.Add(time.Duration(i+1) * time.Millisecond)
		next.LastTransitionKey = store.TransitionKey(id, i, 1)
		if i == steps-1 {
			next.Status, next.LeaseOwner, next.LeaseExpiresAt, next.SweepAt = store.Succeeded, "", time.Time{}, time.Time{}
		} else {
			next.StepIndex, next.StepName = i+1, fmt.Sprintf("s%d", i+1)
		}
		if got, err = s.state.Update(ctx, store.Guard{Key: row.Key(), Version: got.Version, LeaseOwner: "w1", KeepSweep: i < steps-1}, next); err != nil {
			s.t.Fatal(err)
		}
		snap()
	}
	return changes
}

// lifecycleTypes is what run's lifecycle of steps steps must read back as.
func lifecycleTypes(steps int) string {
	types := []string{"SUBMITTED", "STEP_STARTED"}
	for i := range steps {
		types = append(types, "STEP_SUCCEEDED")
		if i < steps-1 {
			types = append(types, "STEP_STARTED")
		}
	}
	return strings.Join(append(types, "SUCCEEDED"), " ")
}

// read returns the history's types, checking its numbering.
func (s *historyStack) read(k store.Key) string {
	s.t.Helper()
	evs, err := s.hist.History(context.Background(), k)
	if err != nil {
		s.t.Fatalf("History(%v): %v", k, err)
	}
	var types []string
	for i, e := range evs {
		if e.Seq != i+1 {
			s.t.Errorf("event %d has seq %d", i, e.Seq)
		}
		types = append(types, string(e.Type))
	}
	return strings.Join(types, " ")
}

// pages counts the history pages of an execution.
func (s *historyStack) pages(k store.Key) int {
	s.t.Helper()
	out, err := s.clients.DynamoDB.Query(context.Background(), &dynamodb.QueryInput{TableName: aws.String(s.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: k.TenantID + "#" + store.Slot(k.ExecutionID)}}})
	if err != nil {
		s.t.Fatal(err)
	}
	return len(out.Items)
}

// TestHistoryApplyIsIdempotent: a batch applied twice, then redelivered
// cut differently (a shorter prefix, then the rest, as a bisected retry
// delivers it), reads back as the lifecycle's events once each: a page is
// never replaced by one reaching less far, and repeats are dropped.
func TestHistoryApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	s := newHistoryStack(t)
	ctx := context.Background()
	k := store.Key{TenantID: "t1", ExecutionID: "e1"}
	changes := s.run(k.TenantID, k.ExecutionID, 4)
	// An expired item's removal, the meta item and an undecodable record
	// are no events.
	changes = append(changes,
		dynamo.Change{Sequence: "meta", New: map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: "#meta"}}},
		dynamo.Change{Sequence: "bad", New: map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: "t1#e1"}, dynamo.AttrVersion: &types.AttributeValueMemberS{Value: "x"}}},
		dynamo.Change{Sequence: "ttl", Old: changes[len(changes)-1].New})
	for _, batch := range [][]dynamo.Change{changes, changes, changes[:3], changes[3:], changes[1:4]} {
		if err := s.hist.Apply(ctx, batch); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	if got, want := s.read(k), lifecycleTypes(4); got != want {
		t.Fatalf("history after redeliveries:\n  %s\nwant\n  %s", got, want)
	}
	// The whole batch's page (from version 1), the rest's (from version 4)
	// and the last cut's (from version 2): three pages, none shrunk.
	if n := s.pages(k); n != 3 {
		t.Errorf("%d pages, want 3 (one per distinct first version)", n)
	}
	if _, err := s.hist.History(ctx, store.Key{TenantID: "t2", ExecutionID: "e1"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's history: err = %v, want ErrNotFound", err)
	}
}

// TestHistoryOfAReusedKeyIsItsOwn: an execution created anew under the key
// of an expired one (an idempotency key reused after the retention) reads
// only its own events, though the older pages are still in the table.
func TestHistoryOfAReusedKeyIsItsOwn(t *testing.T) {
	t.Parallel()
	s := newHistoryStack(t)
	k := store.Key{TenantID: "t1", ExecutionID: "e1"}
	first := s.run(k.TenantID, k.ExecutionID, 2)
	if err := s.hist.Apply(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	// The row expires and a new submit creates it again: a new create
	// token, version 1, a later creation time.
	fake := clock.NewFake(time.Now().Add(2 * time.Hour))
	later, err := dynamo.NewStateStore(s.clients.DynamoDB, dynamo.Options{ExecutionTable: s.exec, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	now := fake.Now().UTC().Truncate(time.Millisecond)
	row := store.Execution{TenantID: k.TenantID, ExecutionID: k.ExecutionID, PipelineID: "p", Status: store.Queued, Version: 1, StepName: "s0",
		Attempt: 1, NextDueAt: now, CreateToken: "ct-again", CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
		Input: payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 2, SHA256: payload.Digest([]byte("{}")), Inline: []byte("{}")}}
	if _, created, err := later.CreateOrGet(context.Background(), store.CreateRequest{Execution: row}); err != nil || !created {
		t.Fatalf("create over the expired row: created %v, err %v", created, err)
	}
	again := dynamo.Change{Sequence: "again", Old: first[len(first)-1].New, New: s.image(k)}
	if err := s.hist.Apply(context.Background(), []dynamo.Change{again}); err != nil {
		t.Fatal(err)
	}
	h, err := dynamo.NewHistory(s.clients.DynamoDB, later, dynamo.HistoryOptions{Table: s.table})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.History(context.Background(), k)
	if err != nil || len(evs) != 1 || evs[0].Type != history.Submitted || !evs[0].At.Equal(now) {
		t.Fatalf("history of the new execution = %+v, %v; want its one SUBMITTED", evs, err)
	}
}

// failPositions fails the feed's position writes while on is set: a
// process that dies after a batch's pages landed and before its position
// did.
func failPositions(on *atomic.Bool) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("failPositions",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if p, ok := in.Parameters.(*dynamodb.PutItemInput); ok && on.Load() {
					if pk, _ := p.Item[dynamo.AttrPK].(*types.AttributeValueMemberS); pk != nil && pk.Value == "#stream" {
						return middleware.InitializeOutput{}, middleware.Metadata{}, errors.New("injected: the process died before recording its position")
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

// TestStreamFeedRestartDoublesNothing reads the real stream of DynamoDB
// Local in small batches: a feed stores some batches, "dies" after the
// pages of one batch landed but before its position did, and a new feed
// (a restart: positions read back from the table) reads on from the last
// recorded position. Every execution's history is its events, once each,
// in order; the restart did read the unrecorded batch again.
func TestStreamFeedRestartDoublesNothing(t *testing.T) {
	t.Parallel()
	var dying atomic.Bool
	s := newHistoryStack(t, failPositions(&dying))
	const executions, steps = 4, 3
	for i := range executions {
		s.run("t1", fmt.Sprintf("e%d", i), steps)
	}
	// Each execution's create, claim and commits, and the meta item the
	// store's first create writes (its shard count).
	records := 1 + executions*(steps+2)
	newFeed := func() *dynamo.StreamFeed {
		f, err := dynamo.NewStreamFeed(s.clients.DynamoDBStreams, s.clients.DynamoDB, s.hist,
			dynamo.StreamOptions{ExecutionTable: s.exec, Limit: 3, ReadsPerShard: 1})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	ctx := context.Background()
	first := newFeed()
	applied := 0
	for range 2 {
		n, err := first.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		applied += n
	}
	if applied != 6 {
		t.Fatalf("two polls of 3 records applied %d records", applied)
	}
	dying.Store(true)
	if _, err := first.Poll(ctx); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("the dying poll: err = %v, want the injected failure", err)
	}
	dying.Store(false)
	restarted := newFeed()
	reread := 0
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := restarted.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll after the restart: %v", err)
		}
		reread += n
		if n == 0 && reread >= records-applied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted feed read %d records, want %d", reread, records-applied)
		}
	}
	if reread != records-applied {
		t.Errorf("the restarted feed read %d records, want %d (from the last recorded position: the unrecorded batch again)", reread, records-applied)
	}
	for i := range executions {
		k := store.Key{TenantID: "t1", ExecutionID: fmt.Sprintf("e%d", i)}
		if got, want := s.read(k), lifecycleTypes(steps); got != want {
			t.Errorf("history of %s:\n  %s\nwant\n  %s", k, got, want)
		}
	}
}

// TestFromStreamImage: every attribute type of a DynamoDB Streams image
// converts to the same DynamoDB attribute value.
func TestFromStreamImage(t *testing.T) {
	img := map[string]st.AttributeValue{
		"s": &st.AttributeValueMemberS{Value: "x"}, "n": &st.AttributeValueMemberN{Value: "12"},
		"b": &st.AttributeValueMemberB{Value: []byte{1}}, "t": &st.AttributeValueMemberBOOL{Value: true},
		"z": &st.AttributeValueMemberNULL{Value: true}, "ss": &st.AttributeValueMemberSS{Value: []string{"a"}},
		"ns": &st.AttributeValueMemberNS{Value: []string{"1"}}, "bs": &st.AttributeValueMemberBS{Value: [][]byte{{2}}},
		"m": &st.AttributeValueMemberM{Value: map[string]st.AttributeValue{"k": &st.AttributeValueMemberS{Value: "v"}}},
		"l": &st.AttributeValueMemberL{Value: []st.AttributeValue{&st.AttributeValueMemberN{Value: "3"}}},
	}
	got := dynamo.FromStreamImage(img)
	want := map[string]types.AttributeValue{
		"s": &types.AttributeValueMemberS{Value: "x"}, "n": &types.AttributeValueMemberN{Value: "12"},
		"b": &types.AttributeValueMemberB{Value: []byte{1}}, "t": &types.AttributeValueMemberBOOL{Value: true},
		"z": &types.AttributeValueMemberNULL{Value: true}, "ss": &types.AttributeValueMemberSS{Value: []string{"a"}},
		"ns": &types.AttributeValueMemberNS{Value: []string{"1"}}, "bs": &types.AttributeValueMemberBS{Value: [][]byte{{2}}},
		"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "v"}}},
		"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: "3"}}},
	}
	if fmt.Sprintf("%#v", flatten(got)) != fmt.Sprintf("%#v", flatten(want)) {
		t.Fatalf("FromStreamImage = %v, want %v", flatten(got), flatten(want))
	}
	if dynamo.FromStreamImage(nil) != nil {
		t.Fatal("no image must stay nil")
	}
}

// flatten renders attribute values for comparison.
func flatten(m map[string]types.AttributeValue) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		switch v := v.(type) {
		case *types.AttributeValueMemberM:
			out[k] = fmt.Sprint(flatten(v.Value))
		case *types.AttributeValueMemberL:
			out[k] = fmt.Sprintf("%#v", v.Value[0])
		default:
			out[k] = fmt.Sprintf("%#v", v)
		}
	}
	return out
}
