package dynamo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	s "github.com/qasync/qasync/shared/schema"
)

// DeadLetters is the DynamoDB dead-letter recorder, on a table laid out as
// schema.DeadLetterTable: one item per record, PK record_id, the record as
// JSON in record, and ttl_epoch_s when the record expires. Expiry is
// judged at whole seconds of ExpiresAt, like every TTL in this package.
type DeadLetters struct {
	db      *dynamodb.Client
	table   string
	clock   clock.Clock
	timeout time.Duration
}

var _ deadletter.Recorder = (*DeadLetters)(nil)

// NewDeadLetters returns a recorder on table; c decides TTL expiry (nil:
// the system clock).
func NewDeadLetters(db *dynamodb.Client, table string, c clock.Clock) *DeadLetters {
	if c == nil {
		c = clock.System{}
	}
	return &DeadLetters{db: db, table: table, clock: c, timeout: 10 * time.Second}
}

func (d *DeadLetters) key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrRecordID: str(id)}
}

// live reports whether an item's TTL has not passed.
func (d *DeadLetters) live(item map[string]types.AttributeValue) bool {
	return alive(item, d.clock.Now())
}

// Put implements deadletter.Recorder with a PutItem conditional on no
// record with r.ID existing (or the existing one having expired). A failed
// condition is a repeat: created is false and the first record stays.
func (d *DeadLetters) Put(ctx context.Context, r deadletter.Record) (bool, error) {
	if r.ID == "" {
		return false, errors.New("dynamo: a dead-letter record needs an id")
	}
	doc, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("dynamo: encode dead letter %s: %w", r.ID, err)
	}
	ctx, cancel := withDeadline(ctx, d.timeout)
	defer cancel()
	item := d.key(r.ID)
	item[AttrRecord] = str(string(doc))
	if r.Listed() {
		// In the tenant index (schema.DeadLetterTenantIndexName).
		item[AttrRecordTenant] = str(r.TenantID)
		item[AttrRecordedAt] = millis(r.RecordedAt)
		item[AttrRecordPipeline] = str(r.Envelope.PipelineID)
	}
	if !r.ExpiresAt.IsZero() {
		item[AttrTTL] = seconds(r.ExpiresAt)
	}
	_, err = d.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &d.table, Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(#id) OR #ttl <= :now"),
		ExpressionAttributeNames:  map[string]string{"#id": AttrRecordID, "#ttl": AttrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": seconds(d.clock.Now())},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, translate("put dead letter", err)
	}
	return true, nil
}

// Get implements deadletter.Recorder with a strongly consistent read; an
// expired record is deadletter.ErrNotFound.
func (d *DeadLetters) Get(ctx context.Context, id string) (deadletter.Record, error) {
	if id == "" {
		return deadletter.Record{}, fmt.Errorf("dynamo: dead letter with an empty id: %w", deadletter.ErrNotFound)
	}
	ctx, cancel := withDeadline(ctx, d.timeout)
	defer cancel()
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &d.table, Key: d.key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return deadletter.Record{}, translate("get dead letter", err)
	}
	if out.Item == nil || !d.live(out.Item) {
		return deadletter.Record{}, fmt.Errorf("dynamo: dead letter %s: %w", id, deadletter.ErrNotFound)
	}
	return decodeRecord(id, out.Item)
}

// decodeRecord reads a record item (of the table or the tenant index).
func decodeRecord(id string, item map[string]types.AttributeValue) (deadletter.Record, error) {
	var doc []byte
	switch v := item[AttrRecord].(type) {
	case *types.AttributeValueMemberS:
		doc = []byte(v.Value)
	case *types.AttributeValueMemberB:
		doc = v.Value
	default:
		return deadletter.Record{}, fmt.Errorf("dynamo: dead letter %s: attribute %s is not a string or binary", id, AttrRecord)
	}
	var r deadletter.Record
	if err := json.Unmarshal(doc, &r); err != nil {
		return deadletter.Record{}, fmt.Errorf("dynamo: decode dead letter %s: %w", id, err)
	}
	r.ID = id
	return r, nil
}

var _ deadletter.Lister = (*DeadLetters)(nil)

// listRequests bounds the index queries of one List call (a pipeline
// filter may leave each short): a call reads at most listRequests x Limit
// index items.
const listRequests = 4

// List implements deadletter.Lister from the tenant index: newest first,
// the pipeline filter applied by DynamoDB on the projected pipeline id,
// the record read from the index's projection (no read of the table). The
// cursor holds the query's fingerprint and the last entry evaluated.
func (d *DeadLetters) List(ctx context.Context, q deadletter.ListQuery) (deadletter.ListPage, error) {
	if err := q.Validate(); err != nil {
		return deadletter.ListPage{}, err
	}
	start, err := decodeRecordCursor(q)
	if err != nil {
		return deadletter.ListPage{}, err
	}
	ctx, cancel := withDeadline(ctx, d.timeout)
	defer cancel()
	limit := q.PageSize()
	in := &dynamodb.QueryInput{
		TableName: &d.table, IndexName: aws.String(s.DeadLetterTenantIndexName),
		KeyConditionExpression:    aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": AttrRecordTenant},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": str(q.TenantID)},
		ScanIndexForward:          aws.Bool(false),
		ExclusiveStartKey:         start,
	}
	if q.PipelineID != "" {
		in.FilterExpression = aws.String("#p = :p")
		in.ExpressionAttributeNames["#p"], in.ExpressionAttributeValues[":p"] = AttrRecordPipeline, str(q.PipelineID)
	}
	var page deadletter.ListPage
	for range listRequests {
		in.Limit = aws.Int32(int32(limit - len(page.Records)))
		out, err := d.db.Query(ctx, in)
		if err != nil {
			return deadletter.ListPage{}, translate("list dead letters", err)
		}
		for _, item := range out.Items {
			if !d.live(item) {
				continue
			}
			r, err := decodeRecord((&reader{item: item}).str(AttrRecordID), item)
			if err != nil {
				return deadletter.ListPage{}, err
			}
			page.Records = append(page.Records, r)
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
		if out.LastEvaluatedKey == nil || len(page.Records) >= limit {
			break
		}
	}
	if in.ExclusiveStartKey != nil {
		page.Cursor = encodeRecordCursor(q, in.ExclusiveStartKey)
	}
	return page, nil
}

// recordCursor is a dead-letter list's continuation: the query's
// fingerprint and the last index entry evaluated.
type recordCursor struct {
	Query string `json:"q"`
	At    int64  `json:"c"`
	ID    string `json:"i"`
}

func encodeRecordCursor(q deadletter.ListQuery, last map[string]types.AttributeValue) string {
	r := &reader{item: last}
	b, _ := json.Marshal(recordCursor{Query: q.Fingerprint(), At: r.int64(AttrRecordedAt), ID: r.str(AttrRecordID)}) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeRecordCursor returns the ExclusiveStartKey of q's cursor (nil for
// the first page).
func decodeRecordCursor(q deadletter.ListQuery) (map[string]types.AttributeValue, error) {
	if q.Cursor == "" {
		return nil, nil
	}
	var c recordCursor
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Query != q.Fingerprint() || c.ID == "" {
		return nil, fmt.Errorf("dynamo: %w: not a cursor of this dead-letter list query", deadletter.ErrInvalidCursor)
	}
	return map[string]types.AttributeValue{
		AttrRecordTenant: str(q.TenantID), AttrRecordedAt: num(c.At), AttrRecordID: str(c.ID),
	}, nil
}
