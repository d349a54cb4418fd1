// Concurrency keys (store.SlotStore): one item per key in the execution
// table, outside every index, holding its holders as a map attribute
// (execution id to life), and the sparse waiting index (schema
// WaitLineIndexName, sorted by rank) that the rows' own writes keep (AttrWaitKey).
//
// An acquire is one conditional UpdateItem of the key's item, a release
// (with or without a hand-over to a waiter) another: two writes per keyed
// execution, of an item that the limit keeps small (about 40 bytes a
// holder: one write unit up to about 20 holders).

package dynamo

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	s "github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

var _ store.SlotStore = (*StateStore)(nil)

// slotPK is the partition key of a concurrency key's item. A tenant never
// holds '#' first, so no execution row has it.
func slotPK(sc store.SlotScope) string { return "#ck#" + sc.ID() }

func slotItemKey(sc store.SlotScope) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: str(slotPK(sc))}
}

// slotHolders decodes a key item's holders (none when absent or expired).
func (st *StateStore) slotHolders(item map[string]types.AttributeValue) []store.SlotHolder {
	if item == nil || !st.live(item) {
		return nil
	}
	m, ok := item[AttrSlotHolders].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	out := make([]store.SlotHolder, 0, len(m.Value))
	for id, v := range m.Value {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			continue
		}
		life, _ := strconv.Atoi(n.Value)
		out = append(out, store.SlotHolder{ExecutionID: id, Life: life})
	}
	return out
}

// putSlotItem writes a fresh key item holding only h, conditional on the
// item being absent or still the expired one found (old: its TTL).
func (st *StateStore) putSlotItem(ctx context.Context, sc store.SlotScope, h store.SlotHolder, expires time.Time, old types.AttributeValue) (bool, error) {
	item := map[string]types.AttributeValue{
		AttrPK:          str(slotPK(sc)),
		AttrSlotHolders: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{h.ExecutionID: num(h.Life)}},
		AttrTTL:         seconds(expires),
	}
	in := &dynamodb.PutItemInput{TableName: &st.opts.ExecutionTable, Item: item,
		ConditionExpression: aws.String("attribute_not_exists(#pk)"), ExpressionAttributeNames: map[string]string{"#pk": AttrPK}}
	if old != nil {
		in.ConditionExpression = aws.String("#x = :old")
		in.ExpressionAttributeNames = map[string]string{"#x": AttrTTL}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":old": old}
	}
	_, err := st.db.PutItem(ctx, in)
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, translate("slot acquire", err)
}

// AcquireSlot implements store.SlotStore: one conditional UpdateItem of
// the key's item (the refusal returns the item, so a full key costs no
// read); a PutItem instead the first time a key is used (or after its
// item expired).
func (st *StateStore) AcquireSlot(ctx context.Context, sc store.SlotScope, h store.SlotHolder, limit int, expires time.Time) ([]store.SlotHolder, bool, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	for range 3 {
		_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &st.opts.ExecutionTable, Key: slotItemKey(sc),
			UpdateExpression:         aws.String("SET #h.#id = :life, #x = :x"),
			ConditionExpression:      aws.String("#x > :now AND (#h.#id = :life OR (attribute_not_exists(#h.#id) AND size(#h) < :limit))"),
			ExpressionAttributeNames: map[string]string{"#h": AttrSlotHolders, "#id": h.ExecutionID, "#x": AttrTTL},
			ExpressionAttributeValues: map[string]types.AttributeValue{":life": num(h.Life), ":x": seconds(expires),
				":now": seconds(st.opts.Clock.Now()), ":limit": num(limit)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return nil, true, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return nil, false, translate("slot acquire", err)
		}
		old := ccf.Item
		if old != nil && st.live(old) {
			return st.slotHolders(old), false, nil
		}
		// No item yet, or an expired one: write a fresh one.
		var oldTTL types.AttributeValue
		if old != nil {
			oldTTL = old[AttrTTL]
		}
		ok, err := st.putSlotItem(ctx, sc, h, expires, oldTTL)
		if err != nil || ok {
			return nil, ok, err
		}
		// Another acquire created it meanwhile: try the update again.
	}
	holders, err := st.Slots(ctx, sc)
	return holders, false, err
}

// ReleaseSlot implements store.SlotStore: one conditional UpdateItem
// removing h (adding next in the same write).
func (st *StateStore) ReleaseSlot(ctx context.Context, sc store.SlotScope, h store.SlotHolder, next *store.SlotHolder, expires time.Time) (bool, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	names := map[string]string{"#h": AttrSlotHolders, "#id": h.ExecutionID, "#x": AttrTTL}
	values := map[string]types.AttributeValue{":life": num(h.Life), ":x": seconds(expires)}
	expr := "SET #x = :x"
	if next != nil {
		names["#next"], values[":nlife"] = next.ExecutionID, num(next.Life)
		expr += ", #h.#next = :nlife"
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: slotItemKey(sc),
		UpdateExpression:         aws.String(expr + " REMOVE #h.#id"),
		ConditionExpression:      aws.String("#h.#id = :life"),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, translate("slot release", err)
}

// Slots implements store.SlotStore with one strongly consistent GetItem.
func (st *StateStore) Slots(ctx context.Context, sc store.SlotScope) ([]store.SlotHolder, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable, Key: slotItemKey(sc), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, translate("slots", err)
	}
	return st.slotHolders(out.Item), nil
}

// Waiting implements store.SlotStore with one Query of the waiting index
// (eventually consistent, as every GSI read).
func (st *StateStore) Waiting(ctx context.Context, sc store.SlotScope, limit int) ([]store.Key, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &st.opts.ExecutionTable, IndexName: aws.String(s.WaitLineIndexName),
		KeyConditionExpression:    aws.String("#w = :w"),
		ExpressionAttributeNames:  map[string]string{"#w": AttrWaitKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":w": str(sc.ID())},
		ScanIndexForward:          aws.Bool(true),
		Limit:                     aws.Int32(int32(max(limit, 1))),
	})
	if err != nil {
		return nil, translate("waiting query", err)
	}
	keys := make([]store.Key, 0, len(out.Items))
	for _, item := range out.Items {
		if k, ok := splitPK((&reader{item: item}).str(AttrPK)); ok {
			keys = append(keys, withIncarnation(k, item))
		}
	}
	return keys, nil
}
