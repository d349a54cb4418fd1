package ddbmodel

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A table's stream: shards of records, each shard closed and followed by
// a child after Options.ShardRecords records or Options.ShardPeriod of
// time; records older than StreamRetention are trimmed, and a closed
// shard is forgotten once all of it is. Sequence numbers count up from
// one per model, so they are the same on every run.

type stream struct {
	arn, label, table, viewType string
	key                         keySchema
	created                     time.Time
	enabled                     bool
	shards                      []*shard
}

type shard struct {
	id, parent string
	opened     time.Time
	closed     bool
	closedAt   time.Time
	// startSeq is taken when the shard opens (its records come after it);
	// endSeq is its last sequence number once closed.
	startSeq, endSeq uint64
	// trimmed is the highest sequence number trimmed away (0: none);
	// last the last record's, trimmed or not.
	trimmed, last uint64
	records       []streamRecord
	written       int // records ever written to the shard
}

type streamRecord struct {
	seq            uint64
	at             time.Time
	event          string
	keys, old, new Item
	size           int
	byService      bool
}

func seqText(n uint64) string { return fmt.Sprintf("%021d", n) }

// newStream starts a table's stream with one open shard.
func (m *Model) newStream(t *table, viewType string, now time.Time) *stream {
	label := now.Format("2006-01-02T15:04:05.000")
	for at := now; ; at = at.Add(time.Millisecond) {
		label = at.Format("2006-01-02T15:04:05.000")
		if _, taken := m.streams[t.arn+"/stream/"+label]; !taken {
			break
		}
	}
	s := &stream{arn: t.arn + "/stream/" + label, label: label, table: t.name, viewType: viewType, key: t.key, created: now, enabled: true}
	m.openShard(s, "", now)
	m.streams[s.arn] = s
	return s
}

func (m *Model) openShard(s *stream, parent string, now time.Time) {
	m.shards++
	m.seq++
	s.shards = append(s.shards, &shard{
		id:     fmt.Sprintf("shardId-%020d-%08d", now.UnixMilli(), m.shards),
		parent: parent, opened: now, startSeq: m.seq,
	})
}

func (s *stream) open() *shard {
	if n := len(s.shards); n > 0 && !s.shards[n-1].closed {
		return s.shards[n-1]
	}
	return nil
}

func (sh *shard) close(now time.Time) {
	sh.closed, sh.closedAt = true, now
	sh.endSeq = max(sh.startSeq, sh.last)
}

// disable stops the stream (its table was deleted or its stream turned
// off); what it holds stays readable until trimmed.
func (s *stream) disable(now time.Time) {
	if sh := s.open(); sh != nil {
		sh.close(now)
	}
	s.enabled = false
}

// roll trims old records, forgets trimmed closed shards and rolls the
// open shard over when it is old enough.
func (s *stream) roll(m *Model, now time.Time) {
	horizon := now.Add(-StreamRetention)
	kept := s.shards[:0]
	for _, sh := range s.shards {
		i := 0
		for i < len(sh.records) && sh.records[i].at.Before(horizon) {
			sh.trimmed = sh.records[i].seq
			i++
		}
		sh.records = sh.records[i:]
		if sh.closed && len(sh.records) == 0 && sh.closedAt.Before(horizon) {
			continue
		}
		kept = append(kept, sh)
	}
	s.shards = kept
	if sh := s.open(); sh != nil && now.Sub(sh.opened) >= m.opts.ShardPeriod {
		sh.close(now)
		m.openShard(s, sh.id, now)
	}
}

// emit writes the stream record of a change of one item (old or new nil
// for an insert or a removal); a write that changed nothing writes none.
func (m *Model) emit(t *table, old, new Item, byService bool) {
	s := t.stream
	if s == nil || (old == nil && new == nil) || (old != nil && new != nil && itemsEqual(old, new)) {
		return
	}
	now := m.now()
	rec := streamRecord{at: now.Truncate(time.Second), byService: byService}
	switch {
	case old == nil:
		rec.event, rec.keys = "INSERT", keyOf(t.key, new)
	case new == nil:
		rec.event, rec.keys = "REMOVE", keyOf(t.key, old)
	default:
		rec.event, rec.keys = "MODIFY", keyOf(t.key, new)
	}
	// The images share the stored items, which no write changes in place.
	if s.viewType == "NEW_IMAGE" || s.viewType == "NEW_AND_OLD_IMAGES" {
		rec.new = new
	}
	if s.viewType == "OLD_IMAGE" || s.viewType == "NEW_AND_OLD_IMAGES" {
		rec.old = old
	}
	rec.size = itemSize(rec.keys) + itemSize(rec.new) + itemSize(rec.old)
	sh := s.open()
	m.seq++
	rec.seq = m.seq
	sh.records = append(sh.records, rec)
	sh.last = rec.seq
	sh.written++
	if m.opts.ShardRecords > 0 && sh.written >= m.opts.ShardRecords {
		sh.close(now)
		m.openShard(s, sh.id, now)
	}
}

// --- the DynamoDB Streams API ---

// DescribeStreamInput is DynamoDB Streams' DescribeStream request.
type DescribeStreamInput struct {
	StreamArn             string
	Limit                 *int
	ExclusiveStartShardId *string
	ShardFilter           *struct {
		Type    string
		ShardId string
	}
}

type sequenceRange struct {
	StartingSequenceNumber string
	EndingSequenceNumber   *string `json:",omitempty"`
}

type shardDescription struct {
	ShardId             string
	ParentShardId       *string `json:",omitempty"`
	SequenceNumberRange sequenceRange
}

func keySchemaOf(k keySchema) []KeySchemaElement {
	out := []KeySchemaElement{{k.hash.name, "HASH"}}
	if k.rng.name != "" {
		out = append(out, KeySchemaElement{k.rng.name, "RANGE"})
	}
	return out
}

func (m *Model) streamOf(arn string) (*stream, error) {
	s := m.streams[arn]
	if s == nil {
		return nil, notFound("Requested resource not found: Stream: %s not found", arn)
	}
	return s, nil
}

func (m *Model) describeStream(in *DescribeStreamInput) (any, error) {
	s, err := m.streamOf(in.StreamArn)
	if err != nil {
		return nil, err
	}
	limit := 100
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > 100 {
			return nil, validation("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value less than or equal to 100", *in.Limit)
		}
		limit = *in.Limit
	}
	var shards []shardDescription
	started := in.ExclusiveStartShardId == nil
	more := false
	for _, sh := range s.shards {
		if !started {
			started = sh.id == *in.ExclusiveStartShardId
			continue
		}
		if f := in.ShardFilter; f != nil && f.Type == "CHILD_SHARDS" && sh.parent != f.ShardId {
			continue
		}
		if len(shards) == limit {
			more = true
			break
		}
		d := shardDescription{ShardId: sh.id, SequenceNumberRange: sequenceRange{StartingSequenceNumber: seqText(sh.startSeq)}}
		if sh.parent != "" {
			d.ParentShardId = &sh.parent
		}
		if sh.closed {
			end := seqText(sh.endSeq)
			d.SequenceNumberRange.EndingSequenceNumber = &end
		}
		shards = append(shards, d)
	}
	status := "ENABLED"
	if !s.enabled {
		status = "DISABLED"
	}
	desc := map[string]any{
		"StreamArn": s.arn, "StreamLabel": s.label, "StreamStatus": status, "StreamViewType": s.viewType,
		"CreationRequestDateTime": epoch(s.created), "TableName": s.table, "KeySchema": keySchemaOf(s.key),
		"Shards": shards,
	}
	if shards == nil {
		desc["Shards"] = []shardDescription{}
	}
	if more {
		desc["LastEvaluatedShardId"] = shards[len(shards)-1].ShardId
	}
	return map[string]any{"StreamDescription": desc}, nil
}

// ListStreamsInput is DynamoDB Streams' ListStreams request.
type ListStreamsInput struct {
	TableName               *string
	Limit                   *int
	ExclusiveStartStreamArn *string
}

func (m *Model) listStreams(in *ListStreamsInput) (any, error) {
	limit := 100
	if in.Limit != nil && *in.Limit > 0 {
		limit = *in.Limit
	}
	streams := []map[string]string{}
	var last string
	for _, arn := range sortedNames(m.streams) {
		s := m.streams[arn]
		if in.ExclusiveStartStreamArn != nil && arn <= *in.ExclusiveStartStreamArn || in.TableName != nil && s.table != *in.TableName {
			continue
		}
		if len(streams) == limit {
			last = streams[len(streams)-1]["StreamArn"]
			break
		}
		streams = append(streams, map[string]string{"StreamArn": arn, "StreamLabel": s.label, "TableName": s.table})
	}
	out := map[string]any{"Streams": streams}
	if last != "" {
		out["LastEvaluatedStreamArn"] = last
	}
	return out, nil
}

// GetShardIteratorInput is DynamoDB Streams' GetShardIterator request.
type GetShardIteratorInput struct {
	StreamArn         string
	ShardId           string
	ShardIteratorType string
	SequenceNumber    *string
}

// iterator is a decoded shard iterator: read the shard's records after
// sequence number after.
type iterator struct {
	arn, shard string
	after      uint64
	issued     time.Time
}

func (it iterator) encode() string {
	raw := fmt.Sprintf("%s|%s|%d|%d", it.arn, it.shard, it.after, it.issued.UnixNano())
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeIterator(s string) (iterator, error) {
	bad := validation("Invalid ShardIterator")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return iterator{}, bad
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 4 {
		return iterator{}, bad
	}
	after, err1 := strconv.ParseUint(parts[2], 10, 64)
	issued, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		return iterator{}, bad
	}
	return iterator{arn: parts[0], shard: parts[1], after: after, issued: time.Unix(0, issued).UTC()}, nil
}

func (s *stream) shard(id string) (*shard, error) {
	for _, sh := range s.shards {
		if sh.id == id {
			return sh, nil
		}
	}
	return nil, notFound("Requested resource not found: Shard does not exist")
}

func trimmedError() *Error {
	return clientError("TrimmedDataAccessException", "The operation attempted to read past the oldest stream record in a shard.")
}

func (m *Model) getShardIterator(in *GetShardIteratorInput) (any, error) {
	s, err := m.streamOf(in.StreamArn)
	if err != nil {
		return nil, err
	}
	sh, err := s.shard(in.ShardId)
	if err != nil {
		return nil, err
	}
	it := iterator{arn: s.arn, shard: sh.id, issued: m.now()}
	seq := func() (uint64, error) {
		if in.SequenceNumber == nil {
			return 0, validation("Must specify a sequence number for shard iterator type %s", in.ShardIteratorType)
		}
		n, err := strconv.ParseUint(*in.SequenceNumber, 10, 64)
		last := m.seq
		if sh.closed {
			last = sh.endSeq
		}
		if err != nil || n < sh.startSeq || n > last {
			return 0, validation("Invalid SequenceNumber for ShardIterator: %s", *in.SequenceNumber)
		}
		return n, nil
	}
	switch in.ShardIteratorType {
	case "TRIM_HORIZON":
		it.after = max(sh.startSeq, sh.trimmed)
	case "LATEST":
		it.after = max(sh.startSeq, sh.last)
	case "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER":
		n, err := seq()
		if err != nil {
			return nil, err
		}
		it.after = n
		if in.ShardIteratorType == "AT_SEQUENCE_NUMBER" {
			it.after = n - 1
		}
		if it.after < sh.trimmed {
			return nil, trimmedError()
		}
	default:
		return nil, validation("Invalid ShardIteratorType: %s", in.ShardIteratorType)
	}
	return map[string]string{"ShardIterator": it.encode()}, nil
}

// GetRecordsInput is DynamoDB Streams' GetRecords request.
type GetRecordsInput struct {
	ShardIterator string
	Limit         *int
}

func (m *Model) getRecords(in *GetRecordsInput) (any, error) {
	it, err := decodeIterator(in.ShardIterator)
	if err != nil {
		return nil, err
	}
	now := m.now()
	if now.Sub(it.issued) > IteratorLifetime {
		return nil, clientError("ExpiredIteratorException", "Iterator expired. The iterator was created at time %s while right now it is %s which is further in the future than the tolerated delay of 900000 milliseconds.", it.issued.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	s, err := m.streamOf(it.arn)
	if err != nil {
		return nil, err
	}
	sh, err := s.shard(it.shard)
	if err != nil {
		return nil, err
	}
	if it.after < sh.trimmed {
		return nil, trimmedError()
	}
	limit := 1000
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > 1000 {
			return nil, validation("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value less than or equal to 1000", *in.Limit)
		}
		limit = *in.Limit
	}
	records := []any{}
	next := it.after
	for _, r := range sh.records {
		if r.seq <= it.after {
			continue
		}
		if len(records) == limit {
			break
		}
		records = append(records, m.wireRecord(s, r))
		next = r.seq
	}
	out := map[string]any{"Records": records}
	if !sh.closed || hasAfter(sh, next) {
		out["NextShardIterator"] = iterator{arn: s.arn, shard: sh.id, after: next, issued: now}.encode()
	}
	return out, nil
}

func hasAfter(sh *shard, seq uint64) bool {
	n := len(sh.records)
	return n > 0 && sh.records[n-1].seq > seq
}

func (m *Model) wireRecord(s *stream, r streamRecord) map[string]any {
	data := map[string]any{
		"ApproximateCreationDateTime": epoch(r.at), "Keys": r.keys, "SequenceNumber": seqText(r.seq),
		"SizeBytes": r.size, "StreamViewType": s.viewType,
	}
	if r.new != nil {
		data["NewImage"] = r.new
	}
	if r.old != nil {
		data["OldImage"] = r.old
	}
	out := map[string]any{
		"eventID": fmt.Sprintf("%032x", r.seq), "eventName": r.event, "eventVersion": "1.1",
		"eventSource": "aws:dynamodb", "awsRegion": m.opts.Region, "dynamodb": data,
	}
	if r.byService {
		out["userIdentity"] = map[string]string{"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}
	}
	return out
}

// epoch is a time as the JSON protocol sends timestamps: epoch seconds.
func epoch(t time.Time) float64 {
	return float64(t.UnixMilli()) / 1000
}
