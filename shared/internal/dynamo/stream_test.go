package dynamo_test

// The stream feed against a stream of the test's own (fakeStream): shards
// with parents, records that were trimmed, batches the history cannot
// store. DynamoDB Local keeps one shard per table and its records for as
// long as it runs, so these cases cannot be made on it; the history table
// and the feed's positions are DynamoDB Local's.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/store"
)

// fakeShard is one shard of a fakeStream.
type fakeShard struct {
	id, parent string
	records    []st.Record
	// trimmed records, the oldest ones, are gone (older than 24 hours).
	trimmed int
	// closed: the shard takes no more records (it has children).
	closed bool
	// gone: every record aged out and DescribeStream lists it no more.
	gone bool
}

// fakeStream is a DynamoDB stream held in memory: the three calls a
// StreamFeed makes (dynamo.StreamsAPI), over shards the test fills, closes
// and trims. Sequence numbers are 21 digits, increasing across the
// stream, as DynamoDB's are. An iterator is "<shard>|<index of the next
// record>".
type fakeStream struct {
	mu     sync.Mutex
	shards []*fakeShard
	seq    int
	// beforeGetRecords, when set, runs (under the lock) before each
	// GetRecords call: a test trims records between an iterator and its use.
	beforeGetRecords func()
	// reads counts the GetRecords calls.
	reads int
}

var _ dynamo.StreamsAPI = (*fakeStream)(nil)

// shard adds an open shard (parent "" for none).
func (f *fakeStream) shard(id, parent string) *fakeShard {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := &fakeShard{id: id, parent: parent}
	f.shards = append(f.shards, sh)
	return sh
}

// add appends changes to sh as stream records and returns their sequence
// numbers.
func (f *fakeStream) add(sh *fakeShard, changes ...dynamo.Change) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var seqs []string
	for _, c := range changes {
		f.seq++
		seq := fmt.Sprintf("%021d", f.seq*100)
		seqs = append(seqs, seq)
		sh.records = append(sh.records, st.Record{Dynamodb: &st.StreamRecord{SequenceNumber: aws.String(seq),
			OldImage: toStreamImage(c.Old), NewImage: toStreamImage(c.New)}})
	}
	return seqs
}

// change runs one of the stream's mutations under its lock.
func (f *fakeStream) change(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func (f *fakeStream) find(id string) *fakeShard {
	for _, sh := range f.shards {
		if sh.id == id && !sh.gone {
			return sh
		}
	}
	return nil
}

func (f *fakeStream) DescribeStream(_ context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	desc := &st.StreamDescription{StreamArn: in.StreamArn, StreamStatus: st.StreamStatusEnabled}
	for _, sh := range f.shards {
		if sh.gone {
			continue
		}
		out := st.Shard{ShardId: aws.String(sh.id), SequenceNumberRange: &st.SequenceNumberRange{}}
		if sh.parent != "" {
			out.ParentShardId = aws.String(sh.parent)
		}
		if len(sh.records) > 0 {
			out.SequenceNumberRange.StartingSequenceNumber = sh.records[0].Dynamodb.SequenceNumber
			if sh.closed {
				out.SequenceNumberRange.EndingSequenceNumber = sh.records[len(sh.records)-1].Dynamodb.SequenceNumber
			}
		}
		desc.Shards = append(desc.Shards, out)
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: desc}, nil
}

func (f *fakeStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.find(aws.ToString(in.ShardId))
	if sh == nil {
		return nil, &st.ResourceNotFoundException{Message: aws.String("no such shard")}
	}
	at := sh.trimmed
	switch in.ShardIteratorType {
	case st.ShardIteratorTypeTrimHorizon:
	case st.ShardIteratorTypeAfterSequenceNumber, st.ShardIteratorTypeAtSequenceNumber:
		i := sh.index(aws.ToString(in.SequenceNumber))
		if i < 0 {
			return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "no such sequence number in the shard"}
		}
		if i < sh.trimmed {
			return nil, &st.TrimmedDataAccessException{Message: aws.String("the sequence number is older than the trim point")}
		}
		if at = i; in.ShardIteratorType == st.ShardIteratorTypeAfterSequenceNumber {
			at = i + 1
		}
	default:
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "iterator type not simulated: " + string(in.ShardIteratorType)}
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(sh.id + "|" + strconv.Itoa(at))}, nil
}

// index is the index of the record with sequence number seq (whether
// trimmed or not), or -1.
func (sh *fakeShard) index(seq string) int {
	for i, r := range sh.records {
		if aws.ToString(r.Dynamodb.SequenceNumber) == seq {
			return i
		}
	}
	return -1
}

func (f *fakeStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.beforeGetRecords != nil {
		f.beforeGetRecords()
	}
	id, at, _ := strings.Cut(aws.ToString(in.ShardIterator), "|")
	i, err := strconv.Atoi(at)
	sh := f.find(id)
	switch {
	case err != nil:
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "not an iterator of this stream"}
	case sh == nil:
		return nil, &st.ResourceNotFoundException{Message: aws.String("no such shard")}
	case i < sh.trimmed:
		return nil, &st.TrimmedDataAccessException{Message: aws.String("the iterator points at trimmed records")}
	}
	end := min(i+int(aws.ToInt32(in.Limit)), len(sh.records))
	out := &dynamodbstreams.GetRecordsOutput{Records: sh.records[i:end]}
	if !sh.closed || end < len(sh.records) {
		out.NextShardIterator = aws.String(sh.id + "|" + strconv.Itoa(end))
	}
	return out, nil
}

// toStreamImage is dynamo.FromStreamImage's inverse (the types a stream
// record carries).
func toStreamImage(img map[string]types.AttributeValue) map[string]st.AttributeValue {
	if img == nil {
		return nil
	}
	out := make(map[string]st.AttributeValue, len(img))
	for k, v := range img {
		out[k] = toStream(v)
	}
	return out
}

func toStream(v types.AttributeValue) st.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return &st.AttributeValueMemberS{Value: v.Value}
	case *types.AttributeValueMemberN:
		return &st.AttributeValueMemberN{Value: v.Value}
	case *types.AttributeValueMemberB:
		return &st.AttributeValueMemberB{Value: v.Value}
	case *types.AttributeValueMemberBOOL:
		return &st.AttributeValueMemberBOOL{Value: v.Value}
	case *types.AttributeValueMemberSS:
		return &st.AttributeValueMemberSS{Value: v.Value}
	case *types.AttributeValueMemberNS:
		return &st.AttributeValueMemberNS{Value: v.Value}
	case *types.AttributeValueMemberBS:
		return &st.AttributeValueMemberBS{Value: v.Value}
	case *types.AttributeValueMemberM:
		return &st.AttributeValueMemberM{Value: toStreamImage(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]st.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = toStream(e)
		}
		return &st.AttributeValueMemberL{Value: l}
	}
	return &st.AttributeValueMemberNULL{Value: true}
}

// feedOn returns a feed of s's history from fs, logging to a buffer, on
// clk, with batches of up to limit records.
func (s *historyStack) feedOn(fs *fakeStream, clk clock.Clock, limit int32) (*dynamo.StreamFeed, *logtest.Buffer) {
	s.t.Helper()
	logs, log := logtest.New()
	f, err := dynamo.NewStreamFeed(fs, s.clients.DynamoDB, s.hist, dynamo.StreamOptions{ExecutionTable: s.exec, Limit: limit,
		Logger: log, Clock: clk})
	if err != nil {
		s.t.Fatal(err)
	}
	return f, logs
}

// poison is a change the history cannot store: the insert of an execution
// whose history page key is longer than DynamoDB takes (2048 bytes), so
// that the history table refuses its page whatever the attempt. Its
// input carries payloadMarker, which no log may show.
func poison(create dynamo.Change) dynamo.Change {
	img := make(map[string]types.AttributeValue, len(create.New))
	for k, v := range create.New {
		img[k] = v
	}
	img[dynamo.AttrPK] = &types.AttributeValueMemberS{Value: strings.Repeat("t", 2100) + "#poisoned"}
	img["marker"] = &types.AttributeValueMemberS{Value: payloadMarker}
	return dynamo.Change{New: img}
}

// payloadMarker stands for payload bytes in a stream record.
const payloadMarker = "PAYLOAD-BYTES-7f3a"

// batchSkipped is the history_batch_skipped event.
type batchSkipped struct {
	Level   string `json:"level"`
	Shard   string `json:"shard"`
	First   string `json:"first_sequence"`
	Last    string `json:"last_sequence"`
	Records int    `json:"records"`
	Error   string `json:"error"`
}

// TestStreamFeedSkipsABatchItCannotApply: shard a holds a batch the
// history table refuses every time (a permanent failure), and shard b,
// listed after it, an execution of its own. The feed retries the batch a
// bounded number of times, backing off, while it reads shard b; then it
// skips the batch, logging history_batch_skipped with the shard and the
// batch's sequence range (no payload bytes), and reads on: every other
// execution's history is whole, the other executions of the skipped
// batch included.
func TestStreamFeedSkipsABatchItCannotApply(t *testing.T) {
	t.Parallel()
	s := newHistoryStack(t)
	fs := &fakeStream{}
	a, b := fs.shard("shardId-a", ""), fs.shard("shardId-b", "")
	e1, e2, e3 := s.run("t1", "e1", 1), s.run("t1", "e2", 1), s.run("t1", "e3", 1)
	fs.add(a, e1...)
	bad := fs.add(a, poison(e1[0]), e3[0], e3[1])
	fs.add(a, e3[2:]...)
	fs.add(b, e2...)
	clk := clock.NewFake(time.Now())
	feed, logs := s.feedOn(fs, clk, 3)
	ctx := context.Background()
	var lastErr error
	for pass := range 12 {
		_, lastErr = feed.Poll(ctx)
		if pass == 0 {
			if got := s.read(store.Key{TenantID: "t1", ExecutionID: "e2"}); got != lifecycleTypes(1) {
				t.Fatalf("after the first pass, shard b (behind shard a's failing batch) is not applied: history of e2 %q", got)
			}
		}
		clk.Advance(2 * time.Minute) // past any backoff
	}
	if lastErr != nil {
		t.Fatalf("the feed still fails after skipping the batch: %v", lastErr)
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		if got := s.read(store.Key{TenantID: "t1", ExecutionID: id}); got != lifecycleTypes(1) {
			t.Errorf("history of %s:\n  %s\nwant\n  %s", id, got, lifecycleTypes(1))
		}
	}
	skipped, err := logtest.Events[batchSkipped](logs, "history_batch_skipped")
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 {
		t.Fatalf("%d history_batch_skipped events, want 1:\n%s", len(skipped), logs)
	}
	if sk := skipped[0]; sk.Level != "ERROR" || sk.Shard != "shardId-a" || sk.First != bad[0] || sk.Last != bad[2] || sk.Records != 3 ||
		!strings.Contains(sk.Error, "2048 bytes") {
		t.Errorf("history_batch_skipped %+v; want shard shardId-a, sequences %s to %s, 3 records, the table's refusal", sk, bad[0], bad[2])
	}
	if strings.Contains(logs.String(), payloadMarker) {
		t.Errorf("the logs show a record's payload bytes:\n%s", logs)
	}
	// The skip is recorded: a restarted feed does not read the batch again.
	again, againLogs := s.feedOn(fs, clk, 3)
	if n, err := again.Poll(ctx); err != nil || n != 0 {
		t.Fatalf("a restarted feed applied %d records, %v; want none (all stored or skipped)", n, err)
	}
	if strings.Contains(againLogs.String(), "history_batch_skipped") {
		t.Fatalf("the restarted feed skipped the batch again:\n%s", againLogs)
	}
}

// throttleHistory fails the history table's page writes with DynamoDB's
// throttling error while on counts down (a table short of capacity), and
// counts them in hits.
func throttleHistory(on, hits *atomic.Int64) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("throttleHistory",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if p, ok := in.Parameters.(*dynamodb.PutItemInput); ok {
					if pk, _ := p.Item[dynamo.AttrPK].(*types.AttributeValueMemberS); pk != nil && pk.Value != "#stream" && on.Add(-1) >= 0 {
						hits.Add(1)
						return middleware.InitializeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate of requests exceeds the allowed throughput."}
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

// TestStreamFeedRetriesThrottledBatches: while the history table throttles
// (store.ErrUnavailable), a batch is tried once a pass, backing off, far
// more often than a permanent failure would be, and never skipped; once
// the throttling ends it is applied.
func TestStreamFeedRetriesThrottledBatches(t *testing.T) {
	t.Parallel()
	var throttled, hits atomic.Int64
	s := newHistoryStack(t, throttleHistory(&throttled, &hits))
	fs := &fakeStream{}
	a := fs.shard("shardId-a", "")
	changes := s.run("t1", "e1", 2)
	fs.add(a, changes...)
	throttled.Store(1 << 30)
	clk := clock.NewFake(time.Now())
	feed, logs := s.feedOn(fs, clk, 100)
	ctx := context.Background()
	for pass := range 20 {
		if _, err := feed.Poll(ctx); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a pass while the table throttles: %v, want store.ErrUnavailable", err)
		}
		if pass == 0 {
			// The shard backs off: a pass at once does not try the batch.
			if n, err := feed.Poll(ctx); n != 0 || err != nil || hits.Load() != 1 {
				t.Fatalf("a pass within the backoff: %d records, %v, %d attempts; want none", n, err, hits.Load())
			}
		}
		clk.Advance(2 * time.Minute)
	}
	if n := hits.Load(); n != 20 {
		t.Errorf("20 passes tried the throttled batch %d times, want once a pass", n)
	}
	throttled.Store(0)
	if n, err := feed.Poll(ctx); err != nil || n != len(changes) {
		t.Fatalf("the pass after the throttling: %d records, %v; want the batch's %d", n, err, len(changes))
	}
	if got := s.read(store.Key{TenantID: "t1", ExecutionID: "e1"}); got != lifecycleTypes(2) {
		t.Errorf("history of e1:\n  %s\nwant\n  %s", got, lifecycleTypes(2))
	}
	if strings.Contains(logs.String(), "history_batch_skipped") {
		t.Errorf("a throttled batch was skipped:\n%s", logs)
	}
}

// TestStreamFeedBatchesWhatAWindowGathers: a pass reads a shard again
// only while its reads come back full (a backlog), and Run rests after
// every pass without a backlog: BatchWindow after one that applied
// records (what gathers an execution's writes into one page), Interval
// after one that found none or failed, no rest while the backlog lasts.
// (Before, a pass read a shard until a read came back empty, and Run
// read on at once after any pass that applied records: under load, a
// page for the few records each read found.)
func TestStreamFeedBatchesWhatAWindowGathers(t *testing.T) {
	t.Parallel()
	s := newHistoryStack(t)
	fs := &fakeStream{}
	a := fs.shard("shardId-a", "")
	changes := s.run("t1", "e1", 2) // 4 writes
	fs.add(a, changes...)
	logs, log := logtest.New()
	feed, err := dynamo.NewStreamFeed(fs, s.clients.DynamoDB, s.hist, dynamo.StreamOptions{ExecutionTable: s.exec,
		Limit: 3, ReadsPerShard: 1, Interval: time.Hour, BatchWindow: time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reads := func() int { n := 0; fs.change(func() { n = fs.reads }); return n }

	// A full batch of 3: the pass's one read is spent with records left.
	if n, err := feed.Poll(ctx); n != 3 || err != nil {
		t.Fatalf("first pass: %d records, %v; want 3", n, err)
	}
	if rest := feed.Rest(3, nil); rest != 0 {
		t.Errorf("after a pass cut short by a full batch: rest %s, want none", rest)
	}
	// The last record: a read that is not full ends the pass, no empty
	// read after it.
	if n, err := feed.Poll(ctx); n != 1 || err != nil || reads() != 2 {
		t.Fatalf("second pass: %d records, %v, %d reads in all; want 1 record in one read", n, err, reads())
	}
	if rest := feed.Rest(1, nil); rest != time.Minute {
		t.Errorf("after a pass that applied records without a backlog: rest %s, want the batch window 1m", rest)
	}
	if rest := feed.Rest(0, nil); rest != time.Hour {
		t.Errorf("after a pass that found nothing: rest %s, want the interval 1h", rest)
	}
	if rest := feed.Rest(3, errors.New("boom")); rest != time.Hour {
		t.Errorf("after a failed pass: rest %s, want the interval 1h", rest)
	}
	if got := s.read(store.Key{TenantID: "t1", ExecutionID: "e1"}); got != lifecycleTypes(2) {
		t.Errorf("history of e1:\n  %s\nwant\n  %s", got, lifecycleTypes(2))
	}
	if strings.Contains(logs.String(), "history_feed_failed") {
		t.Errorf("feed failed:\n%s", logs)
	}

	// The window defaults to the interval.
	def, err := dynamo.NewStreamFeed(fs, s.clients.DynamoDB, s.hist, dynamo.StreamOptions{ExecutionTable: s.exec, Interval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rest := def.Rest(1, nil); rest != 5*time.Second {
		t.Errorf("default batch window %s, want the interval 5s", rest)
	}
}

// streamTrimmed is the history_stream_trimmed event.
type streamTrimmed struct {
	Level     string `json:"level"`
	Shard     string `json:"shard"`
	Cause     string `json:"cause"`
	LostAfter string `json:"lost_after"`
}

// trims returns the history_stream_trimmed events logged, checking that
// each is a warning.
func trims(t *testing.T, logs *logtest.Buffer) []streamTrimmed {
	t.Helper()
	evs, err := logtest.Events[streamTrimmed](logs, "history_stream_trimmed")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Level != "WARN" {
			t.Errorf("history_stream_trimmed at level %s, want WARN", ev.Level)
		}
	}
	return evs
}

// drain polls feed until a pass applies nothing; an error fails the test.
func drain(t *testing.T, feed *dynamo.StreamFeed) {
	t.Helper()
	for range 10 {
		n, err := feed.Poll(context.Background())
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("10 passes kept finding records")
}

// TestStreamFeedWarnsOfTrimmedRecords: the feed comes back after more
// than 24 hours. Whichever way it finds that records it had not read were
// trimmed (a closed parent shard gone from the stream, a closed parent
// whose stored position is older than the trim point, an iterator that
// points at trimmed records), it logs history_stream_trimmed (warn, the
// shard and what is known of the lost range) once, and reads on from the
// oldest record there is.
func TestStreamFeedWarnsOfTrimmedRecords(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	k := func(id string) store.Key { return store.Key{TenantID: "t1", ExecutionID: id} }

	t.Run("parent gone", func(t *testing.T) {
		t.Parallel()
		// The feed read the parent; while it was down the parent took more
		// records, closed, its child took over, and the parent's records
		// all aged out: DescribeStream lists only the child.
		s := newHistoryStack(t)
		fs := &fakeStream{}
		parent := fs.shard("shardId-p1", "")
		read := fs.add(parent, s.run("t1", "p1-a", 1)...)
		drain(t, first(s, fs, clk))
		fs.add(parent, s.run("t1", "p1-b", 1)...)
		child := fs.shard("shardId-p1-child", "shardId-p1")
		fs.add(child, s.run("t1", "p1-c", 1)...)
		fs.change(func() { parent.closed, parent.gone = true, true })
		feed, logs := s.feedOn(fs, clk, 100)
		drain(t, feed)
		if evs := trims(t, logs); len(evs) != 1 || evs[0].Shard != "shardId-p1" || evs[0].LostAfter != read[len(read)-1] {
			t.Fatalf("history_stream_trimmed events %+v; want one of shard shardId-p1, lost after %s (the stored position)", evs, read[len(read)-1])
		}
		if got := s.read(k("p1-c")); got != lifecycleTypes(1) {
			t.Errorf("history of the child's execution: %q", got)
		}
		drain(t, feed)
		if len(trims(t, logs)) != 1 {
			t.Errorf("the next pass logged the loss again:\n%s", logs)
		}
		restarted, restartedLogs := s.feedOn(fs, clk, 100)
		drain(t, restarted)
		if evs := trims(t, restartedLogs); len(evs) != 0 {
			t.Errorf("a restarted feed logged the loss again: %+v", evs)
		}
	})

	t.Run("position older than the trim point", func(t *testing.T) {
		t.Parallel()
		s := newHistoryStack(t)
		fs := &fakeStream{}
		parent := fs.shard("shardId-p3", "")
		read := fs.add(parent, s.run("t1", "p3-a", 1)...)
		drain(t, first(s, fs, clk))
		lost := fs.add(parent, s.run("t1", "p3-b", 1)...)
		fs.add(parent, s.run("t1", "p3-c", 1)...)
		child := fs.shard("shardId-p3-child", "shardId-p3")
		fs.add(child, s.run("t1", "p3-d", 1)...)
		fs.change(func() { parent.closed, parent.trimmed = true, parent.index(lost[len(lost)-1])+1 })
		feed, logs := s.feedOn(fs, clk, 100)
		drain(t, feed)
		if evs := trims(t, logs); len(evs) != 1 || evs[0].Shard != "shardId-p3" || evs[0].LostAfter != read[len(read)-1] {
			t.Fatalf("history_stream_trimmed events %+v; want one of shard shardId-p3, lost after %s", evs, read[len(read)-1])
		}
		for _, id := range []string{"p3-c", "p3-d"} {
			if got := s.read(k(id)); got != lifecycleTypes(1) {
				t.Errorf("history of %s: %q", id, got)
			}
		}
	})

	t.Run("iterator trimmed before its use", func(t *testing.T) {
		t.Parallel()
		s := newHistoryStack(t)
		fs := &fakeStream{}
		open := fs.shard("shardId-p4", "")
		lost := fs.add(open, s.run("t1", "p4-a", 1)...)
		fs.add(open, s.run("t1", "p4-b", 1)...)
		fs.beforeGetRecords = func() { open.trimmed, fs.beforeGetRecords = len(lost), nil }
		feed, logs := s.feedOn(fs, clk, 100)
		if n, err := feed.Poll(context.Background()); err != nil || n != 3 {
			t.Fatalf("the pass whose iterator was trimmed: %d records, %v; want the 3 left, in this pass", n, err)
		}
		if evs := trims(t, logs); len(evs) != 1 || evs[0].Shard != "shardId-p4" || evs[0].LostAfter != "" {
			t.Fatalf("history_stream_trimmed events %+v; want one of shard shardId-p4, lost from its start", evs)
		}
		if got := s.read(k("p4-b")); got != lifecycleTypes(1) {
			t.Errorf("history of p4-b: %q", got)
		}
	})
}

// first is the feed that ran before the outage.
func first(s *historyStack, fs *fakeStream, clk clock.Clock) *dynamo.StreamFeed {
	f, _ := s.feedOn(fs, clk, 100)
	return f
}
