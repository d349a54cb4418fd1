// Listing (store.Lister) from the list index, which the submit writes once
// per execution and no step ever touches.

package dynamo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	s "github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// listRounds bounds the rounds of one List call: each round reads at most
// one index page per bucket (of the rows still wanted) and the rows it
// found, so a call reads at most listRounds x (buckets + 1) x Limit items
// however sparse the filters' matches are; a page may then hold fewer
// rows than the limit and still have a cursor.
const listRounds = 4

// List implements store.Lister. The list index holds every row under
// "<tenant>#<bucket>" with its creation time as sort key, buckets fixed at
// submit (schema.ListIndexName). Each round queries the buckets not yet
// exhausted in parallel, newest first from where the cursor left each
// (the pipeline filter applied by DynamoDB on the index's projected
// pipeline id, the created range in the key condition), merges them
// newest first, reads the rows it picked (BatchGetItem, strongly
// consistent) and keeps those that pass every filter (the status, which
// no index holds, among them). The merge takes from each bucket a prefix
// of what it returned, since rows created in the same millisecond come
// in DynamoDB's own order, which the next page's ExclusiveStartKey
// continues; and it takes no row older than where a bucket it has used
// up stopped reading, since that bucket's unread rows may be newer. The
// cursor holds, per bucket, the last index entry consumed (or that the
// bucket is done) and the query's fingerprint.
func (st *StateStore) List(ctx context.Context, q store.ListQuery) (store.ListPage, error) {
	if err := q.Validate(); err != nil {
		return store.ListPage{}, err
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	shards, err := st.shards(ctx)
	if err != nil {
		return store.ListPage{}, err
	}
	cur, err := decodeListCursor(q.Cursor, q.Fingerprint(), shards)
	if err != nil {
		return store.ListPage{}, err
	}
	from, to, empty := q.CreatedRange()
	if empty {
		return store.ListPage{}, nil
	}
	limit := q.PageSize()
	var page store.ListPage
	for round := 0; round < listRounds && len(page.Executions) < limit && !cur.done(); round++ {
		picked, err := st.listRound(ctx, q, cur, limit-len(page.Executions), from, to)
		if err != nil {
			return store.ListPage{}, err
		}
		keys := make([]store.Key, len(picked))
		for i, it := range picked {
			keys[i] = it.key
		}
		rows, err := st.GetBatch(ctx, keys)
		if err != nil {
			return store.ListPage{}, err
		}
		bySlot := make(map[store.Key]store.Execution, len(rows))
		for _, r := range rows {
			bySlot[store.Key{TenantID: r.TenantID, ExecutionID: store.Slot(r.ExecutionID)}] = r
		}
		for _, it := range picked {
			if r, ok := bySlot[it.key]; ok && q.Matches(&r) {
				page.Executions = append(page.Executions, r)
			}
		}
	}
	if !cur.done() {
		page.Cursor = cur.encode()
	}
	return page, nil
}

// listItem is a list index entry: its row's key and creation time.
type listItem struct {
	key store.Key
	at  int64
}

// listBucketPage is what one bucket's query returned.
type listBucketPage struct {
	items []listItem
	// more: the bucket holds entries after last, the last entry the query
	// evaluated (returned or dropped by the pipeline filter).
	more bool
	last listItem
	err  error
}

// listRound reads one index page of each bucket not done, merges them and
// returns up to need entries newest first, moving cur past what it
// consumed.
func (st *StateStore) listRound(ctx context.Context, q store.ListQuery, cur *listCursor, need int, from, to int64) ([]listItem, error) {
	pages := make([]listBucketPage, len(cur.Buckets))
	var wg sync.WaitGroup
	for b := range cur.Buckets {
		if cur.Buckets[b].Done {
			continue
		}
		wg.Go(func() { pages[b] = st.queryListBucket(ctx, q, b, cur.Buckets[b].after(q.TenantID), need, from, to) })
	}
	wg.Wait()
	var errs []error
	for _, p := range pages {
		errs = append(errs, p.err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var picked []listItem
	taken := make([]int, len(pages))
	for len(picked) < need {
		best := -1
		for b, p := range pages {
			if i := taken[b]; i < len(p.items) && (best < 0 || p.items[i].at > pages[best].items[taken[best]].at) {
				best = b
			}
		}
		if best < 0 {
			break
		}
		head := pages[best].items[taken[best]]
		blocked := false
		for b, p := range pages {
			// A bucket whose page is used up but which has more may hold
			// unread rows newer than head.
			blocked = blocked || (!cur.Buckets[b].Done && p.more && taken[b] == len(p.items) && head.at < p.last.at)
		}
		if blocked {
			break
		}
		picked = append(picked, head)
		taken[best]++
	}
	for b, p := range pages {
		c := &cur.Buckets[b]
		switch {
		case c.Done:
		case taken[b] == len(p.items) && !p.more:
			c.Done = true
		case taken[b] == len(p.items):
			c.set(p.last) // past the entries the filter dropped as well
		case taken[b] > 0:
			c.set(p.items[taken[b]-1])
		}
	}
	return picked, nil
}

// queryListBucket queries one bucket of the list index: one page of at most
// need entries evaluated, newest first, after after (nil: from the
// newest).
func (st *StateStore) queryListBucket(ctx context.Context, q store.ListQuery, bucket int, after *listItem, need int, from, to int64) listBucketPage {
	names := map[string]string{"#lk": AttrListKey}
	values := map[string]types.AttributeValue{":lk": str(q.TenantID + "#" + strconv.Itoa(bucket))}
	cond := "#lk = :lk"
	if from != math.MinInt64 || to != math.MaxInt64 {
		names["#c"] = AttrCreated
	}
	switch {
	case from != math.MinInt64 && to != math.MaxInt64:
		cond += " AND #c BETWEEN :from AND :to"
		values[":from"], values[":to"] = num(from), num(to)
	case from != math.MinInt64:
		cond += " AND #c >= :from"
		values[":from"] = num(from)
	case to != math.MaxInt64:
		cond += " AND #c <= :to"
		values[":to"] = num(to)
	}
	in := &dynamodb.QueryInput{
		TableName: &st.opts.ExecutionTable, IndexName: aws.String(s.ListIndexName),
		KeyConditionExpression: aws.String(cond), ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ScanIndexForward: aws.Bool(false),
		Limit:            aws.Int32(int32(max(need, 1))),
	}
	if q.PipelineID != "" {
		in.FilterExpression = aws.String("#p = :p")
		names["#p"], values[":p"] = AttrPipelineID, str(q.PipelineID)
	}
	if after != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			AttrListKey: str(q.TenantID + "#" + strconv.Itoa(bucket)), AttrCreated: num(after.at), AttrPK: str(pk(after.key)),
		}
	}
	out, err := st.db.Query(ctx, in)
	if err != nil {
		return listBucketPage{err: translate("list query", err)}
	}
	var p listBucketPage
	for _, item := range out.Items {
		it, err := decodeListItem(item)
		if err != nil {
			return listBucketPage{err: err}
		}
		p.items = append(p.items, it)
	}
	if out.LastEvaluatedKey != nil {
		last, err := decodeListItem(out.LastEvaluatedKey)
		if err != nil {
			return listBucketPage{err: err}
		}
		p.more, p.last = true, last
	}
	return p
}

func decodeListItem(item map[string]types.AttributeValue) (listItem, error) {
	r := &reader{item: item}
	key, ok := splitPK(r.str(AttrPK))
	at := r.int64(AttrCreated)
	if !ok || r.err != nil {
		return listItem{}, fmt.Errorf("dynamo: list index entry with a malformed %s or %s", AttrPK, AttrCreated)
	}
	// The key names the slot: the index does not hold the incarnation
	// (see schema.ExecutionTable), and the row read next is the slot's.
	return listItem{key: key, at: at}, nil
}

// listCursor is the position of a list query in each bucket.
type listCursor struct {
	Query   string       `json:"q"`
	Buckets []listBucket `json:"b"`
}

// listBucket is one bucket's position: done, or after the entry of
// execution Exec created at At ("" before the first page).
type listBucket struct {
	Done bool   `json:"d,omitempty"`
	At   int64  `json:"c,omitempty"`
	Exec string `json:"e,omitempty"`
}

func (b *listBucket) set(it listItem) { b.At, b.Exec = it.at, it.key.ExecutionID }

func (b *listBucket) after(tenant string) *listItem {
	if b.Exec == "" {
		return nil
	}
	return &listItem{key: store.Key{TenantID: tenant, ExecutionID: b.Exec}, at: b.At}
}

func (c *listCursor) done() bool {
	for _, b := range c.Buckets {
		if !b.Done {
			return false
		}
	}
	return true
}

func (c *listCursor) encode() string {
	b, _ := json.Marshal(c) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeListCursor reads a cursor of query (its fingerprint) over shards
// buckets; "" starts the query.
func decodeListCursor(c, query string, shards int) (*listCursor, error) {
	if c == "" {
		return &listCursor{Query: query, Buckets: make([]listBucket, shards)}, nil
	}
	var cur listCursor
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		err = json.Unmarshal(b, &cur)
	}
	if err != nil || cur.Query != query || len(cur.Buckets) != shards {
		return nil, fmt.Errorf("dynamo: %w: not a cursor of this list query (or of a table with another shard count)", store.ErrInvalidCursor)
	}
	return &cur, nil
}
