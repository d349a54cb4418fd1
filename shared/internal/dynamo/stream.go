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
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/store"
)

// StreamOptions configure a StreamFeed.
type StreamOptions struct {
	// ExecutionTable names the table whose stream is read (required).
	ExecutionTable string
	// Interval is how long Run waits after a pass that found no record
	// (or failed) before the next, and the first wait before a failed
	// batch is tried again. Default 1s.
	Interval time.Duration
	// BatchWindow is how long Run waits after a pass that applied
	// records without finding a backlog (no read returned a full batch)
	// before the next: the records of that time are read and applied as
	// one batch, one page per execution, where reading on at once would
	// make a page of the few records each read finds. Under load it is
	// what gathers an execution's writes into few pages: a 3-step
	// execution's five writes span a fraction of a second (and a queue
	// wait), and with no window the feed wrote three or four pages for
	// them (a PutItem each, about as many as the steps' own writes), with
	// a one-second window one or two (make bench-durable). It delays the
	// history by up to the window. Default Interval.
	BatchWindow time.Duration
	// Limit bounds the records of one GetRecords call, 1 to 1000 (the
	// service's maximum, and the default): the memory one batch takes.
	Limit int32
	// ReadsPerShard bounds the GetRecords calls a pass makes on one shard
	// while it keeps returning full batches (a backlog), so that a busy
	// shard does not hold the others back. Default 10.
	ReadsPerShard int
	// BatchAttempts bounds the attempts to apply a batch that fails for
	// good (see StreamFeed) before its records are skipped, logged as
	// history_batch_skipped. Default 5.
	BatchAttempts int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock tells the time of the shard list's age, of the positions'
	// expiry and of a failed batch's next attempt. Default clock.System{}.
	Clock clock.Clock
	// Then is applied each batch after the history (an EventPublisher:
	// the lifecycle events); its failure is the batch's, retried as the
	// history's. Nil: nothing.
	Then Applier
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
// A batch that cannot be applied is tried again, once a pass, waiting
// Interval and then twice as long each time (up to batchBackoffMax), while
// the other shards are read on; only the shard's children wait for it. A
// failure of an unavailable backend (store.ErrUnavailable: throttling, a
// 5xx, a network error) or a timeout is transient: the batch is tried
// until it is applied. Any other failure is for good (a page the history
// table refuses, such as an item over its size limit, or a key it does
// not take): after BatchAttempts of them the batch's records are skipped,
// logged as history_batch_skipped (an error with the shard, the batch's
// sequence range and the failure; the executions whose pages did land
// keep them), and the shard is read on.
//
// The stream keeps records for 24 hours. Whenever the feed finds that
// records it had not read are gone (a stored position older than the
// trim point, an iterator pointing at trimmed records, a shard with
// unread records or a parent it never finished that the stream no longer
// lists) it logs history_stream_trimmed (a warning with the shard, the
// cause and lost_after, the last sequence number applied: the records
// after it up to the oldest one there is, or up to the shard's end, are
// lost) and reads on from the oldest record there is. A feed started on
// a stream older than 24 hours logs it too, for the parents of the
// oldest shards: their records are lost to the history as well. What it
// cannot tell is a loss at the start of a shard it never read whose
// parent is still listed: a shard's StartingSequenceNumber is no record's
// (DynamoDB Local gives the stream's counter when the shard opened), so
// an oldest record past it proves nothing.
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
	state  map[string]*shardState // by shard id
	// backlog: the last pass left a shard whose last read returned a
	// full batch (Run reads on without a rest).
	backlog bool
	// retrying: the last pass left a shard's batch failed and waiting for
	// its next attempt (Retrying; read from other goroutines).
	retrying atomic.Bool
}

// shardState is what the feed knows of one shard.
type shardState struct {
	// pos is the last sequence number stored ("" for none).
	pos string
	// done: read to its end (or given up as gone).
	done bool
	// iter is the next shard iterator ("": get one).
	iter string
	// oldest: open the shard at its oldest record, not after pos (records
	// after pos were trimmed).
	oldest bool
	// tries counts the failed attempts of the batch at pos, fails those
	// that failed for good; next is when it may be tried again.
	tries, fails int
	next         time.Time
}

// batchBackoffMax bounds the wait between two attempts of a failed batch.
const batchBackoffMax = time.Minute

// NewStreamFeed returns a feed of h from opts.ExecutionTable's stream.
func NewStreamFeed(streams StreamsAPI, db *dynamodb.Client, h *History, opts StreamOptions) (*StreamFeed, error) {
	if c, ok := streams.(*dynamodbstreams.Client); streams == nil || (ok && c == nil) || opts.ExecutionTable == "" || h == nil {
		return nil, errors.New("dynamo: history: a stream feed needs the execution table's name, its streams client and the history")
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.BatchWindow <= 0 {
		opts.BatchWindow = opts.Interval
	}
	if opts.Limit <= 0 || opts.Limit > 1000 {
		opts.Limit = 1000
	}
	if opts.ReadsPerShard <= 0 {
		opts.ReadsPerShard = 10
	}
	if opts.BatchAttempts <= 0 {
		opts.BatchAttempts = 5
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	return &StreamFeed{streams: streams, db: db, hist: h, opts: opts, state: map[string]*shardState{}}, nil
}

// shard returns the state of shard id.
func (f *StreamFeed) shard(id string) *shardState {
	ss := f.state[id]
	if ss == nil {
		ss = &shardState{}
		f.state[id] = ss
	}
	return ss
}

// Run polls the stream until ctx ends; a pass that finds nothing new, or
// fails (logged as history_feed_failed), is followed by Interval of rest,
// one that applied records by BatchWindow, unless it left a backlog (a
// shard whose last read returned a full batch): then the next pass
// follows at once.
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
		if rest := f.rest(n, err); rest > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(rest):
			}
		}
	}
}

// rest is how long Run waits after a pass that applied n records and
// failed with err.
func (f *StreamFeed) rest(n int, err error) time.Duration {
	switch {
	case err != nil || n == 0:
		return f.opts.Interval
	case f.backlog:
		return 0
	}
	return f.opts.BatchWindow
}

// Poll makes one pass over the stream's shards, parents before children:
// it reads each open shard (again while a read returns a full batch, up
// to ReadsPerShard reads), applies every batch and records its position. A shard that fails (a batch that
// cannot be applied, a read that fails) ends its turn, and the others go
// on; a failed batch's shard waits out its backoff. It returns how many
// records it applied, and the failures of the pass.
func (f *StreamFeed) Poll(ctx context.Context) (int, error) {
	defer f.noteRetrying()
	if f.arn == "" {
		out, err := f.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(f.opts.ExecutionTable)})
		if err != nil {
			return 0, translate("describe the execution table", err)
		}
		f.arn = aws.ToString(out.Table.LatestStreamArn)
		if f.arn == "" {
			return 0, fmt.Errorf("dynamo: history: table %s has no stream (qasync provision adds it)", f.opts.ExecutionTable)
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
	if err := f.giveUpGone(ctx, shards, listed); err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	f.backlog = false
	for _, sh := range shards {
		id, parent := aws.ToString(sh.ShardId), aws.ToString(sh.ParentShardId)
		ss := f.shard(id)
		switch {
		case ctx.Err() != nil:
			return total, errors.Join(append(errs, ctx.Err())...)
		case ss.done, parent != "" && listed[parent] && !f.shard(parent).done:
			continue // read; or its parent is not (its records come first)
		case f.opts.Clock.Now().Before(ss.next):
			continue // a failed batch waits out its backoff
		}
		for i := range f.opts.ReadsPerShard {
			n, more, err := f.read(ctx, sh)
			total += n
			if err != nil {
				errs = append(errs, err)
				break
			}
			if !more {
				break
			}
			if i == f.opts.ReadsPerShard-1 {
				f.backlog = true // cut short: read on after the other shards
			}
		}
	}
	return total, errors.Join(errs...)
}

// giveUpGone finds the shards whose records the feed had not all read and
// that the stream no longer lists (every record of theirs aged out): a
// shard with a stored position that was not read to its end, and a
// parent of a listed shard that was not. It logs the loss, and records
// them as done, so that their children are read and the loss is logged
// once.
func (f *StreamFeed) giveUpGone(ctx context.Context, shards []st.Shard, listed map[string]bool) error {
	var gone []string
	for id, ss := range f.state {
		if !ss.done && ss.pos != "" && !listed[id] {
			gone = append(gone, id)
		}
	}
	for _, sh := range shards {
		if parent := aws.ToString(sh.ParentShardId); parent != "" && !listed[parent] && !f.shard(parent).done && !slices.Contains(gone, parent) {
			gone = append(gone, parent)
		}
	}
	for _, id := range gone {
		ss := f.shard(id)
		f.trimmed(ctx, id, "shard_gone", ss.pos)
		ss.done, ss.iter = true, ""
		if err := f.record(ctx, id, ss.pos, true); err != nil {
			return err
		}
	}
	return nil
}

// trimmed logs that records of shard after sequence number after ("":
// from its start) were trimmed before the feed read them.
func (f *StreamFeed) trimmed(ctx context.Context, shard, cause, after string) {
	f.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "history_stream_trimmed", slog.String("event", "history_stream_trimmed"),
		slog.String("table", f.opts.ExecutionTable), slog.String("shard", shard), slog.String("cause", cause),
		slog.String("lost_after", after))
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
			return nil, fmt.Errorf("dynamo: history: describe stream: %w", err)
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
	return map[string]types.AttributeValue{AttrPK: str(streamPositionPK), AttrPage: str(f.arn + "|" + shard)}
}

// streamPositionPK is the partition key of the feed's positions in the
// history table: no execution's key starts with '#'.
const streamPositionPK = "#stream"

// loadPositions reads the recorded positions of this stream's shards
// (what the feed knows of another stream is dropped).
func (f *StreamFeed) loadPositions(ctx context.Context) error {
	in := &dynamodb.QueryInput{
		TableName:                aws.String(f.hist.Table()),
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#pg, :arn)"),
		ExpressionAttributeNames: map[string]string{"#pk": AttrPK, "#pg": AttrPage},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(streamPositionPK), ":arn": str(f.arn + "|"),
		},
		ConsistentRead: aws.Bool(true),
	}
	state := map[string]*shardState{}
	for {
		out, err := f.db.Query(ctx, in)
		if err != nil {
			return translate("read the stream positions", err)
		}
		for _, item := range out.Items {
			r := &reader{item: item}
			shard := strings.TrimPrefix(r.str(AttrPage), f.arn+"|")
			state[shard] = &shardState{pos: r.str(AttrSequence), done: r.bool(AttrShardDone)}
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	f.state, f.loaded = state, true
	return nil
}

// open returns an iterator of sh: after the stored position, or at the
// oldest record when there is none. A position older than the trim point
// is a loss: it is logged, and the shard opened at its oldest record.
func (f *StreamFeed) open(ctx context.Context, sh st.Shard, ss *shardState) (string, error) {
	id := aws.ToString(sh.ShardId)
	for {
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(f.arn), ShardId: aws.String(id),
			ShardIteratorType: st.ShardIteratorTypeTrimHorizon}
		if ss.pos != "" && !ss.oldest {
			in.ShardIteratorType, in.SequenceNumber = st.ShardIteratorTypeAfterSequenceNumber, aws.String(ss.pos)
		}
		out, err := f.streams.GetShardIterator(ctx, in)
		var trimmed *st.TrimmedDataAccessException
		if errors.As(err, &trimmed) && in.SequenceNumber != nil {
			f.trimmed(ctx, id, "position_trimmed", ss.pos)
			ss.oldest = true
			continue
		}
		if err != nil {
			return "", fmt.Errorf("dynamo: history: shard iterator of %s: %w", id, err)
		}
		return aws.ToString(out.ShardIterator), nil
	}
}

// read reads one batch of a shard, applies it and records the position;
// more reports that the shard holds more now (the batch was full, or its
// iterator pointed at trimmed records and it opens again at its oldest
// one).
func (f *StreamFeed) read(ctx context.Context, sh st.Shard) (n int, more bool, err error) {
	id := aws.ToString(sh.ShardId)
	ss := f.shard(id)
	if ss.iter == "" {
		if ss.iter, err = f.open(ctx, sh, ss); err != nil {
			return 0, false, err
		}
	}
	out, err := f.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(ss.iter), Limit: aws.Int32(f.opts.Limit)})
	var expired *st.ExpiredIteratorException
	var trimmed *st.TrimmedDataAccessException
	switch {
	case errors.As(err, &trimmed):
		// Records the iterator pointed at (after the stored position, or
		// from the shard's start) aged out before it was used.
		f.trimmed(ctx, id, "iterator_trimmed", ss.pos)
		ss.iter, ss.oldest = "", true
		return 0, true, nil
	case errors.As(err, &expired):
		ss.iter = "" // start again from the recorded position
		return 0, false, nil
	case err != nil:
		ss.iter = ""
		return 0, false, fmt.Errorf("dynamo: history: get records of %s: %w", id, err)
	}
	changes := make([]Change, len(out.Records))
	for i, r := range out.Records {
		if r.Dynamodb == nil {
			continue
		}
		changes[i] = Change{Sequence: aws.ToString(r.Dynamodb.SequenceNumber), Old: FromStreamImage(r.Dynamodb.OldImage), New: FromStreamImage(r.Dynamodb.NewImage)}
	}
	if err := Then(f.hist, f.opts.Then).Apply(ctx, changes); err != nil {
		ss.iter = "" // read the batch again from the recorded position
		if !f.failed(ctx, id, ss, changes, err) {
			return 0, false, fmt.Errorf("dynamo: history: shard %s: %w", id, err)
		}
	}
	ss.tries, ss.fails, ss.next = 0, 0, time.Time{}
	closed := out.NextShardIterator == nil
	if len(changes) > 0 || closed {
		seq := ss.pos
		if len(changes) > 0 {
			seq = changes[len(changes)-1].Sequence
		}
		if err := f.record(ctx, id, seq, closed); err != nil {
			ss.iter = ""
			return len(changes), false, err
		}
		ss.oldest = false
	}
	if closed {
		ss.iter, ss.done = "", true
		f.list = nil // its children may be new: describe the stream again
	} else {
		ss.iter = aws.ToString(out.NextShardIterator)
	}
	return len(changes), len(out.Records) >= int(f.opts.Limit) && !closed, nil
}

// Retrying reports whether the last Poll left a batch that failed waiting
// for its next attempt: a caller that polls only when the stream has new
// records (as the simulation's stand-in for the history function's event
// source, which retries a failed batch on its own) must poll again until
// it is false, or the batch's records (their history pages and lifecycle
// events) wait for the next write to the table. Safe to call from any
// goroutine.
func (f *StreamFeed) Retrying() bool { return f.retrying.Load() }

// noteRetrying records whether a shard's batch waits for a retry.
func (f *StreamFeed) noteRetrying() {
	waiting := false
	for _, ss := range f.state {
		waiting = waiting || (!ss.done && ss.tries > 0)
	}
	f.retrying.Store(waiting)
}

// failed counts a failed attempt of a batch of shard and sets when it may
// be tried again. It reports whether the batch is to be skipped: it
// failed for good BatchAttempts times (then it logs history_batch_skipped).
func (f *StreamFeed) failed(ctx context.Context, shard string, ss *shardState, changes []Change, err error) (skip bool) {
	ss.tries++
	if !transient(err) {
		ss.fails++
	}
	if ss.fails >= f.opts.BatchAttempts && len(changes) > 0 {
		f.opts.Logger.LogAttrs(ctx, slog.LevelError, "history_batch_skipped", slog.String("event", "history_batch_skipped"),
			slog.String("table", f.opts.ExecutionTable), slog.String("shard", shard),
			slog.String("first_sequence", changes[0].Sequence), slog.String("last_sequence", changes[len(changes)-1].Sequence),
			slog.Int("records", len(changes)), slog.Int("attempts", ss.tries), slog.String("error", err.Error()))
		return true
	}
	ss.next = f.opts.Clock.Now().Add(min(f.opts.Interval<<min(ss.tries-1, 16), batchBackoffMax))
	return false
}

// transient reports whether a failure to apply a batch may pass by itself:
// an unavailable backend (throttling, a 5xx, the network) or a timeout.
func transient(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// record stores a shard's position (and whether it was read to its end).
// It expires after two days: the stream keeps records for one.
func (f *StreamFeed) record(ctx context.Context, shard, seq string, done bool) error {
	item := f.positionKey(shard)
	item[AttrShardDone] = boolean(done)
	item[AttrTTL] = seconds(f.opts.Clock.Now().Add(48 * time.Hour))
	if seq != "" {
		item[AttrSequence] = str(seq)
	}
	if _, err := f.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.hist.Table()), Item: item}); err != nil {
		return translate("record the stream position", err)
	}
	f.shard(shard).pos = seq
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
