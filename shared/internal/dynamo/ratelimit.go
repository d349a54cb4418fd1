// Rate limits (store.RateStore): one item per bucket in the execution
// table, outside every index, holding its theoretical arrival time (tat,
// Unix nanoseconds).
//
// A reservation is one conditional UpdateItem and no read: either the
// bucket is unused or behind now (case A: tat = now + interval, if the
// item is absent or its tat is before now), or it is ahead (case B: tat +=
// interval, if tat is between now and now + horizon + the burst's
// allowance, the old tat returned to compute the start). A refused
// condition returns the item (ReturnValuesOnConditionCheckFailure), which
// says the right case: a guess that missed costs a second write, never a
// read. A small per-process cache of each bucket's last tat makes the
// first guess right in the steady state. A bucket beyond the horizon is
// refused after one failed write, nothing changed.

package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/store"
)

var _ store.RateStore = (*StateStore)(nil)

// ratePK is the partition key of a rate limit bucket's item. A tenant
// never holds '#' first, so no execution row has it.
func ratePK(sc store.RateScope) string { return "#rl#" + sc.ID() }

// rateCacheMax bounds the per-process cache of buckets' last tat: past it
// the cache starts afresh (a miss costs one more write, never a wrong
// reservation: the conditions decide).
const rateCacheMax = 4096

// rateCache is a process's last known tat per bucket (a guess of the
// write's case).
type rateCache struct {
	mu  sync.Mutex
	tat map[string]int64
}

func (c *rateCache) get(id string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.tat[id]
	return v, ok
}

func (c *rateCache) put(id string, tat int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tat == nil || len(c.tat) >= rateCacheMax {
		c.tat = map[string]int64{}
	}
	c.tat[id] = tat
}

// oldTAT reads an item's tat (ok false when absent).
func oldTAT(item map[string]types.AttributeValue) (int64, bool) {
	n, ok := item[AttrRateTAT].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, err == nil
}

// Reserve implements store.RateStore: one conditional UpdateItem, two
// when the case guessed from the cache was wrong.
func (st *StateStore) Reserve(ctx context.Context, sc store.RateScope, interval time.Duration, burst int, horizon time.Duration, now time.Time) (time.Time, bool, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	id := sc.ID()
	nowN, step, tau := now.UnixNano(), int64(interval), int64(burst-1)*int64(interval)
	limit := nowN + int64(horizon) + tau
	// The item is kept a while past the latest tat this write may set.
	ttl := seconds(time.Unix(0, limit+step).Add(store.RateRecordTTL))
	key := map[string]types.AttributeValue{AttrPK: str(ratePK(sc))}
	cached, known := st.rates.get(id)
	ahead := known && cached >= nowN
	for range 3 {
		in := &dynamodb.UpdateItemInput{
			TableName: &st.opts.ExecutionTable, Key: key,
			ExpressionAttributeNames:            map[string]string{"#t": AttrRateTAT, "#x": AttrTTL},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		if ahead {
			in.UpdateExpression = aws.String("SET #t = #t + :step, #x = :x")
			in.ConditionExpression = aws.String("#t BETWEEN :now AND :limit")
			in.ExpressionAttributeValues = map[string]types.AttributeValue{":step": num(step), ":x": ttl,
				":now": num(nowN), ":limit": num(limit)}
			in.ReturnValues = types.ReturnValueUpdatedOld
		} else {
			in.UpdateExpression = aws.String("SET #t = :tat, #x = :x")
			in.ConditionExpression = aws.String("attribute_not_exists(#t) OR #t < :now")
			in.ExpressionAttributeValues = map[string]types.AttributeValue{":tat": num(nowN + step), ":x": ttl, ":now": num(nowN)}
		}
		out, err := st.db.UpdateItem(ctx, in)
		if err == nil {
			if !ahead {
				st.rates.put(id, nowN+step)
				return now, true, nil
			}
			old, ok := oldTAT(out.Attributes)
			if !ok {
				return time.Time{}, false, errors.New("dynamo: rate reserve: the bucket's old tat is missing")
			}
			st.rates.put(id, old+step)
			return maxTime(now, time.Unix(0, old-tau)), true, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return time.Time{}, false, translate("rate reserve", err)
		}
		old, ok := oldTAT(ccf.Item)
		switch {
		case !ok || old < nowN:
			ahead = false
		case old > limit:
			st.rates.put(id, old)
			return time.Unix(0, old-tau), false, nil
		default:
			ahead = true
		}
	}
	// Three writes each refused by a concurrent one: the bucket is hot.
	return time.Time{}, false, fmt.Errorf("dynamo: rate reserve: the bucket moved under three writes: %w", store.ErrUnavailable)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
