package localcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
)

// StreamMapping is a DynamoDB stream event source mapping
// (AWS::Lambda::EventSourceMapping on a table's stream): it reads the
// table's stream and invokes Function with batches of its records, as
// events.DynamoDBEvent, the way Lambda does.
//
// Like Lambda with ParallelizationFactor 1, it reads every shard at once,
// one batch per shard at a time, in order, and a child shard only once
// its parent was read to its end. Its positions are kept in memory: a
// cloud started again reads from StartingPosition again (TRIM_HORIZON:
// the stream's last 24 hours, again), where Lambda resumes from its
// checkpoints.
//
// Failures follow Lambda's documented behaviour for stream sources:
//   - a successful invocation (with ReportBatchItemFailures: one without
//     batchItemFailures) moves past the batch;
//   - with ReportBatchItemFailures, a response naming records of the
//     batch (itemIdentifier: a sequence number) keeps the records before
//     the lowest one and retries from it (a retry attempt); a response
//     naming no record of the batch, an empty itemIdentifier or a response
//     that is not a DynamoDBEventResponse fails the whole batch;
//   - a failed invocation (a handler error, a crash, a timeout) fails the
//     whole batch; with BisectOnError a failed batch of more than one
//     record is split in two and the halves are tried in order, which
//     does not count as a retry;
//   - a batch that failed MaxRetryAttempts retries (-1: unbounded, until
//     the cloud closes) is skipped, after one invocation record is sent to
//     OnFailureQueueURL when set (the JSON document Lambda sends an
//     on-failure destination of a stream source, naming the shard and the
//     batch's sequence numbers, never the records).
//
// Retries wait 100 ms, doubling up to 5 s. MaximumRecordAgeInSeconds,
// tumbling windows, filters and the 6 MB payload limit are not emulated.
type StreamMapping struct {
	// Function is the function it invokes (e.g. History).
	Function string `json:"function"`
	// Table is the table whose stream it reads (its LatestStreamArn, from
	// DescribeTable); the table must have its stream enabled.
	Table string `json:"table"`
	// BatchSize is the most records of one invocation, 1 to 10000.
	// Default DefaultStreamBatchSize (100).
	BatchSize int `json:"batchSize"`
	// BatchingWindow is MaximumBatchingWindowInSeconds: records are
	// gathered for up to this long from the first one read (or until
	// BatchSize of them, or the shard's end) before the function is
	// invoked; 0 invokes it with what one GetRecords returned. At most
	// 300 s.
	BatchingWindow time.Duration `json:"batchingWindow"`
	// ReportBatchItemFailures is FunctionResponseTypes:
	// [ReportBatchItemFailures]: the function's batchItemFailures are
	// honoured (otherwise its response is ignored).
	ReportBatchItemFailures bool `json:"reportBatchItemFailures"`
	// BisectOnError is BisectBatchOnFunctionError.
	BisectOnError bool `json:"bisectOnError"`
	// MaxRetryAttempts is MaximumRetryAttempts, -1 to 10000: the retries
	// of a failed batch before it is skipped; -1 retries until the cloud
	// closes (Lambda: until the records expire). Zero is zero retries.
	MaxRetryAttempts int `json:"maxRetryAttempts"`
	// OnFailureQueueURL is DestinationConfig.OnFailure, an SQS queue URL
	// ("": none). It needs Options.SQS.
	OnFailureQueueURL string `json:"onFailureQueueUrl"`
	// StartingPosition is StartTrimHorizon (the default) or StartLatest.
	StartingPosition string
}

// Starting positions of a StreamMapping.
const (
	// StartTrimHorizon reads each shard from its oldest record.
	StartTrimHorizon = "TRIM_HORIZON"
	// StartLatest reads the shards open when the cloud starts from their
	// newest record on, skipping the shards already closed (their
	// children are read from their start).
	StartLatest = "LATEST"
)

// Defaults and bounds of a StreamMapping.
const (
	DefaultStreamBatchSize = 100
	maxStreamBatchSize     = 10000
	maxBatchingWindow      = 300 * time.Second
	maxStreamRetries       = 10000
)

// Pacing of the stream pollers.
const (
	// streamPollInterval: Lambda polls each shard four times a second.
	streamPollInterval = 250 * time.Millisecond
	// streamDescribeInterval is how often the shard list is read again
	// (and at once when a shard ends).
	streamDescribeInterval = time.Second
	streamBackoffMin       = 100 * time.Millisecond
	streamBackoffMax       = 5 * time.Second
	// getRecordsLimit is the most records GetRecords returns.
	getRecordsLimit = 1000
)

// streamDefaults checks the stream mappings and fills their defaults.
func (o *Options) streamDefaults() error {
	if len(o.Streams) == 0 {
		return nil
	}
	switch {
	case o.DynamoDB == nil:
		return errors.New("localcloud: Options.DynamoDB is required for the stream event source mappings (Options.Streams)")
	case o.DynamoDBStreams == nil:
		return errors.New("localcloud: Options.DynamoDBStreams is required for the stream event source mappings (Options.Streams)")
	}
	o.Streams = slices.Clone(o.Streams)
	for i := range o.Streams {
		m := &o.Streams[i]
		if !slices.Contains(Functions, m.Function) {
			return fmt.Errorf("localcloud: stream mapping %d: unknown function %q (want one of %v)", i, m.Function, Functions)
		}
		if m.Table == "" {
			return fmt.Errorf("localcloud: stream mapping %d (%s): Table is required", i, m.Function)
		}
		if m.BatchSize == 0 {
			m.BatchSize = DefaultStreamBatchSize
		}
		if m.BatchSize < 1 || m.BatchSize > maxStreamBatchSize {
			return fmt.Errorf("localcloud: stream mapping %s <- %s: BatchSize %d is not within 1..%d", m.Function, m.Table, m.BatchSize, maxStreamBatchSize)
		}
		if m.BatchingWindow < 0 || m.BatchingWindow > maxBatchingWindow {
			return fmt.Errorf("localcloud: stream mapping %s <- %s: BatchingWindow %v is not within 0..%v", m.Function, m.Table, m.BatchingWindow, maxBatchingWindow)
		}
		if m.MaxRetryAttempts < -1 || m.MaxRetryAttempts > maxStreamRetries {
			return fmt.Errorf("localcloud: stream mapping %s <- %s: MaxRetryAttempts %d is not within -1..%d", m.Function, m.Table, m.MaxRetryAttempts, maxStreamRetries)
		}
		switch m.StartingPosition {
		case "":
			m.StartingPosition = StartTrimHorizon
		case StartTrimHorizon, StartLatest:
		default:
			return fmt.Errorf("localcloud: stream mapping %s <- %s: StartingPosition %q (want %s or %s)", m.Function, m.Table, m.StartingPosition, StartTrimHorizon, StartLatest)
		}
		if m.OnFailureQueueURL != "" && o.SQS == nil {
			return fmt.Errorf("localcloud: stream mapping %s <- %s: Options.SQS is required for its on-failure destination", m.Function, m.Table)
		}
	}
	return nil
}

// streamMapping is a StreamMapping of an enabled function, resolved.
type streamMapping struct {
	StreamMapping
	streamARN   string
	functionARN string
}

// streamMappings resolves the stream ARNs of the enabled functions'
// stream mappings.
func (c *Cloud) streamMappings(ctx context.Context) ([]*streamMapping, error) {
	var ms []*streamMapping
	for _, sm := range c.opts.Streams {
		f := c.fns[sm.Function]
		if f == nil {
			continue
		}
		out, err := c.opts.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(sm.Table)})
		if err != nil {
			return nil, fmt.Errorf("localcloud: stream mapping %s <- %s: %w", sm.Function, sm.Table, err)
		}
		spec := out.Table.StreamSpecification
		arn := aws.ToString(out.Table.LatestStreamArn)
		if arn == "" || spec == nil || !aws.ToBool(spec.StreamEnabled) {
			return nil, fmt.Errorf("localcloud: stream mapping %s <- %s: the table has no stream enabled", sm.Function, sm.Table)
		}
		ms = append(ms, &streamMapping{StreamMapping: sm, streamARN: arn,
			functionARN: fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", c.opts.Region, c.opts.AccountID, f.opts.Name)})
	}
	return ms, nil
}

// pollStream runs one stream mapping until the cloud closes: it lists
// the stream's shards and starts a reader for each shard whose parent is
// finished (or no longer listed).
func (c *Cloud) pollStream(m *streamMapping) {
	ctx := c.pollCtx
	log := c.log.With(slog.String("function", m.Function), slog.String("table", m.Table), slog.String("stream_arn", m.streamARN))
	started := map[string]bool{}
	done := map[string]bool{}
	finished := make(chan string)
	first, failures := true, 0
	for ctx.Err() == nil {
		shards, err := c.describeShards(ctx, m.streamARN)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			log.LogAttrs(ctx, slog.LevelWarn, "stream_read_failed", slog.String("event", "stream_read_failed"),
				slog.String("call", "DescribeStream"), slog.String("error", err.Error()), slog.Int("consecutive_failures", failures))
			sleepCtx(ctx, backoff(failures))
			continue
		}
		failures = 0
		listed := make(map[string]bool, len(shards))
		for _, sh := range shards {
			listed[aws.ToString(sh.ShardId)] = true
		}
		if first && m.StartingPosition == StartLatest {
			// LATEST: what the closed shards hold is before the start.
			for _, sh := range shards {
				if id := aws.ToString(sh.ShardId); sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil {
					started[id], done[id] = true, true
				}
			}
		}
		for _, sh := range shards {
			id := aws.ToString(sh.ShardId)
			if started[id] {
				continue
			}
			if p := aws.ToString(sh.ParentShardId); p != "" && listed[p] && !done[p] {
				continue // lineage order: the parent first
			}
			pos := st.ShardIteratorTypeTrimHorizon
			if first && m.StartingPosition == StartLatest {
				pos = st.ShardIteratorTypeLatest
			}
			started[id] = true
			r := &shardReader{c: c, m: m, log: log.With(slog.String("shard_id", id)), shard: id, start: pos}
			c.glue.Go(func() {
				if r.run(ctx) {
					select {
					case finished <- id:
					case <-ctx.Done():
					}
				}
			})
		}
		first = false
		t := time.NewTimer(streamDescribeInterval)
		select {
		case id := <-finished:
			done[id] = true
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// describeShards lists the stream's shards, every page.
func (c *Cloud) describeShards(ctx context.Context, arn string) ([]st.Shard, error) {
	var shards []st.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)}
	for {
		out, err := c.opts.DynamoDBStreams.DescribeStream(ctx, in)
		if err != nil {
			return nil, err
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if out.StreamDescription.LastEvaluatedShardId == nil {
			return shards, nil
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
}

// backoff is the wait after n consecutive failures: 100 ms doubling up to
// 5 s.
func backoff(n int) time.Duration {
	return min(streamBackoffMin<<min(max(n-1, 0), 10), streamBackoffMax)
}

// shardReader reads one shard into batches and delivers them in order.
type shardReader struct {
	c     *Cloud
	m     *streamMapping
	log   *slog.Logger
	shard string
	// start is where the shard is opened while nothing was delivered.
	start st.ShardIteratorType
	// checkpoint is the last sequence number delivered (or skipped).
	checkpoint string
}

// run reads the shard until its end (reporting true) or until the cloud
// closes (false).
func (r *shardReader) run(ctx context.Context) bool {
	streams := r.c.opts.DynamoDBStreams
	var (
		iter      string
		pending   []st.Record
		windowEnd time.Time
		closed    bool
		failures  int
	)
	for ctx.Err() == nil {
		full := false
		if !closed {
			if iter == "" {
				var err error
				if iter, err = r.iterator(ctx); err != nil {
					if ctx.Err() != nil {
						return false
					}
					failures++
					r.readFailed(ctx, "GetShardIterator", err, failures)
					sleepCtx(ctx, backoff(failures))
					continue
				}
				// The iterator starts after the checkpoint: what was
				// read past it is read again.
				pending, windowEnd = nil, time.Time{}
			}
			limit := min(r.m.BatchSize-len(pending), getRecordsLimit)
			out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(int32(limit))})
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
				iter = ""
				var trimmed *st.TrimmedDataAccessException
				if errors.As(err, &trimmed) {
					// The records after the checkpoint are gone: read on
					// from the oldest there is.
					r.checkpoint, r.start = "", st.ShardIteratorTypeTrimHorizon
				}
				var expired *st.ExpiredIteratorException
				if !errors.As(err, &expired) {
					failures++
					r.readFailed(ctx, "GetRecords", err, failures)
					sleepCtx(ctx, backoff(failures))
				}
				continue
			}
			failures = 0
			if len(out.Records) > 0 && windowEnd.IsZero() {
				windowEnd = time.Now().Add(r.m.BatchingWindow)
			}
			for _, rec := range out.Records {
				if rec.Dynamodb != nil && rec.Dynamodb.SequenceNumber != nil {
					pending = append(pending, rec)
				}
			}
			full = len(out.Records) >= limit
			if out.NextShardIterator == nil {
				closed = true
			} else {
				iter = aws.ToString(out.NextShardIterator)
			}
		}
		if len(pending) > 0 && (len(pending) >= r.m.BatchSize || closed || !time.Now().Before(windowEnd)) {
			n := min(len(pending), r.m.BatchSize)
			if !r.deliver(ctx, pending[:n]) {
				return false
			}
			r.checkpoint = aws.ToString(pending[n-1].Dynamodb.SequenceNumber)
			pending, windowEnd = pending[n:], time.Time{}
			if len(pending) > 0 {
				windowEnd = time.Now()
			}
			continue
		}
		if closed && len(pending) == 0 {
			return true
		}
		if full {
			continue
		}
		wait := streamPollInterval
		if !windowEnd.IsZero() {
			wait = max(min(wait, time.Until(windowEnd)), time.Millisecond)
		}
		sleepCtx(ctx, wait)
	}
	return false
}

// iterator opens the shard after the checkpoint, or at the start position
// when nothing was delivered yet.
func (r *shardReader) iterator(ctx context.Context) (string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(r.m.streamARN), ShardId: aws.String(r.shard), ShardIteratorType: r.start}
	if r.checkpoint != "" {
		in.ShardIteratorType, in.SequenceNumber = st.ShardIteratorTypeAfterSequenceNumber, aws.String(r.checkpoint)
	}
	out, err := r.c.opts.DynamoDBStreams.GetShardIterator(ctx, in)
	if err != nil {
		return "", err
	}
	if r.start == st.ShardIteratorTypeLatest && r.checkpoint == "" {
		// LATEST was where the mapping started: once it has an iterator,
		// one opened again must not skip what came after it.
		r.start = st.ShardIteratorTypeTrimHorizon
	}
	return aws.ToString(out.ShardIterator), nil
}

func (r *shardReader) readFailed(ctx context.Context, call string, err error, failures int) {
	r.log.LogAttrs(ctx, slog.LevelWarn, "stream_read_failed", slog.String("event", "stream_read_failed"),
		slog.String("call", call), slog.String("error", err.Error()), slog.Int("consecutive_failures", failures))
}

// batchAttempt is a batch being delivered: its records, the retries it
// used and the invocations its records were in.
type batchAttempt struct {
	recs    []st.Record
	retries int
	invokes int
	// status and functionError describe its last invocation (the
	// on-failure record's responseContext).
	status        int
	functionError string
}

// deliver invokes the function with a batch until it is handled or
// skipped (true), or the cloud closes (false).
func (r *shardReader) deliver(ctx context.Context, batch []st.Record) bool {
	c, m := r.c, r.m
	queue := []*batchAttempt{{recs: batch}}
	for len(queue) > 0 {
		if ctx.Err() != nil {
			return false
		}
		a := queue[0]
		payload, err := json.Marshal(streamEvent(m, c.opts.Region, a.recs))
		if err != nil { // cannot happen: the event holds strings and numbers
			r.log.LogAttrs(ctx, slog.LevelError, "stream_batch_failed", slog.String("event", "stream_batch_failed"),
				slog.Int("records", len(a.recs)), slog.String("reason", "marshal: "+err.Error()))
			return false
		}
		start := time.Now()
		out, err := c.Invoke(c.invokeCtx, m.Function, payload)
		took := time.Since(start)
		a.invokes++
		var reason string
		switch {
		case errors.Is(err, ErrClosed) || c.invokeCtx.Err() != nil:
			return false
		case err != nil:
			reason = err.Error()
			a.status, a.functionError = 200, "Unhandled"
			var ie *InvokeError
			if errors.As(err, &ie) && ie.StatusCode != 0 {
				a.status = ie.StatusCode
			}
			// Lambda's documentation (Retain discarded records for a
			// DynamoDB event source): "BisectBatchOnFunctionError ...
			// splits a failed batch into two smaller batches ...
			// Splitting batches doesn't consume the retry quota." The
			// halves keep the retries and invocations counted so far.
			if m.BisectOnError && len(a.recs) > 1 {
				half := len(a.recs) / 2
				r.log.LogAttrs(ctx, slog.LevelWarn, "stream_batch_bisected", slog.String("event", "stream_batch_bisected"),
					slog.Int("records", len(a.recs)), slog.Int("first_half", half), slog.Int("second_half", len(a.recs)-half),
					slog.String("reason", reason), slog.Float64("duration_ms", msf(took)))
				left := &batchAttempt{recs: a.recs[:half], retries: a.retries, invokes: a.invokes}
				right := &batchAttempt{recs: a.recs[half:], retries: a.retries, invokes: a.invokes}
				queue = append([]*batchAttempt{left, right}, queue[1:]...)
				continue
			}
		default:
			a.status, a.functionError = 200, ""
			from, ferr := r.firstFailed(out, a.recs)
			switch {
			case ferr != nil:
				reason = ferr.Error()
			case from < 0:
				r.log.LogAttrs(ctx, slog.LevelInfo, "stream_batch_handled", slog.String("event", "stream_batch_handled"),
					slog.Int("records", len(a.recs)), slog.Float64("duration_ms", msf(took)))
				queue = queue[1:]
				continue
			default:
				// The records before the first failed one are done.
				reason = fmt.Sprintf("batch item failure at record %d of %d", from+1, len(a.recs))
				if from > 0 {
					r.log.LogAttrs(ctx, slog.LevelInfo, "stream_batch_handled", slog.String("event", "stream_batch_handled"),
						slog.Int("records", from), slog.Float64("duration_ms", msf(took)))
				}
				a.recs = a.recs[from:]
			}
		}
		r.log.LogAttrs(ctx, slog.LevelWarn, "stream_batch_failed", slog.String("event", "stream_batch_failed"),
			slog.Int("records", len(a.recs)), slog.String("reason", reason), slog.Int("attempt", a.retries+1),
			slog.Float64("duration_ms", msf(took)))
		if m.MaxRetryAttempts >= 0 && a.retries >= m.MaxRetryAttempts {
			r.discard(ctx, a)
			queue = queue[1:]
			continue
		}
		a.retries++
		sleepCtx(ctx, backoff(a.retries))
	}
	return true
}

// firstFailed reads the function's response: the index of the first
// record to retry from, -1 for none, or an error when the whole batch
// failed. Without ReportBatchItemFailures the response is not read.
func (r *shardReader) firstFailed(out []byte, recs []st.Record) (int, error) {
	if !r.m.ReportBatchItemFailures {
		return -1, nil
	}
	index := make(map[string]int, len(recs))
	ids := make(map[string]bool, len(recs))
	for i, rec := range recs {
		seq := aws.ToString(rec.Dynamodb.SequenceNumber)
		index[seq], ids[seq] = i, true
	}
	failed, err := batchItemFailures(out, ids)
	if err != nil {
		return 0, errors.New(strings.ReplaceAll(err.Error(), "SQSEventResponse", "DynamoDBEventResponse"))
	}
	from := -1
	for seq := range failed {
		if i := index[seq]; from < 0 || i < from {
			from = i
		}
	}
	return from, nil
}

// StreamFailureRecord is the invocation record Lambda sends a stream
// source's on-failure destination (see "Retain discarded records for a
// DynamoDB event source in Lambda" in the Lambda developer guide).
type StreamFailureRecord struct {
	RequestContext struct {
		RequestID              string `json:"requestId"`
		FunctionARN            string `json:"functionArn"`
		Condition              string `json:"condition"`
		ApproximateInvokeCount int    `json:"approximateInvokeCount"`
	} `json:"requestContext"`
	ResponseContext struct {
		StatusCode      int    `json:"statusCode"`
		ExecutedVersion string `json:"executedVersion"`
		FunctionError   string `json:"functionError,omitempty"`
	} `json:"responseContext"`
	Version            string `json:"version"`
	Timestamp          string `json:"timestamp"`
	DDBStreamBatchInfo struct {
		ShardID                         string `json:"shardId"`
		StartSequenceNumber             string `json:"startSequenceNumber"`
		EndSequenceNumber               string `json:"endSequenceNumber"`
		ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
		ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
		BatchSize                       int    `json:"batchSize"`
		StreamARN                       string `json:"streamArn"`
	} `json:"DDBStreamBatchInfo"`
}

// discard skips a batch that used its retries: its invocation record
// goes to the on-failure destination, if any.
func (r *shardReader) discard(ctx context.Context, a *batchAttempt) {
	c, m := r.c, r.m
	first, last := a.recs[0].Dynamodb, a.recs[len(a.recs)-1].Dynamodb
	attrs := []slog.Attr{slog.String("event", "stream_batch_discarded"), slog.Int("records", len(a.recs)),
		slog.String("first_sequence", aws.ToString(first.SequenceNumber)), slog.String("last_sequence", aws.ToString(last.SequenceNumber)),
		slog.Int("invocations", a.invokes), slog.String("destination", m.OnFailureQueueURL)}
	if m.OnFailureQueueURL != "" {
		var rec StreamFailureRecord
		rec.RequestContext.RequestID = uuid()
		rec.RequestContext.FunctionARN = m.functionARN
		rec.RequestContext.Condition = "RetryAttemptsExhausted"
		rec.RequestContext.ApproximateInvokeCount = a.invokes
		rec.ResponseContext.StatusCode = a.status
		rec.ResponseContext.ExecutedVersion = "$LATEST"
		rec.ResponseContext.FunctionError = a.functionError
		rec.Version = "1.0"
		rec.Timestamp = time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
		info := &rec.DDBStreamBatchInfo
		info.ShardID, info.StreamARN, info.BatchSize = r.shard, m.streamARN, len(a.recs)
		info.StartSequenceNumber, info.EndSequenceNumber = aws.ToString(first.SequenceNumber), aws.ToString(last.SequenceNumber)
		info.ApproximateArrivalOfFirstRecord, info.ApproximateArrivalOfLastRecord = arrival(first), arrival(last)
		body, _ := json.Marshal(rec)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(c.invokeCtx), 10*time.Second)
		_, err := c.opts.SQS.SendMessage(sctx, &sqs.SendMessageInput{QueueUrl: aws.String(m.OnFailureQueueURL), MessageBody: aws.String(string(body))})
		cancel()
		if err != nil {
			attrs = append(attrs, slog.String("destination_error", err.Error()))
		}
	}
	r.log.LogAttrs(ctx, slog.LevelError, "stream_batch_discarded", attrs...)
}

// arrival formats a record's ApproximateCreationDateTime as the
// on-failure record does.
func arrival(d *st.StreamRecord) string {
	if d == nil || d.ApproximateCreationDateTime == nil {
		return ""
	}
	return d.ApproximateCreationDateTime.UTC().Format(time.RFC3339)
}

// streamEvent builds the event Lambda invokes a stream mapping's function
// with.
func streamEvent(m *streamMapping, region string, recs []st.Record) events.DynamoDBEvent {
	ev := events.DynamoDBEvent{Records: make([]events.DynamoDBEventRecord, len(recs))}
	for i, r := range recs {
		er := events.DynamoDBEventRecord{
			AWSRegion: region, EventID: aws.ToString(r.EventID), EventName: string(r.EventName),
			EventSource: "aws:dynamodb", EventVersion: "1.1", EventSourceArn: m.streamARN,
		}
		if v := aws.ToString(r.EventVersion); v != "" {
			er.EventVersion = v
		}
		if d := r.Dynamodb; d != nil {
			er.Change = events.DynamoDBStreamRecord{
				Keys:           lambdahandlers.ToLambdaImage(dynamo.FromStreamImage(d.Keys)),
				NewImage:       lambdahandlers.ToLambdaImage(dynamo.FromStreamImage(d.NewImage)),
				OldImage:       lambdahandlers.ToLambdaImage(dynamo.FromStreamImage(d.OldImage)),
				SequenceNumber: aws.ToString(d.SequenceNumber),
				SizeBytes:      aws.ToInt64(d.SizeBytes),
				StreamViewType: string(d.StreamViewType),
			}
			if d.ApproximateCreationDateTime != nil {
				er.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: *d.ApproximateCreationDateTime}
			}
		}
		if u := r.UserIdentity; u != nil {
			er.UserIdentity = &events.DynamoDBUserIdentity{Type: aws.ToString(u.Type), PrincipalID: aws.ToString(u.PrincipalId)}
		}
		ev.Records[i] = er
	}
	return ev
}
