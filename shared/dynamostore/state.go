// Package dynamostore holds the DynamoDB implementations of the state
// store and the payload store, laid out as package schema defines. Every
// write is conditional; DynamoDB's condition failures are translated here
// into the store's own errors, and nothing above imports SDK error types.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/execution"
	s "github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// Options configure a StateStore.
type Options struct {
	// ExecutionTable and KeyTable name the tables (required).
	ExecutionTable, KeyTable string
	// DueShards is the number of due-index partitions; every process
	// sharing a table must use the same value. Default schema.DefaultDueShards.
	DueShards int
	// Clock decides TTL expiry on reads. Default the system clock.
	Clock clock.Clock
	// Timeout bounds each call whose context has no deadline. Default 10s.
	Timeout time.Duration
}

// StateStore is the DynamoDB execution state store.
type StateStore struct {
	db   *dynamodb.Client
	opts Options
	// dueItemsRead counts the index items the due query evaluated.
	dueItemsRead atomic.Int64
}

var _ store.Store = (*StateStore)(nil)

// NewStateStore returns a store on the given tables.
func NewStateStore(db *dynamodb.Client, opts Options) (*StateStore, error) {
	if opts.ExecutionTable == "" || opts.KeyTable == "" {
		return nil, errors.New("dynamostore: execution and key table names are required")
	}
	if opts.DueShards <= 0 {
		opts.DueShards = s.DefaultDueShards
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &StateStore{db: db, opts: opts}, nil
}

// DueItemsRead reports how many index items due-work queries have read
// since the store was made (for tests and metrics: it grows with due
// rows, not with the table).
func (st *StateStore) DueItemsRead() int64 { return st.dueItemsRead.Load() }

func (st *StateStore) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return withDeadline(ctx, st.opts.Timeout)
}

func (st *StateStore) key(k execution.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.AttrTenantID: str(k.TenantID), s.AttrExecutionID: str(k.ExecutionID)}
}

// live reports whether an item's TTL has not passed.
func (st *StateStore) live(item map[string]types.AttributeValue) bool {
	return alive(item, st.opts.Clock.Now())
}

// CreateOrGet implements store.Store with one TransactWriteItems: the
// execution row and the key row, each conditional on not existing (or
// having expired). When the key exists, it returns that execution, or
// ErrKeyMismatch when the fingerprint differs.
func (st *StateStore) CreateOrGet(ctx context.Context, req store.CreateRequest) (execution.Execution, bool, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	e := req.Execution
	nowS := seconds(st.opts.Clock.Now())
	kid := store.KeyID(e.TenantID, req.IdempotencyKey)
	keyItem := map[string]types.AttributeValue{
		s.AttrKeyID: str(kid), s.AttrTenantID: str(e.TenantID), s.AttrExecutionID: str(e.ExecutionID),
		s.AttrFingerprint: str(req.Fingerprint), s.AttrTTL: seconds(e.ExpiresAt),
	}
	absent := func(pk string) (*string, map[string]string, map[string]types.AttributeValue) {
		return aws.String("attribute_not_exists(#pk) OR #ttl <= :now"),
			map[string]string{"#pk": pk, "#ttl": s.AttrTTL}, map[string]types.AttributeValue{":now": nowS}
	}
	ec, en, ev := absent(s.AttrTenantID)
	kc, kn, kv := absent(s.AttrKeyID)
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &st.opts.ExecutionTable, Item: encode(&e, st.opts.DueShards),
			ConditionExpression: ec, ExpressionAttributeNames: en, ExpressionAttributeValues: ev}},
		{Put: &types.Put{TableName: &st.opts.KeyTable, Item: keyItem,
			ConditionExpression: kc, ExpressionAttributeNames: kn, ExpressionAttributeValues: kv,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}}
	for attempt := 0; ; attempt++ {
		_, err := st.db.TransactWriteItems(ctx, in)
		if err == nil {
			return e, true, nil
		}
		var tc *types.TransactionCanceledException
		if !errors.As(err, &tc) {
			return execution.Execution{}, false, translate("create", err)
		}
		reasons := tc.CancellationReasons
		code := func(i int) string {
			if i < len(reasons) {
				return aws.ToString(reasons[i].Code)
			}
			return ""
		}
		switch {
		case code(1) == "ConditionalCheckFailed":
			var old map[string]types.AttributeValue
			if len(reasons) > 1 {
				old = reasons[1].Item
			}
			got, err := st.existing(ctx, kid, old, req.Fingerprint)
			if errors.Is(err, errRaced) && attempt < 8 {
				continue // the key expired or its row vanished between the two reads
			}
			return got, false, err
		case code(0) == "ConditionalCheckFailed":
			return execution.Execution{}, false, fmt.Errorf("dynamostore: execution %s exists: %w", e.Key(), store.ErrConflict)
		case (code(0) == "TransactionConflict" || code(1) == "TransactionConflict") && attempt < 8:
			// A concurrent transaction on the same key (a duplicate submit in
			// flight): back off and decide again.
			if err := sleep(ctx, time.Duration(5<<attempt)*time.Millisecond); err != nil {
				return execution.Execution{}, false, err
			}
		default:
			return execution.Execution{}, false, translate("create", err)
		}
	}
}

var errRaced = errors.New("dynamostore: key changed while being read")

// existing resolves a taken idempotency key to its execution.
func (st *StateStore) existing(ctx context.Context, kid string, keyItem map[string]types.AttributeValue, fingerprint string) (execution.Execution, error) {
	if keyItem == nil { // the backend did not return the old item: read it
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.KeyTable, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{s.AttrKeyID: str(kid)}})
		if err != nil {
			return execution.Execution{}, translate("read key", err)
		}
		keyItem = out.Item
	}
	if keyItem == nil || !st.live(keyItem) {
		return execution.Execution{}, errRaced
	}
	r := &reader{item: keyItem}
	if r.str(s.AttrFingerprint) != fingerprint {
		return execution.Execution{}, store.ErrKeyMismatch
	}
	e, err := st.Get(ctx, execution.Key{TenantID: r.str(s.AttrTenantID), ExecutionID: r.str(s.AttrExecutionID)})
	if errors.Is(err, store.ErrNotFound) {
		return e, errRaced
	}
	return e, err
}

// Get implements store.Store with a strongly consistent read.
func (st *StateStore) Get(ctx context.Context, key execution.Key) (execution.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable, Key: st.key(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return execution.Execution{}, translate("get", err)
	}
	if out.Item == nil || !st.live(out.Item) {
		return execution.Execution{}, store.ErrNotFound
	}
	return decode(out.Item)
}

// Claim implements store.Store as one conditional UpdateItem.
func (st *StateStore) Claim(ctx context.Context, req store.ClaimRequest) (execution.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.set(s.AttrStatus, str(string(execution.Running)))
	u.set(s.AttrLeaseOwner, str(req.Owner))
	u.set(s.AttrLeaseExpires, millis(req.LeaseUntil))
	u.set(s.AttrNextDue, millis(req.LeaseUntil))
	u.set(s.AttrDueShard, num(dueShard(req.Key.ExecutionID, st.opts.DueShards)))
	u.set(s.AttrAttempt, num(req.Attempt))
	u.set(s.AttrVersion, num(req.ExpectVersion+1))
	u.set(s.AttrUpdated, millis(req.Now))
	now := millis(req.Now)
	cond := fmt.Sprintf("%s = %s AND %s IN (%s, %s, %s) AND %s <= %s AND (attribute_not_exists(%s) OR %s <= %s) AND %s",
		u.name(s.AttrVersion), u.value(num(req.ExpectVersion)),
		u.name(s.AttrStatus), u.value(str(string(execution.Queued))), u.value(str(string(execution.WaitRetry))), u.value(str(string(execution.Running))),
		u.name(s.AttrNextDue), u.value(now),
		u.name(s.AttrLeaseOwner), u.name(s.AttrLeaseExpires), u.value(now),
		st.liveCondition(u))
	item, err := st.conditionalUpdate(ctx, req.Key, u, cond)
	switch {
	case errors.Is(err, errCondition) && item != nil && st.live(item):
		return execution.Execution{}, store.ErrConflict
	case errors.Is(err, errCondition):
		return execution.Execution{}, store.ErrNotFound
	case err != nil:
		return execution.Execution{}, err
	}
	return decode(item)
}

// Renew implements store.Store; it leaves the version alone.
func (st *StateStore) Renew(ctx context.Context, key execution.Key, owner string, version int64, until time.Time) error {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.set(s.AttrLeaseExpires, millis(until))
	u.set(s.AttrNextDue, millis(until))
	cond := fmt.Sprintf("%s = %s AND %s = %s AND %s = %s AND %s",
		u.name(s.AttrLeaseOwner), u.value(str(owner)), u.name(s.AttrVersion), u.value(num(version)),
		u.name(s.AttrStatus), u.value(str(string(execution.Running))), st.liveCondition(u))
	_, err := st.conditionalUpdate(ctx, key, u, cond)
	if errors.Is(err, errCondition) {
		return store.ErrLeaseLost
	}
	return err
}

// Update implements store.Store: every mutable attribute is set (or
// removed when empty), conditional on version and lease owner.
func (st *StateStore) Update(ctx context.Context, g store.Guard, next execution.Execution) (execution.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	next.ExecutionID = g.Key.ExecutionID // the due shard derives from it
	u := newUpdate()
	mutable(u, &next, st.opts.DueShards)
	u.set(s.AttrVersion, num(g.Version+1))
	owner := "attribute_not_exists(" + u.name(s.AttrLeaseOwner) + ")"
	if g.LeaseOwner != "" {
		owner = u.name(s.AttrLeaseOwner) + " = " + u.value(str(g.LeaseOwner))
	}
	cond := fmt.Sprintf("%s = %s AND %s AND %s", u.name(s.AttrVersion), u.value(num(g.Version)), owner, st.liveCondition(u))
	item, err := st.conditionalUpdate(ctx, g.Key, u, cond)
	switch {
	case errors.Is(err, errCondition) && (item == nil || !st.live(item)):
		return execution.Execution{}, store.ErrNotFound
	case errors.Is(err, errCondition) && g.LeaseOwner != "":
		return execution.Execution{}, store.ErrLeaseLost
	case errors.Is(err, errCondition):
		return execution.Execution{}, store.ErrConflict
	case err != nil:
		return execution.Execution{}, err
	}
	return decode(item)
}

// liveCondition requires the row to exist and not to have expired.
func (st *StateStore) liveCondition(u *update) string {
	return fmt.Sprintf("attribute_exists(%s) AND %s > %s", u.name(s.AttrTenantID), u.name(s.AttrTTL), u.value(seconds(st.opts.Clock.Now())))
}

var errCondition = errors.New("dynamostore: condition failed")

// conditionalUpdate runs UpdateItem returning the new item, or errCondition
// with the old item (nil when there was none).
func (st *StateStore) conditionalUpdate(ctx context.Context, key execution.Key, u *update, cond string) (map[string]types.AttributeValue, error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: st.key(key),
		UpdateExpression: aws.String(u.expression()), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, errCondition
	}
	if err != nil {
		return nil, translate("update", err)
	}
	return out.Attributes, nil
}

// Due implements store.Store: one Query per due shard on the sparse index,
// in parallel, merged oldest first. It never scans the table.
func (st *StateStore) Due(ctx context.Context, dueBy time.Time, limit int) ([]store.DueRef, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		refs []store.DueRef
		errs []error
		wg   sync.WaitGroup
	)
	for shard := range st.opts.DueShards {
		wg.Go(func() {
			got, err := st.dueShard(ctx, shard, dueBy, limit)
			mu.Lock()
			defer mu.Unlock()
			refs = append(refs, got...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(refs, func(i, j int) bool {
		if !refs[i].NextDueAt.Equal(refs[j].NextDueAt) {
			return refs[i].NextDueAt.Before(refs[j].NextDueAt)
		}
		return refs[i].Key.String() < refs[j].Key.String()
	})
	if len(refs) > limit {
		refs = refs[:limit]
	}
	return refs, nil
}

func (st *StateStore) dueShard(ctx context.Context, shard int, dueBy time.Time, limit int) ([]store.DueRef, error) {
	var refs []store.DueRef
	in := &dynamodb.QueryInput{
		TableName: &st.opts.ExecutionTable, IndexName: aws.String(s.DueIndexName),
		KeyConditionExpression:   aws.String("#shard = :shard AND #due <= :by"),
		ExpressionAttributeNames: map[string]string{"#shard": s.AttrDueShard, "#due": s.AttrNextDue},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":shard": &types.AttributeValueMemberN{Value: strconv.Itoa(shard)}, ":by": millis(dueBy)},
		ScanIndexForward: aws.Bool(true),
		Limit:            aws.Int32(int32(min(limit, 1000))),
	}
	for len(refs) < limit {
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return refs, translate("due query", err)
		}
		st.dueItemsRead.Add(int64(out.ScannedCount))
		for _, item := range out.Items {
			if !st.live(item) {
				continue
			}
			r := &reader{item: item}
			refs = append(refs, store.DueRef{
				Key:        execution.Key{TenantID: r.str(s.AttrTenantID), ExecutionID: r.str(s.AttrExecutionID)},
				PipelineID: r.str(s.AttrPipelineID), Status: execution.Status(r.str(s.AttrStatus)),
				NextDueAt: r.millis(s.AttrNextDue), DLQPending: r.bool(s.AttrDLQPending),
			})
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return refs, nil
}

// translate wraps a backend error: throttling, server errors and
// transport failures (a DynamoDB that cannot be reached; see
// unreachable), which the SDK has already retried, become
// store.ErrUnavailable.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if unreachable(err) {
		return fmt.Errorf("dynamostore: %s: %w: %v", op, store.ErrUnavailable, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException",
			"InternalServerError", "ServiceUnavailable", "LimitExceededException":
			return fmt.Errorf("dynamostore: %s: %w: %v", op, store.ErrUnavailable, err)
		}
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 {
		return fmt.Errorf("dynamostore: %s: %w: %v", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("dynamostore: %s: %w", op, err)
}

// sleep waits d plus jitter, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d + rand.N(d+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
