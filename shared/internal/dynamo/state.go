// The state store (NewStateStore), laid out as package schema defines. Every
// write is conditional; DynamoDB's condition failures are translated here
// into the store's own errors, and nothing above imports SDK error types.

package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
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

func (st *StateStore) key(k store.Key) map[string]types.AttributeValue {
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
func (st *StateStore) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
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
	// The client token makes a retried transaction (the SDK's, after a
	// timeout or a 5xx) that had in fact committed succeed again instead of
	// failing on the key it wrote itself; DynamoDB keeps tokens 10 minutes.
	// The token is derived from the table and the row's key (tokens are
	// scoped to the account; at most 36 characters).
	token := sha256.Sum256([]byte(store.KeyID(st.opts.ExecutionTable, store.KeyID(e.TenantID, e.ExecutionID))))
	in := &dynamodb.TransactWriteItemsInput{ClientRequestToken: aws.String(hex.EncodeToString(token[:18])), TransactItems: []types.TransactWriteItem{
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
			return store.Execution{}, false, translate("create", err)
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
			// The key names this very execution: an earlier try of this
			// transaction landed (its outcome was unknown to the caller).
			return got, err == nil && got.ExecutionID == e.ExecutionID, err
		case code(0) == "ConditionalCheckFailed":
			return store.Execution{}, false, fmt.Errorf("dynamostore: execution %s exists: %w", e.Key(), store.ErrConflict)
		case (code(0) == "TransactionConflict" || code(1) == "TransactionConflict") && attempt < 8:
			// A concurrent transaction on the same key (a duplicate submit in
			// flight): back off and decide again.
			if err := sleep(ctx, time.Duration(5<<attempt)*time.Millisecond); err != nil {
				return store.Execution{}, false, err
			}
		default:
			return store.Execution{}, false, translate("create", err)
		}
	}
}

var errRaced = errors.New("dynamostore: key changed while being read")

// existing resolves a taken idempotency key to its execution.
func (st *StateStore) existing(ctx context.Context, kid string, keyItem map[string]types.AttributeValue, fingerprint string) (store.Execution, error) {
	if keyItem == nil { // the backend did not return the old item: read it
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.KeyTable, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{s.AttrKeyID: str(kid)}})
		if err != nil {
			return store.Execution{}, translate("read key", err)
		}
		keyItem = out.Item
	}
	if keyItem == nil || !st.live(keyItem) {
		return store.Execution{}, errRaced
	}
	r := &reader{item: keyItem}
	if r.str(s.AttrFingerprint) != fingerprint {
		return store.Execution{}, store.ErrKeyMismatch
	}
	e, err := st.Get(ctx, store.Key{TenantID: r.str(s.AttrTenantID), ExecutionID: r.str(s.AttrExecutionID)})
	if errors.Is(err, store.ErrNotFound) {
		return e, errRaced
	}
	return e, err
}

// Get implements store.Store with a strongly consistent read.
func (st *StateStore) Get(ctx context.Context, key store.Key) (store.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable, Key: st.key(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return store.Execution{}, translate("get", err)
	}
	if out.Item == nil || !st.live(out.Item) {
		return store.Execution{}, store.ErrNotFound
	}
	return decode(out.Item)
}

// GetBatch implements store.Store with BatchGetItem (100 keys a request,
// strongly consistent), retrying unprocessed keys.
func (st *StateStore) GetBatch(ctx context.Context, keys []store.Key) ([]store.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	var out []store.Execution
	for start := 0; start < len(keys); start += 100 {
		var req []map[string]types.AttributeValue
		for _, k := range keys[start:min(start+100, len(keys))] {
			req = append(req, st.key(k))
		}
		for try := 0; len(req) > 0; try++ {
			res, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				st.opts.ExecutionTable: {Keys: req, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return nil, translate("batch get", err)
			}
			for _, item := range res.Responses[st.opts.ExecutionTable] {
				if !st.live(item) {
					continue
				}
				e, err := decode(item)
				if err != nil {
					return nil, err
				}
				out = append(out, e)
			}
			req = res.UnprocessedKeys[st.opts.ExecutionTable].Keys
			if len(req) > 0 {
				if try >= 8 {
					return nil, fmt.Errorf("dynamostore: batch get: %w: %d keys left unprocessed", store.ErrUnavailable, len(req))
				}
				if err := sleep(ctx, time.Duration(10<<try)*time.Millisecond); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// Claim implements store.Store as one conditional UpdateItem. It writes no
// index key: the row's sweep_at stays as it is.
func (st *StateStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.set(s.AttrStatus, str(string(store.Running)))
	u.set(s.AttrLeaseOwner, str(req.Owner))
	u.set(s.AttrLeaseExpires, millis(req.LeaseUntil))
	u.set(s.AttrAttempt, num(req.Attempt))
	u.set(s.AttrReleases, num(req.Releases))
	u.set(s.AttrVersion, num(req.ExpectVersion+1))
	u.set(s.AttrUpdated, millis(req.Now))
	cond := fmt.Sprintf("%s = %s AND ((%s IN (%s, %s) AND %s <= %s) OR (%s = %s AND %s <= %s)) AND %s",
		u.name(s.AttrVersion), u.value(num(req.ExpectVersion)),
		u.name(s.AttrStatus), u.value(str(string(store.Queued))), u.value(str(string(store.WaitRetry))),
		u.name(s.AttrNextDue), u.value(millis(req.DueBy)),
		u.name(s.AttrStatus), u.value(str(string(store.Running))),
		u.name(s.AttrLeaseExpires), u.value(millis(req.TakeoverBy)),
		st.liveCondition(u))
	item, err := st.conditionalUpdate(ctx, req.Key, u, cond)
	switch {
	case errors.Is(err, errCondition) && item != nil && st.live(item):
		return store.Execution{}, store.ErrConflict
	case errors.Is(err, errCondition):
		return store.Execution{}, store.ErrNotFound
	case err != nil:
		return store.Execution{}, err
	}
	return decode(item)
}

// Renew implements store.Store; it moves the lease expiry only.
func (st *StateStore) Renew(ctx context.Context, key store.Key, owner string, version int64, until time.Time) error {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.set(s.AttrLeaseExpires, millis(until))
	cond := fmt.Sprintf("%s = %s AND %s = %s AND %s = %s AND %s",
		u.name(s.AttrLeaseOwner), u.value(str(owner)), u.name(s.AttrVersion), u.value(num(version)),
		u.name(s.AttrStatus), u.value(str(string(store.Running))), st.liveCondition(u))
	_, err := st.conditionalUpdate(ctx, key, u, cond)
	if errors.Is(err, errCondition) {
		return store.ErrLeaseLost
	}
	return err
}

// Update implements store.Store: every mutable attribute is set (or
// removed when empty), conditional on version and lease owner; with
// KeepSweep the sweep index attributes are left out of the write.
func (st *StateStore) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	mutable(u, &next, g.KeepSweep)
	u.set(s.AttrVersion, num(g.Version+1))
	owner := "attribute_not_exists(" + u.name(s.AttrLeaseOwner) + ")"
	if g.LeaseOwner != "" {
		owner = u.name(s.AttrLeaseOwner) + " = " + u.value(str(g.LeaseOwner))
	}
	cond := fmt.Sprintf("%s = %s AND %s AND %s", u.name(s.AttrVersion), u.value(num(g.Version)), owner, st.liveCondition(u))
	item, err := st.conditionalUpdate(ctx, g.Key, u, cond)
	switch {
	case errors.Is(err, errCondition) && (item == nil || !st.live(item)):
		return store.Execution{}, store.ErrNotFound
	case errors.Is(err, errCondition) && g.LeaseOwner != "":
		return store.Execution{}, store.ErrLeaseLost
	case errors.Is(err, errCondition):
		return store.Execution{}, store.ErrConflict
	case err != nil:
		return store.Execution{}, err
	}
	return decode(item)
}

// Reschedule implements store.Store: one UpdateItem of sweep_at and
// sweep_count, conditional on sweep_at still being from.
func (st *StateStore) Reschedule(ctx context.Context, key store.Key, from, to time.Time, sweeps int) error {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.setOrRemove(s.AttrSweepAt, !to.IsZero(), millis(to))
	u.set(s.AttrSweeps, num(sweeps))
	was := "attribute_not_exists(" + u.name(s.AttrSweepAt) + ")"
	if !from.IsZero() {
		was = u.name(s.AttrSweepAt) + " = " + u.value(millis(from))
	}
	item, err := st.conditionalUpdate(ctx, key, u, was+" AND "+st.liveCondition(u))
	switch {
	case errors.Is(err, errCondition) && (item == nil || !st.live(item)):
		return store.ErrNotFound
	case errors.Is(err, errCondition):
		return store.ErrConflict
	}
	return err
}

// liveCondition requires the row to exist and not to have expired.
func (st *StateStore) liveCondition(u *update) string {
	return fmt.Sprintf("attribute_exists(%s) AND %s > %s", u.name(s.AttrTenantID), u.name(s.AttrTTL), u.value(seconds(st.opts.Clock.Now())))
}

var errCondition = errors.New("dynamostore: condition failed")

// conditionalUpdate runs UpdateItem returning the new item, or errCondition
// with the old item (nil when there was none).
func (st *StateStore) conditionalUpdate(ctx context.Context, key store.Key, u *update, cond string) (map[string]types.AttributeValue, error) {
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

// Due implements store.Store: one Query per shard of the sweep index (in
// parallel) for the rows not yet returned, merged oldest first. The cursor
// holds, per shard, the last row returned (or that the shard is done). It
// never scans the table.
func (st *StateStore) Due(ctx context.Context, q store.DueQuery) (store.DuePage, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	cur, err := decodeDueCursor(q.Cursor, st.opts.DueShards)
	if err != nil {
		return store.DuePage{}, err
	}
	limit := max(q.Limit, 1)
	type shardPage struct {
		refs []dueItem
		more bool
		err  error
	}
	pages := make([]shardPage, st.opts.DueShards)
	var wg sync.WaitGroup
	for shard := range st.opts.DueShards {
		if cur[shard].Done {
			continue
		}
		wg.Go(func() {
			refs, more, err := st.dueShard(ctx, shard, q.By, limit, cur[shard].After)
			pages[shard] = shardPage{refs, more, err}
		})
	}
	wg.Wait()
	var all []dueItem
	var errs []error
	for _, p := range pages {
		if p.err != nil {
			errs = append(errs, p.err)
		}
		all = append(all, p.refs...)
	}
	if err := errors.Join(errs...); err != nil {
		return store.DuePage{}, err
	}
	sort.Slice(all, func(i, j int) bool { return dueItemLess(all[i], all[j]) })
	taken := all[:min(limit, len(all))]
	takenPerShard := make([]int, st.opts.DueShards)
	for _, it := range taken {
		c := it
		cur[it.shard].After = &c
		takenPerShard[it.shard]++
	}
	for shard, p := range pages {
		// A shard is done when it holds nothing after what was taken.
		if !p.more && takenPerShard[shard] == len(p.refs) {
			cur[shard].Done = true
		}
	}
	page := store.DuePage{Refs: make([]store.DueRef, len(taken))}
	for i, it := range taken {
		page.Refs[i] = it.ref
	}
	for _, c := range cur {
		if !c.Done {
			page.Cursor = encodeDueCursor(cur)
			break
		}
	}
	return page, nil
}

// dueItem is a sweep index entry with the shard it came from.
type dueItem struct {
	ref   store.DueRef
	shard int
}

func dueItemLess(a, b dueItem) bool {
	if a.ref.SweepAt.UnixMilli() != b.ref.SweepAt.UnixMilli() {
		return a.ref.SweepAt.UnixMilli() < b.ref.SweepAt.UnixMilli()
	}
	return a.ref.Key.String() < b.ref.Key.String()
}

// dueShard reads up to limit entries of one shard due by dueBy, after the
// given entry; more reports that the shard holds more.
func (st *StateStore) dueShard(ctx context.Context, shard int, dueBy time.Time, limit int, after *dueItem) ([]dueItem, bool, error) {
	var refs []dueItem
	in := &dynamodb.QueryInput{
		TableName: &st.opts.ExecutionTable, IndexName: aws.String(s.DueIndexName),
		KeyConditionExpression:   aws.String("#shard = :shard AND #sweep <= :by"),
		ExpressionAttributeNames: map[string]string{"#shard": s.AttrDueShard, "#sweep": s.AttrSweepAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":shard": &types.AttributeValueMemberN{Value: strconv.Itoa(shard)}, ":by": millis(dueBy)},
		ScanIndexForward: aws.Bool(true),
		Limit:            aws.Int32(int32(min(limit, 1000))),
	}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			s.AttrDueShard: num(shard), s.AttrSweepAt: millis(after.ref.SweepAt),
			s.AttrTenantID: str(after.ref.Key.TenantID), s.AttrExecutionID: str(after.ref.Key.ExecutionID),
		}
	}
	for {
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return refs, false, translate("due query", err)
		}
		st.dueItemsRead.Add(int64(out.ScannedCount))
		for _, item := range out.Items {
			r := &reader{item: item}
			refs = append(refs, dueItem{shard: shard, ref: store.DueRef{
				Key:        store.Key{TenantID: r.str(s.AttrTenantID), ExecutionID: r.str(s.AttrExecutionID)},
				PipelineID: r.str(s.AttrPipelineID), SweepAt: r.millis(s.AttrSweepAt),
			}})
		}
		if len(refs) >= limit {
			return refs[:limit], len(refs) > limit || out.LastEvaluatedKey != nil, nil
		}
		if out.LastEvaluatedKey == nil {
			return refs, false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// dueCursor is the position of a Due pass in each shard.
type dueCursor struct {
	Done  bool     `json:"d,omitempty"`
	After *dueItem `json:"-"`
	// Serialized form of After.
	At   int64  `json:"t,omitempty"`
	Ten  string `json:"k,omitempty"`
	Exec string `json:"e,omitempty"`
}

func encodeDueCursor(cur []dueCursor) string {
	for i := range cur {
		if a := cur[i].After; a != nil {
			cur[i].At, cur[i].Ten, cur[i].Exec = a.ref.SweepAt.UnixMilli(), a.ref.Key.TenantID, a.ref.Key.ExecutionID
		}
	}
	b, _ := json.Marshal(cur) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeDueCursor(c string, shards int) ([]dueCursor, error) {
	cur := make([]dueCursor, shards)
	if c == "" {
		return cur, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		err = json.Unmarshal(b, &cur)
	}
	if err != nil || len(cur) != shards {
		return nil, errors.New("dynamostore: invalid due cursor (or one from a table with another shard count)")
	}
	for i := range cur {
		if cur[i].Exec != "" {
			cur[i].After = &dueItem{shard: i, ref: store.DueRef{SweepAt: time.UnixMilli(cur[i].At),
				Key: store.Key{TenantID: cur[i].Ten, ExecutionID: cur[i].Exec}}}
		}
	}
	return cur, nil
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
