// The state store (NewStateStore), laid out as package schema defines. Every
// write is conditional; DynamoDB's condition failures are translated here
// into the store's own errors, and nothing above imports SDK error types.

package dynamo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// ExecutionTable names the table (required).
	ExecutionTable string
	// DueShards is the number of partition key values of the sweep and
	// list indexes (schema.DueShardsFor); every process sharing a table
	// must use the same value. Default schema.DefaultDueShards.
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
	// shardsRecorded is set once the meta item holds this process's shard
	// count (recordShards).
	shardsRecorded atomic.Bool
	// shardsRead is the meta item's count as read at shardsAt (shards).
	shardsMu   sync.Mutex
	shardsRead int
	shardsAt   time.Time
	// rates is the last tat this process saw per rate limit bucket
	// (ratelimit.go).
	rates rateCache
}

var _ store.Store = (*StateStore)(nil)

// NewStateStore returns a store on the given tables.
func NewStateStore(db *dynamodb.Client, opts Options) (*StateStore, error) {
	if opts.ExecutionTable == "" {
		return nil, errors.New("dynamo: the execution table name is required")
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
	return map[string]types.AttributeValue{AttrPK: str(pk(k))}
}

// metaKey is the key of the table's one meta item, which records the
// largest shard count any process has written rows with. It is no
// execution's key: a tenant is never empty.
var metaKey = map[string]types.AttributeValue{AttrPK: str("#meta")}

// recordShards makes sure the meta item's shard count is at least this
// process's (once per process, before its first create): a deployment
// that lowers dynamo.capacity-steps-per-second keeps sweeping and listing
// the shards its older rows were written to. It reads first and writes
// only when the record is lower, so that many processes starting at once
// share one read-mostly item.
func (st *StateStore) recordShards(ctx context.Context) error {
	if st.shardsRecorded.Load() {
		return nil
	}
	if n, err := st.recordedShards(ctx); err != nil {
		return err
	} else if n >= st.opts.DueShards {
		st.shardsRecorded.Store(true)
		return nil
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: metaKey,
		UpdateExpression:          aws.String("SET #n = :n"),
		ConditionExpression:       aws.String("attribute_not_exists(#n) OR #n < :n"),
		ExpressionAttributeNames:  map[string]string{"#n": AttrShards},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": num(st.opts.DueShards)},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return translate("record shard count", err)
	}
	st.shardsRecorded.Store(true)
	return nil
}

// recordedShards reads the meta item's shard count (0 when absent).
func (st *StateStore) recordedShards(ctx context.Context) (int, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable, Key: metaKey,
		ProjectionExpression: aws.String("#n"), ExpressionAttributeNames: map[string]string{"#n": AttrShards}})
	if err != nil {
		return 0, translate("read shard count", err)
	}
	r := &reader{item: out.Item}
	return r.int(AttrShards), r.err
}

// shardsTTL is how long a read of the meta item's shard count is used.
const shardsTTL = time.Minute

// shards is the number of index shards to read: this process's, or more
// when the meta item says rows were written with more. The count is read
// at most once a shardsTTL; it only ever grows, and a grown count is
// noticed within that time.
func (st *StateStore) shards(ctx context.Context) (int, error) {
	st.shardsMu.Lock()
	defer st.shardsMu.Unlock()
	now := st.opts.Clock.Now()
	if st.shardsAt.IsZero() || now.Sub(st.shardsAt) >= shardsTTL {
		n, err := st.recordedShards(ctx)
		if err != nil {
			return 0, err
		}
		st.shardsRead, st.shardsAt = n, now
	}
	return max(st.opts.DueShards, st.shardsRead), nil
}

// live reports whether an item's TTL has not passed.
func (st *StateStore) live(item map[string]types.AttributeValue) bool {
	return alive(item, st.opts.Clock.Now())
}

// CreateOrGet implements store.Store with one conditional PutItem of the
// row: absent (or expired). The row is its own idempotency record (its key
// derives from the idempotency key), so nothing else is written. When the
// row exists, the old item DynamoDB returns with the refusal decides:
// another fingerprint is ErrKeyMismatch, the same create token is this
// very create landed earlier (created), anything else a duplicate.
func (st *StateStore) CreateOrGet(ctx context.Context, req store.CreateRequest) (store.Execution, bool, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	e := req.Execution
	if !validKey(e.Key()) {
		return store.Execution{}, false, errors.New("dynamo: create needs a tenant and an execution id without '#'")
	}
	if err := st.recordShards(ctx); err != nil {
		return store.Execution{}, false, err
	}
	for attempt := 0; ; attempt++ {
		_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &st.opts.ExecutionTable, Item: encode(&e, st.opts.DueShards),
			ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR #ttl <= :now"),
			ExpressionAttributeNames:            map[string]string{"#pk": AttrPK, "#ttl": AttrTTL},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(st.opts.Clock.Now())},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return e, true, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return store.Execution{}, false, translate("create", err)
		}
		old := ccf.Item
		if old == nil { // the backend did not return the old item: read it
			if got, gerr := st.Get(ctx, e.Key()); gerr == nil {
				return existing(got, e)
			} else if !errors.Is(gerr, store.ErrNotFound) || attempt >= 3 {
				return store.Execution{}, false, gerr
			}
			continue // it expired between the two calls: create again
		}
		got, err := decode(old)
		if err != nil {
			return store.Execution{}, false, err
		}
		return existing(got, e)
	}
}

// existing resolves a create that found a row with its key.
func existing(got, want store.Execution) (store.Execution, bool, error) {
	if got.Fingerprint != want.Fingerprint {
		return store.Execution{}, false, store.ErrKeyMismatch
	}
	return got, got.CreateToken != "" && got.CreateToken == want.CreateToken, nil
}

// Get implements store.Store with a strongly consistent read.
func (st *StateStore) Get(ctx context.Context, key store.Key) (store.Execution, error) {
	if !validKey(key) {
		return store.Execution{}, store.ErrNotFound
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable, Key: st.key(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return store.Execution{}, translate("get", err)
	}
	if out.Item == nil || !st.live(out.Item) {
		return store.Execution{}, store.ErrNotFound
	}
	e, err := decode(out.Item)
	if err == nil && !store.Answers(key.ExecutionID, e.ExecutionID) {
		return store.Execution{}, store.ErrNotFound // another incarnation of the slot
	}
	return e, err
}

// GetBatch implements store.Store with BatchGetItem (100 keys a request,
// strongly consistent), retrying unprocessed keys.
func (st *StateStore) GetBatch(ctx context.Context, keys []store.Key) ([]store.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	req := make([]map[string]types.AttributeValue, 0, len(keys))
	asked := make(map[string]string, len(keys)) // pk -> the id asked for
	for _, k := range keys {
		if _, dup := asked[pk(k)]; validKey(k) && !dup {
			req = append(req, st.key(k))
			asked[pk(k)] = k.ExecutionID
		}
	}
	items, err := st.batchGet(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]store.Execution, 0, len(items))
	for _, item := range items {
		e, err := decode(item)
		if err != nil {
			return nil, err
		}
		if store.Answers(asked[pk(e.Key())], e.ExecutionID) {
			out = append(out, e)
		}
	}
	return out, nil
}

// batchGet reads the live items of the execution table with these keys
// (BatchGetItem, 100 keys a request, strongly consistent), retrying
// unprocessed keys; missing and expired items are left out.
func (st *StateStore) batchGet(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	for start := 0; start < len(keys); start += 100 {
		req := keys[start:min(start+100, len(keys))]
		for try := 0; len(req) > 0; try++ {
			res, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				st.opts.ExecutionTable: {Keys: req, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return nil, translate("batch get", err)
			}
			for _, item := range res.Responses[st.opts.ExecutionTable] {
				if st.live(item) {
					out = append(out, item)
				}
			}
			req = res.UnprocessedKeys[st.opts.ExecutionTable].Keys
			if len(req) > 0 {
				if try >= 8 {
					return nil, fmt.Errorf("dynamo: batch get: %w: %d keys left unprocessed", store.ErrUnavailable, len(req))
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
// index key (the row's sweep_at stays as it is) unless req.SweepAt moves
// the sweeper's look (after re-dispatches).
func (st *StateStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Execution, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.set(AttrStatus, str(string(store.Running)))
	u.set(AttrLeaseOwner, str(req.Owner))
	u.set(AttrLeaseExpires, millis(req.LeaseUntil))
	u.set(AttrAttempt, num(req.Attempt))
	u.set(AttrReleases, num(req.Releases))
	if !req.SweepAt.IsZero() {
		u.set(AttrSweepAt, millis(req.SweepAt))
		u.set(AttrSweeps, num(0))
	}
	u.set(AttrVersion, num(req.ExpectVersion+1))
	u.set(AttrUpdated, millis(req.Now))
	cond := fmt.Sprintf("%s = %s AND ((%s IN (%s, %s) AND %s <= %s) OR (%s = %s AND %s <= %s)) AND %s",
		u.name(AttrVersion), u.value(num(req.ExpectVersion)),
		u.name(AttrStatus), u.value(str(string(store.Queued))), u.value(str(string(store.WaitRetry))),
		u.name(AttrNextDue), u.value(millis(req.DueBy)),
		u.name(AttrStatus), u.value(str(string(store.Running))),
		u.name(AttrLeaseExpires), u.value(millis(req.TakeoverBy)),
		st.rowCondition(u, req.Key))
	item, err := st.conditionalUpdate(ctx, req.Key, u, cond)
	switch {
	case errors.Is(err, errCondition) && st.found(item, req.Key):
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
	u.set(AttrLeaseExpires, millis(until))
	cond := fmt.Sprintf("%s = %s AND %s = %s AND %s = %s AND %s",
		u.name(AttrLeaseOwner), u.value(str(owner)), u.name(AttrVersion), u.value(num(version)),
		u.name(AttrStatus), u.value(str(string(store.Running))), st.rowCondition(u, key))
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
	u.set(AttrVersion, num(g.Version+1))
	owner := "attribute_not_exists(" + u.name(AttrLeaseOwner) + ")"
	if g.LeaseOwner != "" {
		owner = u.name(AttrLeaseOwner) + " = " + u.value(str(g.LeaseOwner))
	}
	cond := fmt.Sprintf("%s = %s AND %s AND %s", u.name(AttrVersion), u.value(num(g.Version)), owner, st.rowCondition(u, g.Key))
	item, err := st.conditionalUpdate(ctx, g.Key, u, cond)
	switch {
	case errors.Is(err, errCondition) && !st.found(item, g.Key):
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
	u.setOrRemove(AttrSweepAt, !to.IsZero(), millis(to))
	u.set(AttrSweeps, num(sweeps))
	was := "attribute_not_exists(" + u.name(AttrSweepAt) + ")"
	if !from.IsZero() {
		was = u.name(AttrSweepAt) + " = " + u.value(millis(from))
	}
	item, err := st.conditionalUpdate(ctx, key, u, was+" AND "+st.rowCondition(u, key))
	switch {
	case errors.Is(err, errCondition) && !st.found(item, key):
		return store.ErrNotFound
	case errors.Is(err, errCondition):
		return store.ErrConflict
	}
	return err
}

// liveCondition requires the item to exist and not to have expired.
func (st *StateStore) liveCondition(u *update) string {
	return fmt.Sprintf("attribute_exists(%s) AND %s > %s", u.name(AttrPK), u.name(AttrTTL), u.value(seconds(st.opts.Clock.Now())))
}

// rowCondition requires the row to be live and to be the incarnation key
// names (its ic attribute): a writer that read one incarnation of a slot
// never changes another.
func (st *StateStore) rowCondition(u *update, key store.Key) string {
	identity := "attribute_not_exists(" + u.name(AttrIncarnation) + ")"
	if ic := store.Incarnation(key.ExecutionID); ic != "" {
		identity = u.name(AttrIncarnation) + " = " + u.value(str(ic))
	}
	return st.liveCondition(u) + " AND " + identity
}

// found reports whether the old item a refused write returned is the
// live row of key's very incarnation (else the write found no row).
func (st *StateStore) found(item map[string]types.AttributeValue, key store.Key) bool {
	if item == nil || !st.live(item) {
		return false
	}
	k, ok := splitPK((&reader{item: item}).str(AttrPK))
	return ok && withIncarnation(k, item) == key
}

var errCondition = errors.New("dynamo: condition failed")

// conditionalUpdate runs UpdateItem returning the new item, or errCondition
// with the old item (nil when there was none).
func (st *StateStore) conditionalUpdate(ctx context.Context, key store.Key, u *update, cond string) (map[string]types.AttributeValue, error) {
	if !validKey(key) {
		return nil, errCondition // no such row
	}
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
	shards, err := st.shards(ctx)
	if err != nil {
		return store.DuePage{}, err
	}
	cur, err := decodeDueCursor(q.Cursor, shards)
	if err != nil {
		return store.DuePage{}, err
	}
	limit := max(q.Limit, 1)
	type shardPage struct {
		refs []dueItem
		more bool
		err  error
	}
	pages := make([]shardPage, shards)
	var wg sync.WaitGroup
	for shard := range shards {
		if cur[shard].Done {
			continue
		}
		wg.Go(func() {
			refs, more, err := st.dueShard(ctx, shard, q.By, limit, cur[shard].After)
			pages[shard] = shardPage{refs, more, err}
		})
	}
	wg.Wait()
	var errs []error
	for _, p := range pages {
		if p.err != nil {
			errs = append(errs, p.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return store.DuePage{}, err
	}
	// Merge the shards oldest first, taking from each shard a prefix of
	// what it returned: rows with equal sweep times come in DynamoDB's own
	// order, which the next page's ExclusiveStartKey continues, so taking
	// a later row of a shard before an earlier one would skip the earlier.
	var taken []dueItem
	takenPerShard := make([]int, shards)
	for len(taken) < limit {
		best := -1
		for shard, p := range pages {
			if i := takenPerShard[shard]; i < len(p.refs) &&
				(best < 0 || p.refs[i].ref.SweepAt.Before(pages[best].refs[takenPerShard[best]].ref.SweepAt)) {
				best = shard
			}
		}
		if best < 0 {
			break
		}
		it := pages[best].refs[takenPerShard[best]]
		taken = append(taken, it)
		cur[best].After = &it
		takenPerShard[best]++
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

// dueShard reads up to limit entries of one shard due by dueBy, after the
// given entry; more reports that the shard holds more.
func (st *StateStore) dueShard(ctx context.Context, shard int, dueBy time.Time, limit int, after *dueItem) ([]dueItem, bool, error) {
	var refs []dueItem
	in := &dynamodb.QueryInput{
		TableName: &st.opts.ExecutionTable, IndexName: aws.String(s.DueIndexName),
		KeyConditionExpression:   aws.String("#shard = :shard AND #sweep <= :by"),
		ExpressionAttributeNames: map[string]string{"#shard": AttrDueShard, "#sweep": AttrSweepAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":shard": &types.AttributeValueMemberN{Value: strconv.Itoa(shard)}, ":by": millis(dueBy)},
		ScanIndexForward: aws.Bool(true),
		Limit:            aws.Int32(int32(min(limit, 1000))),
	}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			AttrDueShard: num(shard), AttrSweepAt: millis(after.ref.SweepAt),
			AttrPK: str(pk(after.ref.Key)),
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
			key, ok := splitPK(r.str(AttrPK))
			if !ok {
				return refs, false, fmt.Errorf("dynamo: due index entry with a malformed %s", AttrPK)
			}
			// The key names the slot (the index does not hold the
			// incarnation); GetBatch answers it with the slot's live row.
			refs = append(refs, dueItem{shard: shard, ref: store.DueRef{
				Key:        key,
				PipelineID: r.str(AttrPipelineID), SweepAt: r.millis(AttrSweepAt),
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
		return nil, errors.New("dynamo: invalid due cursor (or one from a table with another shard count)")
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
		return fmt.Errorf("dynamo: %s: %w: %v", op, store.ErrUnavailable, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException",
			"InternalServerError", "ServiceUnavailable", "LimitExceededException":
			return fmt.Errorf("dynamo: %s: %w: %v", op, store.ErrUnavailable, err)
		}
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 {
		return fmt.Errorf("dynamo: %s: %w: %v", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("dynamo: %s: %w", op, err)
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
