// A map's counts (store.MapStore) as items of the execution table outside
// both indexes: one item per group of store.GroupSize children (number
// sets of ended and failed indexes) and one holding the finished groups.

package dynamo

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/store"
)

var _ store.MapStore = (*StateStore)(nil)

// mapPK is the partition key of a map's count item: a group's
// ("...#<group>") or the finished set's ("...#f"); a round after the
// fan-out has its own ("...#<step>r<round>#..."). A tenant never holds
// '#', so no execution row has it.
func mapPK(m store.MapKey, item string) string {
	step := strconv.Itoa(m.StepIndex)
	if m.Round > 0 {
		step += "r" + strconv.Itoa(m.Round)
	}
	return "#map#" + m.TenantID + "#" + m.ParentID + "#" + step + "#" + item
}

func mapItemKey(m store.MapKey, item string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: str(mapPK(m, item))}
}

// addToSets adds i to the number set AttrEnded of the item (and to
// AttrFailed when failed) in one UpdateItem, keeping the later TTL of
// the item's and expires (an expired item starts again empty), and
// returns the size of AttrEnded after the write.
func (st *StateStore) addToSets(ctx context.Context, key map[string]types.AttributeValue, i int, failed bool, expires time.Time) (int, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	n := &types.AttributeValueMemberNS{Value: []string{strconv.Itoa(i)}}
	names := map[string]string{"#e": AttrEnded, "#x": AttrTTL}
	values := map[string]types.AttributeValue{":i": n, ":x": seconds(expires), ":now": seconds(st.opts.Clock.Now())}
	expr := "ADD #e :i"
	if failed {
		names["#f"] = AttrFailed
		expr += ", #f :i"
	}
	// A live item keeps its sets and its later TTL; an expired one (not
	// yet deleted) is written as new.
	live := "attribute_exists(#x) AND #x > :now"
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: key,
		UpdateExpression:          aws.String(expr + " SET #x = :x"),
		ConditionExpression:       aws.String("attribute_not_exists(#x) OR (" + live + " AND #x <= :x)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err == nil {
		return setLen(out.Attributes[AttrEnded]), nil
	}
	if !isConditionFailed(err) {
		return 0, translate("count", err)
	}
	// The item lives with a later TTL: add without moving it.
	out, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: key,
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(live),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]types.AttributeValue{":i": n, ":now": values[":now"]},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err == nil {
		return setLen(out.Attributes[AttrEnded]), nil
	}
	if !isConditionFailed(err) {
		return 0, translate("count", err)
	}
	// Expired meanwhile: replace it with a fresh item.
	item := map[string]types.AttributeValue{AttrEnded: n, AttrTTL: seconds(expires)}
	item[AttrPK] = key[AttrPK]
	if failed {
		item[AttrFailed] = n
	}
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.opts.ExecutionTable, Item: item}); err != nil {
		return 0, translate("count", err)
	}
	return 1, nil
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func setLen(v types.AttributeValue) int {
	if ns, ok := v.(*types.AttributeValueMemberNS); ok {
		return len(ns.Value)
	}
	return 0
}

// CountChild implements store.MapStore with one UpdateItem of the
// group's item (two when it holds a later TTL than this write's).
func (st *StateStore) CountChild(ctx context.Context, m store.MapKey, index int, failed bool, expires time.Time) (int, error) {
	return st.addToSets(ctx, mapItemKey(m, strconv.Itoa(index/store.GroupSize)), index, failed, expires)
}

// FinishGroup implements store.MapStore with one UpdateItem of the
// map's finished-set item.
func (st *StateStore) FinishGroup(ctx context.Context, m store.MapKey, group int, expires time.Time) (int, error) {
	return st.addToSets(ctx, mapItemKey(m, "f"), group, false, expires)
}

// MapCounts implements store.MapStore with BatchGetItem (strongly
// consistent) of the group items and the finished-set item.
func (st *StateStore) MapCounts(ctx context.Context, m store.MapKey, total int) (store.MapCounts, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	keys := []map[string]types.AttributeValue{mapItemKey(m, "f")}
	for g := range store.Groups(total) {
		keys = append(keys, mapItemKey(m, strconv.Itoa(g)))
	}
	items, err := st.batchGet(ctx, keys)
	if err != nil {
		return store.MapCounts{}, err
	}
	var out store.MapCounts
	for _, item := range items {
		if (&reader{item: item}).str(AttrPK) == mapPK(m, "f") {
			out.Finished = numbers(item[AttrEnded])
			continue
		}
		out.Ended = append(out.Ended, numbers(item[AttrEnded])...)
		out.Failed = append(out.Failed, numbers(item[AttrFailed])...)
	}
	slices.Sort(out.Ended)
	slices.Sort(out.Failed)
	return out, nil
}

// numbers decodes a number set of integers (nil when absent).
func numbers(v types.AttributeValue) []int {
	ns, ok := v.(*types.AttributeValueMemberNS)
	if !ok {
		return nil
	}
	out := make([]int, 0, len(ns.Value))
	for _, s := range ns.Value {
		if i, err := strconv.Atoi(s); err == nil {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}
