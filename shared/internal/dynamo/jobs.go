// Operator jobs (store.JobStore) as items of the execution table outside
// both indexes: a job record, its pages of ids, and one item listing the
// active jobs.

package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/store"
)

var _ store.JobStore = (*StateStore)(nil)

// jobsKey is the key of the item listing the active jobs. Like the meta
// item's, it is no execution's key: a tenant is never empty.
var jobsKey = map[string]types.AttributeValue{AttrPK: str("#jobs")}

// jobPK is a job record's partition key; a tenant never holds '#', so no
// execution row has it.
func jobPK(k store.JobKey) string { return "#job#" + k.TenantID + "#" + k.ID }

func jobRef(k store.JobKey) string { return k.TenantID + "#" + k.ID }

// validJob reports whether j can be stored: a valid key, an expiry, and
// state within store.MaxJobState.
func validJob(j store.Job) error {
	if !validJobKey(j.Key) || j.ExpiresAt.IsZero() || len(j.State) > store.MaxJobState {
		return fmt.Errorf("dynamo: a job needs a tenant and an id without '#', an expiry and at most %d bytes of state", store.MaxJobState)
	}
	return nil
}

func validJobKey(k store.JobKey) bool {
	return k.TenantID != "" && k.ID != "" && !strings.Contains(k.TenantID, "#") && !strings.Contains(k.ID, "#")
}

// CreateJob implements store.JobStore: the job joins the active set, then
// its record is written if none lives under its key. A record that could
// not be written leaves a dangling entry, which ActiveJobs removes.
func (st *StateStore) CreateJob(ctx context.Context, j store.Job) error {
	if err := validJob(j); err != nil {
		return err
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	if j.Active {
		if err := st.activeSet(ctx, "ADD", jobRef(j.Key)); err != nil {
			return err
		}
	}
	item := map[string]types.AttributeValue{
		AttrPK: str(jobPK(j.Key)), AttrVersion: num(1), AttrJobActive: boolean(j.Active), AttrJobState: bin(j.State),
		AttrCreated: millis(j.CreatedAt), AttrUpdated: millis(j.UpdatedAt), AttrTTL: seconds(j.ExpiresAt),
	}
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.opts.ExecutionTable, Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR #ttl <= :now"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK, "#ttl": AttrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": seconds(st.opts.Clock.Now())},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return store.ErrConflict
	}
	return translate("create job", err)
}

// GetJob implements store.JobStore with a strongly consistent read.
func (st *StateStore) GetJob(ctx context.Context, key store.JobKey) (store.Job, error) {
	if !validJobKey(key) {
		return store.Job{}, store.ErrNotFound
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable,
		Key: map[string]types.AttributeValue{AttrPK: str(jobPK(key))}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return store.Job{}, translate("get job", err)
	}
	if out.Item == nil || !st.live(out.Item) {
		return store.Job{}, store.ErrNotFound
	}
	return decodeJob(key, out.Item)
}

// UpdateJob implements store.JobStore: one UpdateItem conditional on the
// version. A job that stops being active then leaves the active set (a
// failure there is left to ActiveJobs, which drops inactive entries).
func (st *StateStore) UpdateJob(ctx context.Context, j store.Job, expectVersion int64) (store.Job, error) {
	if err := validJob(j); err != nil {
		return store.Job{}, err
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	u := newUpdate()
	u.set(AttrJobActive, boolean(j.Active))
	u.set(AttrJobState, bin(j.State))
	u.set(AttrUpdated, millis(j.UpdatedAt))
	u.set(AttrVersion, num(expectVersion+1))
	u.set(AttrTTL, seconds(j.ExpiresAt))
	cond := u.name(AttrVersion) + " = " + u.value(num(expectVersion)) + " AND " + st.liveCondition(u)
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: map[string]types.AttributeValue{AttrPK: str(jobPK(j.Key))},
		UpdateExpression: aws.String(u.expression()), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf) && (ccf.Item == nil || !st.live(ccf.Item)):
		return store.Job{}, store.ErrNotFound
	case errors.As(err, &ccf):
		return store.Job{}, store.ErrConflict
	case err != nil:
		return store.Job{}, translate("update job", err)
	}
	if !j.Active {
		_ = st.activeSet(ctx, "DELETE", jobRef(j.Key))
	}
	return decodeJob(j.Key, out.Attributes)
}

// ActiveJobs implements store.JobStore: the "#jobs" item names the active
// jobs (one GetItem, a read unit), their records are read in one
// BatchGetItem, and entries whose job is gone or no longer active are
// removed.
func (st *StateStore) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable, Key: jobsKey, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, translate("read active jobs", err)
	}
	set, _ := out.Item[AttrActiveJobs].(*types.AttributeValueMemberSS)
	if set == nil {
		return nil, nil
	}
	keys := make([]map[string]types.AttributeValue, 0, len(set.Value))
	refs := map[string]store.JobKey{}
	for _, ref := range set.Value {
		tenant, id, ok := strings.Cut(ref, "#")
		k := store.JobKey{TenantID: tenant, ID: id}
		if !ok || !validJobKey(k) {
			continue
		}
		refs[jobPK(k)] = k
		keys = append(keys, map[string]types.AttributeValue{AttrPK: str(jobPK(k))})
	}
	items, err := st.batchGet(ctx, keys)
	if err != nil {
		return nil, err
	}
	var jobs []store.Job
	seen := map[string]bool{}
	for _, item := range items {
		pkv := (&reader{item: item}).str(AttrPK)
		j, err := decodeJob(refs[pkv], item)
		if err != nil {
			return nil, err
		}
		if j.Active {
			seen[jobRef(j.Key)] = true
			jobs = append(jobs, j)
		}
	}
	for _, ref := range set.Value {
		if !seen[ref] {
			_ = st.activeSet(ctx, "DELETE", ref) // gone, expired or finished
		}
	}
	return jobs, nil
}

// activeSet adds a job to (op ADD) or removes it from (DELETE) the
// "#jobs" item's set.
func (st *StateStore) activeSet(ctx context.Context, op, ref string) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &st.opts.ExecutionTable, Key: jobsKey,
		UpdateExpression:          aws.String(op + " #a :r"),
		ExpressionAttributeNames:  map[string]string{"#a": AttrActiveJobs},
		ExpressionAttributeValues: map[string]types.AttributeValue{":r": &types.AttributeValueMemberSS{Value: []string{ref}}},
	})
	return translate("active jobs", err)
}

// PutJobPage implements store.JobStore with one PutItem.
func (st *StateStore) PutJobPage(ctx context.Context, key store.JobKey, n int, ids []string, expires time.Time) error {
	if !validJobKey(key) || n < 0 || len(ids) > store.MaxJobPage {
		return fmt.Errorf("dynamo: job page %d of %d ids: pages are numbered from 0 and hold at most %d", n, len(ids), store.MaxJobPage)
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.opts.ExecutionTable, Item: map[string]types.AttributeValue{
		AttrPK: str(jobPK(key) + "#" + strconv.Itoa(n)), AttrJobIDs: str(strings.Join(ids, "\n")), AttrTTL: seconds(expires),
	}})
	return translate("put job page", err)
}

// JobPage implements store.JobStore with a strongly consistent read.
func (st *StateStore) JobPage(ctx context.Context, key store.JobKey, n int) ([]string, error) {
	if !validJobKey(key) || n < 0 {
		return nil, store.ErrNotFound
	}
	ctx, cancel := st.deadline(ctx)
	defer cancel()
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.opts.ExecutionTable,
		Key: map[string]types.AttributeValue{AttrPK: str(jobPK(key) + "#" + strconv.Itoa(n))}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, translate("get job page", err)
	}
	if out.Item == nil || !st.live(out.Item) {
		return nil, store.ErrNotFound
	}
	r := &reader{item: out.Item}
	joined := r.str(AttrJobIDs)
	if r.err != nil {
		return nil, r.err
	}
	if joined == "" {
		return []string{}, nil
	}
	return strings.Split(joined, "\n"), nil
}

func decodeJob(key store.JobKey, item map[string]types.AttributeValue) (store.Job, error) {
	r := &reader{item: item}
	j := store.Job{
		Key: key, Version: r.int64(AttrVersion), Active: r.bool(AttrJobActive), State: r.bytes(AttrJobState),
		CreatedAt: r.millis(AttrCreated), UpdatedAt: r.millis(AttrUpdated), ExpiresAt: r.seconds(AttrTTL),
	}
	return j, r.err
}
