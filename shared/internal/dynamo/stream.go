// The stream poller (NewStreamFeed): what the history Lambda function's
// event source mapping does in AWS, done by qasync serve against DynamoDB
// Local (or any table whose stream no function consumes): it reads the
// execution table's stream shard by shard, parents before children, and
// applies each batch to the history (History.Apply).

package dynamo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/qasync/qasync/shared/clock"
	s "github.com/qasync/qasync/shared/schema"
)

// StreamOptions configure a StreamFeed.
type StreamOptions struct {
	// ExecutionTable names the table whose stream is read (required).
	ExecutionTable string
	// Interval is how long Run waits after a pass that found no record
	// (or failed) before the next. Default 1s.
	Interval time.Duration
	// Limit bounds the records of one GetRecords call, 1 to 1000 (the
	// service's maximum, and the default): the memory one batch takes.
	Limit int32
	// ReadsPerShard bounds the GetRecords calls a pass makes on one shard
	// while it keeps returning records, so that a busy shard does not hold
	// the others back. Default 10.
	ReadsPerShard int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock tells the time of the shard list's age and of the positions'
	// expiry. Default clock.System{}.
	Clock clock.Clock
}

// StreamsAPI is what a StreamFeed calls of DynamoDB Streams:
// *dynamodbstreams.Client implements it (tests give a stream of their
// own, such as one whose records were trimmed).
type StreamsAPI interface {
	DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(context.Context, *dynamodbstreams.GetShardIteratorInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(context.Context, *dynamodbstreams.GetRecordsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// StreamFeed reads the execution table's stream into the history.
//
// It resumes where it stopped, without losing or doubling events: after a
// batch's pages are stored it records the shard's position (the batch's
// last sequence number) in the history table, one item per shard (PK
// "#stream", which no execution's key can be); a restart continues after
// that position, and a batch applied again because the process died
// between its pages and its position rewrites the same pages (Apply is
// idempotent; the reader drops repeats). A shard without a recorded
// position is read from its oldest record (TRIM_HORIZON, 24 hours of
// changes). Several feeds on one table are harmless, not useful: they
// write the same pages.
//
// A StreamFeed is used by one goroutine at a time (Run, or Poll in tests).
type StreamFeed struct {
	streams StreamsAPI
	db      *dynamodb.Client
	hist    *History
	opts    StreamOptions

	arn    string
	loaded bool
	// list is the stream's shards as last described, at listed; it is
	// described again after shardListTTL, or when a shard ended.
	list   []st.Shard
	listed time.Time
	pos    map[string]string // shard id -> last stored sequence number
	done   map[string]bool   // shards read to their end
	iters  map[string]string // shard id -> next shard iterator
}

// NewStreamFeed returns a feed of h from opts.ExecutionTable's stream.
func NewStreamFeed(streams StreamsAPI, db *dynamodb.Client, h *History, opts StreamOptions) (*StreamFeed, error) {
	if c, ok := streams.(*dynamodbstreams.Client); streams == nil || (ok && c == nil) || opts.ExecutionTable == "" || h == nil {
		return nil, errors.New("dynamohistory: a stream feed needs the execution table's name, its streams client and the history")
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Limit <= 0 || opts.Limit > 1000 {
		opts.Limit = 1000
	}
	if opts.ReadsPerShard <= 0 {
		opts.ReadsPerShard = 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	return &StreamFeed{streams: streams, db: db, hist: h, opts: opts,
		pos: map[string]string{}, done: map[string]bool{}, iters: map[string]string{}}, nil
}

// Run polls the stream until ctx ends; a pass that finds nothing new, or
// fails (logged as history_feed_failed), is followed by Interval of rest.
func (f *StreamFeed) Run(ctx context.Context) error {
	for {
		n, err := f.Poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			f.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "history_feed_failed", slog.String("event", "history_feed_failed"),
				slog.String("table", f.opts.ExecutionTable), slog.String("error", err.Error()))
		}
		if err != nil || n == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(f.opts.Interval):
			}
		}
	}
}

// Poll makes one pass over the stream's shards, parents before children:
// it reads each open shard (up to ReadsPerShard batches), applies every
// batch and records its position. It returns how many records it applied.
func (f *StreamFeed) Poll(ctx context.Context) (int, error) {
	if f.arn == "" {
		out, err := f.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(f.opts.ExecutionTable)})
		if err != nil {
			return 0, translate("describe the execution table", err)
		}
		f.arn = aws.ToString(out.Table.LatestStreamArn)
		if f.arn == "" {
			return 0, fmt.Errorf("dynamohistory: table %s has no stream (qasync provision adds it)", f.opts.ExecutionTable)
		}
		f.loaded = false
	}
	if now := f.opts.Clock.Now(); f.list == nil || now.Sub(f.listed) >= shardListTTL {
		shards, err := f.shards(ctx)
		if err != nil {
			return 0, err
		}
		f.list, f.listed = shards, now
	}
	shards := f.list
	if !f.loaded {
		if err := f.loadPositions(ctx); err != nil {
			return 0, err
		}
	}
	listed := map[string]bool{}
	for _, sh := range shards {
		listed[aws.ToString(sh.ShardId)] = true
	}
	total := 0
	for _, sh := range shards {
		id, parent := aws.ToString(sh.ShardId), aws.ToString(sh.ParentShardId)
		if f.done[id] || (parent != "" && listed[parent] && !f.done[parent]) {
			continue // read; or its parent is not (its records come first)
		}
		for range f.opts.ReadsPerShard {
			n, more, err := f.read(ctx, id)
			total += n
			if err != nil {
				return total, err
			}
			if !more {
				break
			}
		}
	}
	return total, nil
}

// shardListTTL is how long Poll uses a description of the stream's shards
// (DynamoDB Streams allows few DescribeStream calls a second; shards
// change every few hours).
const shardListTTL = 10 * time.Second

// shards lists the stream's shards.
func (f *StreamFeed) shards(ctx context.Context) ([]st.Shard, error) {
	var shards []st.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(f.arn)}
	for {
		out, err := f.streams.DescribeStream(ctx, in)
		var missing *st.ResourceNotFoundException
		if errors.As(err, &missing) {
			f.arn, f.list = "", nil // the stream was replaced: find the table's new one
		}
		if err != nil {
			return nil, fmt.Errorf("dynamohistory: describe stream: %w", err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if out.StreamDescription.LastEvaluatedShardId == nil {
			return shards, nil
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
}

// positionKey is the key of a shard's position item.
func (f *StreamFeed) positionKey(shard string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.AttrPK: str(streamPositionPK), s.AttrPage: str(f.arn + "|" + shard)}
}

// streamPositionPK is the partition key of the feed's positions in the
// history table: no execution's key starts with '#'.
const streamPositionPK = "#stream"

// loadPositions reads the recorded positions of this stream's shards.
func (f *StreamFeed) loadPositions(ctx context.Context) error {
	in := &dynamodb.QueryInput{
		TableName:                aws.String(f.hist.Table()),
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#pg, :arn)"),
		ExpressionAttributeNames: map[string]string{"#pk": s.AttrPK, "#pg": s.AttrPage},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(streamPositionPK), ":arn": str(f.arn + "|"),
		},
		ConsistentRead: aws.Bool(true),
	}
	for {
		out, err := f.db.Query(ctx, in)
		if err != nil {
			return translate("read the stream positions", err)
		}
		for _, item := range out.Items {
			r := &reader{item: item}
			shard := strings.TrimPrefix(r.str(s.AttrPage), f.arn+"|")
			f.pos[shard], f.done[shard] = r.str(s.AttrSequence), r.bool(s.AttrShardDone)
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	f.loaded = true
	return nil
}

// read reads one batch of a shard, applies it and records the position;
// more reports that the shard returned records (and may hold more).
func (f *StreamFeed) read(ctx context.Context, shard string) (n int, more bool, err error) {
	iter := f.iters[shard]
	if iter == "" {
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(f.arn), ShardId: aws.String(shard),
			ShardIteratorType: st.ShardIteratorTypeTrimHorizon}
		if seq := f.pos[shard]; seq != "" {
			in.ShardIteratorType, in.SequenceNumber = st.ShardIteratorTypeAfterSequenceNumber, aws.String(seq)
		}
		out, err := f.streams.GetShardIterator(ctx, in)
		var trimmed *st.TrimmedDataAccessException
		if errors.As(err, &trimmed) {
			// The recorded position is older than the stream keeps: what
			// lay between is gone. Read what there is.
			f.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "history_stream_trimmed", slog.String("event", "history_stream_trimmed"),
				slog.String("shard", shard), slog.String("position", f.pos[shard]))
			delete(f.pos, shard)
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("dynamohistory: shard iterator of %s: %w", shard, err)
		}
		iter = aws.ToString(out.ShardIterator)
	}
	out, err := f.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(f.opts.Limit)})
	var expired *st.ExpiredIteratorException
	var trimmed *st.TrimmedDataAccessException
	switch {
	case errors.As(err, &expired), errors.As(err, &trimmed):
		delete(f.iters, shard) // start again from the recorded position
		return 0, false, nil
	case err != nil:
		delete(f.iters, shard)
		return 0, false, fmt.Errorf("dynamohistory: get records of %s: %w", shard, err)
	}
	changes := make([]Change, len(out.Records))
	for i, r := range out.Records {
		if r.Dynamodb == nil {
			continue
		}
		changes[i] = Change{Sequence: aws.ToString(r.Dynamodb.SequenceNumber), Old: FromStreamImage(r.Dynamodb.OldImage), New: FromStreamImage(r.Dynamodb.NewImage)}
	}
	if err := f.hist.Apply(ctx, changes); err != nil {
		delete(f.iters, shard) // read the batch again from the recorded position
		return 0, false, err
	}
	closed := out.NextShardIterator == nil
	if len(changes) > 0 || closed {
		seq := f.pos[shard]
		if len(changes) > 0 {
			seq = changes[len(changes)-1].Sequence
		}
		if err := f.record(ctx, shard, seq, closed); err != nil {
			delete(f.iters, shard)
			return len(changes), false, err
		}
	}
	if closed {
		delete(f.iters, shard)
		f.done[shard] = true
		f.list = nil // its children may be new: describe the stream again
	} else {
		f.iters[shard] = aws.ToString(out.NextShardIterator)
	}
	return len(changes), len(changes) > 0 && !closed, nil
}

// record stores a shard's position (and whether it was read to its end).
// It expires after two days: the stream keeps records for one.
func (f *StreamFeed) record(ctx context.Context, shard, seq string, done bool) error {
	item := f.positionKey(shard)
	item[s.AttrShardDone] = boolean(done)
	item[s.AttrTTL] = seconds(f.opts.Clock.Now().Add(48 * time.Hour))
	if seq != "" {
		item[s.AttrSequence] = str(seq)
	}
	if _, err := f.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.hist.Table()), Item: item}); err != nil {
		return translate("record the stream position", err)
	}
	f.pos[shard] = seq
	return nil
}

// FromStreamImage converts a DynamoDB Streams image to DynamoDB attribute
// values (the two SDK packages have their own, identical, types).
func FromStreamImage(img map[string]st.AttributeValue) map[string]types.AttributeValue {
	if img == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(img))
	for k, v := range img {
		out[k] = fromStream(v)
	}
	return out
}

func fromStream(v st.AttributeValue) types.AttributeValue {
	switch v := v.(type) {
	case *st.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: v.Value}
	case *st.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: v.Value}
	case *st.AttributeValueMemberB:
		return &types.AttributeValueMemberB{Value: v.Value}
	case *st.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: v.Value}
	case *st.AttributeValueMemberNULL:
		return &types.AttributeValueMemberNULL{Value: v.Value}
	case *st.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: v.Value}
	case *st.AttributeValueMemberNS:
		return &types.AttributeValueMemberNS{Value: v.Value}
	case *st.AttributeValueMemberBS:
		return &types.AttributeValueMemberBS{Value: v.Value}
	case *st.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: FromStreamImage(v.Value)}
	case *st.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = fromStream(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}
