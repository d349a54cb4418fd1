package dynamo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/payload"
)

// PayloadStore is the DynamoDB payload chunk store: one item per part,
// PK payload_id, SK payload_part, bytes in data.
type PayloadStore struct {
	db      *dynamodb.Client
	table   string
	clock   clock.Clock
	timeout time.Duration
}

var _ payload.Store = (*PayloadStore)(nil)

// NewPayloadStore returns a store on table; c decides TTL expiry (nil: the
// system clock).
func NewPayloadStore(db *dynamodb.Client, table string, c clock.Clock) *PayloadStore {
	if c == nil {
		c = clock.System{}
	}
	return &PayloadStore{db: db, table: table, clock: c, timeout: 10 * time.Second}
}

func (ps *PayloadStore) key(id, name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPayloadID: str(id), AttrPayloadPart: str(name)}
}

// live reports whether an item's TTL has not passed.
func (ps *PayloadStore) live(item map[string]types.AttributeValue) bool {
	return alive(item, ps.clock.Now())
}

// PutPart implements payload.Store: a PutItem conditional on the part not
// existing (or having expired); an existing part with the same bytes is a
// replay and accepted.
func (ps *PayloadStore) PutPart(ctx context.Context, p payload.Part) error {
	if p.PayloadID == "" || p.Name == "" {
		return errors.New("dynamo: payload part needs an id and a name")
	}
	ctx, cancel := withDeadline(ctx, ps.timeout)
	defer cancel()
	item := ps.key(p.PayloadID, p.Name)
	item[AttrData] = bin(p.Data)
	if !p.ExpiresAt.IsZero() {
		item[AttrTTL] = seconds(p.ExpiresAt)
	}
	_, err := ps.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &ps.table, Item: item,
		ConditionExpression:                 aws.String("attribute_not_exists(#id) OR #ttl <= :now"),
		ExpressionAttributeNames:            map[string]string{"#id": AttrPayloadID, "#ttl": AttrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(ps.clock.Now())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if old := ccf.Item; old != nil && bytes.Equal((&reader{item: old}).bytes(AttrData), p.Data) {
			return nil
		}
		return fmt.Errorf("dynamo: payload %s/%s: %w", p.PayloadID, p.Name, payload.ErrConflict)
	}
	if err != nil {
		return translate("put payload part", err)
	}
	return nil
}

// ExtendPart implements payload.Store: one UpdateItem of the TTL,
// conditional on the part being live and its expiry earlier (a part kept
// longer already is left alone). DynamoDB bills the write by the whole
// item: extending a 256 KiB chunk costs as much as writing it.
func (ps *PayloadStore) ExtendPart(ctx context.Context, payloadID, name string, until time.Time) error {
	ctx, cancel := withDeadline(ctx, ps.timeout)
	defer cancel()
	now := ps.clock.Now()
	_, err := ps.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &ps.table, Key: ps.key(payloadID, name),
		UpdateExpression:                    aws.String("SET #ttl = :until"),
		ConditionExpression:                 aws.String("attribute_exists(#id) AND #ttl > :now AND #ttl < :until"),
		ExpressionAttributeNames:            map[string]string{"#id": AttrPayloadID, "#ttl": AttrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(now), ":until": seconds(until)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if old := ccf.Item; old != nil && ps.live(old) {
			return nil // kept that long already (or without an expiry)
		}
		return fmt.Errorf("dynamo: extend payload %s/%s: %w", payloadID, name, payload.ErrNotFound)
	}
	return translate("extend payload part", err)
}

// DeletePart implements payload.Store with one DeleteItem.
func (ps *PayloadStore) DeletePart(ctx context.Context, payloadID, name string) error {
	ctx, cancel := withDeadline(ctx, ps.timeout)
	defer cancel()
	_, err := ps.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &ps.table, Key: ps.key(payloadID, name)})
	return translate("delete payload part", err)
}

// GetPart implements payload.Store with a strongly consistent read.
func (ps *PayloadStore) GetPart(ctx context.Context, payloadID, name string) (payload.Part, error) {
	ctx, cancel := withDeadline(ctx, ps.timeout)
	defer cancel()
	out, err := ps.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &ps.table, Key: ps.key(payloadID, name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return payload.Part{}, translate("get payload part", err)
	}
	if out.Item == nil || !ps.live(out.Item) {
		return payload.Part{}, payload.ErrNotFound
	}
	r := &reader{item: out.Item}
	data := r.bytes(AttrData)
	if data == nil {
		data = []byte{}
	}
	return payload.Part{PayloadID: payloadID, Name: name, Data: data, ExpiresAt: r.seconds(AttrTTL)}, r.err
}
