package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
)

// Effects is the DynamoDB effect.Log, on a table laid out as
// schema.EffectTable: one item per command, PK command_id, with state,
// version, dispatcher (a map), dispatches, output (a map holding the
// bytes inline, at most effect.MaxOutputBytes), error_code,
// error_message, created_epoch_ms, updated_epoch_ms and ttl_epoch_s.
// Creates are PutItem conditional on absence (or expiry); transitions are
// UpdateItem conditional on the version, returning the current item when
// the condition fails. Expiry is judged at whole seconds, like every TTL
// in this package.
type Effects struct {
	db      *dynamodb.Client
	table   string
	clock   clock.Clock
	timeout time.Duration
}

var _ effect.Log = (*Effects)(nil)

// NewEffects returns an effect log on table; c decides TTL expiry (nil:
// the system clock).
func NewEffects(db *dynamodb.Client, table string, c clock.Clock) *Effects {
	if c == nil {
		c = clock.System{}
	}
	return &Effects{db: db, table: table, clock: c, timeout: 10 * time.Second}
}

func (l *Effects) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return withDeadline(ctx, l.timeout)
}

func (l *Effects) key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrCommandID: str(id)}
}

// live reports whether an item's TTL has not passed.
func (l *Effects) live(item map[string]types.AttributeValue) bool { return alive(item, l.clock.Now()) }

// effectMutable adds to u every field a transition may change: set when
// present, removed when empty.
func effectMutable(u *update, r *effect.Record) {
	u.set(AttrEffectState, str(string(r.State)))
	u.set(AttrDispatches, num(r.Dispatches))
	u.set(AttrUpdated, millis(r.UpdatedAt))
	d := r.Dispatcher
	u.setOrRemove(AttrDispatcher, d != (effect.Dispatcher{}), &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"tenant_id": str(d.TenantID), "execution_id": str(d.ExecutionID), "step_index": num(d.StepIndex),
		"transition_key": str(d.TransitionKey), "fencing_token": num(d.FencingToken),
	}})
	o := r.Output
	out := map[string]types.AttributeValue{"encoding": str(string(o.Encoding)), "content_type": str(o.ContentType)}
	if o.Message != "" {
		out["_tpf_message"] = str(o.Message)
	}
	if len(o.Data) > 0 {
		out["data"] = bin(o.Data)
	}
	u.setOrRemove(AttrEffectOutput, o.Encoding != "" || o.ContentType != "" || len(o.Data) > 0, &types.AttributeValueMemberM{Value: out})
	var f effect.Failure
	if r.Error != nil {
		f = *r.Error
	}
	u.setOrRemove(AttrErrorCode, r.Error != nil, str(f.Code))
	u.setOrRemove(AttrErrorMessage, r.Error != nil && f.Message != "", str(f.Message))
}

// decodeEffect reads an effect item.
func decodeEffect(item map[string]types.AttributeValue) (effect.Record, error) {
	r := &reader{item: item}
	rec := effect.Record{
		CommandID: r.str(AttrCommandID), State: effect.State(r.str(AttrEffectState)), Version: r.int64(AttrEffectVersion),
		Dispatches: r.int(AttrDispatches), CreatedAt: r.millis(AttrCreated), UpdatedAt: r.millis(AttrUpdated),
		ExpiresAt: r.seconds(AttrTTL),
	}
	if m, ok := item[AttrDispatcher].(*types.AttributeValueMemberM); ok {
		d := &reader{item: m.Value}
		rec.Dispatcher = effect.Dispatcher{TenantID: d.str("tenant_id"), ExecutionID: d.str("execution_id"), StepIndex: d.int("step_index"),
			TransitionKey: d.str("transition_key"), FencingToken: d.int64("fencing_token")}
		if d.err != nil && r.err == nil {
			r.err = fmt.Errorf("%s: %w", AttrDispatcher, d.err)
		}
	} else if item[AttrDispatcher] != nil {
		r.fail(AttrDispatcher, "a map")
	}
	if m, ok := item[AttrEffectOutput].(*types.AttributeValueMemberM); ok {
		o := &reader{item: m.Value}
		rec.Output = payload.Payload{Encoding: payload.Encoding(o.str("encoding")), ContentType: o.str("content_type"),
			Message: o.str("_tpf_message"), Data: o.bytes("data")}
		if o.err != nil && r.err == nil {
			r.err = fmt.Errorf("%s: %w", AttrEffectOutput, o.err)
		}
	} else if item[AttrEffectOutput] != nil {
		r.fail(AttrEffectOutput, "a map")
	}
	if _, ok := item[AttrErrorCode]; ok {
		rec.Error = &effect.Failure{Code: r.str(AttrErrorCode), Message: r.str(AttrErrorMessage)}
	}
	return rec, r.err
}

// CreateOrGet implements effect.Log with a PutItem conditional on no live
// record with the id existing; when one exists it is returned (from the
// failed condition's old item, or a consistent read).
func (l *Effects) CreateOrGet(ctx context.Context, rec effect.Record) (effect.Record, bool, error) {
	if err := rec.Check(); err != nil {
		return effect.Record{}, false, fmt.Errorf("dynamo: %w", err)
	}
	ctx, cancel := l.deadline(ctx)
	defer cancel()
	rec.Version = 1
	u := newUpdate()
	effectMutable(u, &rec)
	item := u.setValues
	item[AttrCommandID] = str(rec.CommandID)
	item[AttrEffectVersion] = num(rec.Version)
	item[AttrCreated] = millis(rec.CreatedAt)
	if !rec.ExpiresAt.IsZero() {
		item[AttrTTL] = seconds(rec.ExpiresAt)
	}
	for attempt := 0; ; attempt++ {
		_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &l.table, Item: item,
			ConditionExpression:                 aws.String("attribute_not_exists(#id) OR #ttl <= :now"),
			ExpressionAttributeNames:            map[string]string{"#id": AttrCommandID, "#ttl": AttrTTL},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(l.clock.Now())},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return rec, true, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return effect.Record{}, false, translate("create command", err)
		}
		if ccf.Item != nil && l.live(ccf.Item) {
			got, err := decodeEffect(ccf.Item)
			if err == nil && !got.ExpiresAt.IsZero() && rec.ExpiresAt.After(got.ExpiresAt) {
				got, err = l.extend(ctx, got, rec.ExpiresAt)
			}
			return got, false, err
		}
		got, err := l.Get(ctx, rec.CommandID)
		if err == nil || !errors.Is(err, effect.ErrNotFound) || attempt >= 2 {
			return got, false, err
		}
		// It expired (or was deleted) between the write and the read: create again.
	}
}

// extend moves a live record's expiry to until (one UpdateItem of the
// TTL, conditional on it being earlier), for CreateOrGet: the execution
// that may run the command's step again lives longer than planned. Only
// then does CreateOrGet write besides the create.
func (l *Effects) extend(ctx context.Context, rec effect.Record, until time.Time) (effect.Record, error) {
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &l.table, Key: l.key(rec.CommandID),
		UpdateExpression:          aws.String("SET #ttl = :until"),
		ConditionExpression:       aws.String("attribute_exists(#id) AND #ttl < :until"),
		ExpressionAttributeNames:  map[string]string{"#id": AttrCommandID, "#ttl": AttrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": seconds(until)},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return l.Get(ctx, rec.CommandID) // moved meanwhile: what is stored now
	case err != nil:
		return effect.Record{}, translate("extend command", err)
	}
	rec.ExpiresAt = time.Unix(until.Unix(), 0).UTC()
	return rec, nil
}

// Get implements effect.Log with a strongly consistent read.
func (l *Effects) Get(ctx context.Context, id string) (effect.Record, error) {
	if id == "" {
		return effect.Record{}, fmt.Errorf("dynamo: command with an empty id: %w", effect.ErrNotFound)
	}
	ctx, cancel := l.deadline(ctx)
	defer cancel()
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: l.key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return effect.Record{}, translate("get command", err)
	}
	if out.Item == nil || !l.live(out.Item) {
		return effect.Record{}, fmt.Errorf("dynamo: command %s: %w", id, effect.ErrNotFound)
	}
	return decodeEffect(out.Item)
}

// Transition implements effect.Log with one UpdateItem conditional on the
// version (and on the record being live); a failed condition returns the
// old item as the current record.
func (l *Effects) Transition(ctx context.Context, expect int64, next effect.Record) (effect.Record, error) {
	if err := next.Check(); err != nil {
		return effect.Record{}, fmt.Errorf("dynamo: %w", err)
	}
	ctx, cancel := l.deadline(ctx)
	defer cancel()
	u := newUpdate()
	effectMutable(u, &next)
	u.set(AttrEffectVersion, num(expect+1))
	cond := "attribute_exists(" + u.name(AttrCommandID) + ") AND " + u.name(AttrEffectVersion) + " = " + u.value(num(expect)) +
		" AND (attribute_not_exists(" + u.name(AttrTTL) + ") OR " + u.name(AttrTTL) + " > " + u.value(seconds(l.clock.Now())) + ")"
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &l.table, Key: l.key(next.CommandID),
		UpdateExpression: aws.String(u.expression()), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		old := ccf.Item
		if old == nil { // an older DynamoDB without ReturnValuesOnConditionCheckFailure
			cur, gerr := l.Get(ctx, next.CommandID)
			if gerr != nil {
				return effect.Record{}, gerr
			}
			return cur, fmt.Errorf("dynamo: command %s at version %d, not %d: %w", next.CommandID, cur.Version, expect, effect.ErrConflict)
		}
		if !l.live(old) {
			return effect.Record{}, fmt.Errorf("dynamo: command %s: %w", next.CommandID, effect.ErrNotFound)
		}
		cur, derr := decodeEffect(old)
		if derr != nil {
			return effect.Record{}, derr
		}
		return cur, fmt.Errorf("dynamo: command %s at version %d, not %d: %w", next.CommandID, cur.Version, expect, effect.ErrConflict)
	}
	if err != nil {
		return effect.Record{}, translate("transition command", err)
	}
	return decodeEffect(out.Attributes)
}
