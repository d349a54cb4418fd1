package dynamo

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/payload"
	s "github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// Attribute value constructors.
func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num[T int | int64](v T) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(int64(v), 10)}
}
func boolean(v bool) types.AttributeValue      { return &types.AttributeValueMemberBOOL{Value: v} }
func bin(v []byte) types.AttributeValue        { return &types.AttributeValueMemberB{Value: v} }
func millis(t time.Time) types.AttributeValue  { return num(t.UnixMilli()) }
func seconds(t time.Time) types.AttributeValue { return num(t.Unix()) }

// dueShard spreads rows over the due index's partitions.
func dueShard(executionID string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(executionID))
	return int(h.Sum32() % uint32(shards))
}

// ref encodes a payload reference as a map attribute.
func ref(r payload.Ref) types.AttributeValue {
	m := map[string]types.AttributeValue{
		"encoding":     str(string(r.Encoding)),
		"content_type": str(r.ContentType),
		"length":       num(r.Length),
		"sha256":       str(r.SHA256),
	}
	if r.Message != "" {
		m["_tpf_message"] = str(r.Message)
	}
	if r.ManifestID != "" {
		m["manifest_id"] = str(r.ManifestID)
		if r.Whole {
			m["whole"] = boolean(true)
		}
	} else {
		m["inline"] = bin(r.Inline)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// encode is the full item of a new execution row.
func encode(e *store.Execution, shards int) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		s.AttrTenantID:        str(e.TenantID),
		s.AttrExecutionID:     str(e.ExecutionID),
		s.AttrPipelineID:      str(e.PipelineID),
		s.AttrIdempotencyKey:  str(e.IdempotencyKey),
		s.AttrPipelineVersion: str(e.PipelineVersion),
		s.AttrDueShard:        num(dueShard(e.ExecutionID, shards)),
		s.AttrInput:           ref(e.Input),
		s.AttrCreated:         millis(e.CreatedAt),
		s.AttrTTL:             seconds(e.ExpiresAt),
		s.AttrVersion:         num(e.Version),
	}
	u := newUpdate()
	mutable(u, e, false)
	for name, v := range u.setValues {
		item[name] = v
	}
	return item
}

// mutable adds to u every field an Update may change: set when present,
// removed when empty, so that the item equals e afterwards. keepSweep
// leaves the sweep index attributes out (as stored). The due shard is
// written once, at submit (encode), and never moves.
func mutable(u *update, e *store.Execution, keepSweep bool) {
	u.set(s.AttrStatus, str(string(e.Status)))
	u.set(s.AttrStepIndex, num(e.StepIndex))
	u.set(s.AttrStepName, str(e.StepName))
	u.set(s.AttrAttempt, num(e.Attempt))
	u.set(s.AttrMaxAttempt, num(e.MaxAttempt))
	u.set(s.AttrDLQPending, boolean(e.DLQPending))
	u.set(s.AttrRedriveCount, num(e.RedriveCount))
	u.set(s.AttrUpdated, millis(e.UpdatedAt))
	u.setOrRemove(s.AttrLastTransitionKey, e.LastTransitionKey != "", str(e.LastTransitionKey))
	u.setOrRemove(s.AttrLeaseOwner, e.LeaseOwner != "", str(e.LeaseOwner))
	u.setOrRemove(s.AttrLeaseExpires, !e.LeaseExpiresAt.IsZero(), millis(e.LeaseExpiresAt))
	u.setOrRemove(s.AttrNextDue, !e.NextDueAt.IsZero(), millis(e.NextDueAt))
	if !keepSweep {
		// The sparse sweep index: the row is in it while sweep_at is set.
		u.setOrRemove(s.AttrSweepAt, !e.SweepAt.IsZero(), millis(e.SweepAt))
		u.set(s.AttrSweeps, num(e.Sweeps))
	}
	u.set(s.AttrReleases, num(e.Releases))
	u.setOrRemove(s.AttrVersionWaitSince, !e.VersionWaitSince.IsZero(), millis(e.VersionWaitSince))
	if !e.ExpiresAt.IsZero() {
		u.set(s.AttrTTL, seconds(e.ExpiresAt))
	}
	u.setOrRemove(s.AttrResult, !e.Result.IsZero(), ref(e.Result))
	var f store.Failure
	if e.Error != nil {
		f = *e.Error
	}
	u.setOrRemove(s.AttrErrorCode, e.Error != nil, str(f.Code))
	u.setOrRemove(s.AttrErrorMessage, e.Error != nil, str(f.Message))
	u.setOrRemove(s.AttrTerminalReason, f.TerminalReason != "", str(f.TerminalReason))
	u.setOrRemove(s.AttrNote, e.Note != "", str(e.Note))
	u.setOrRemove(s.AttrAwait, e.Await != nil, awaitAttr(e.Await))
}

// awaitAttr encodes an external await as a map attribute.
func awaitAttr(a *store.Await) types.AttributeValue {
	if a == nil {
		return nil
	}
	m := map[string]types.AttributeValue{
		"id":         str(a.ID),
		"status":     str(string(a.Status)),
		"late":       boolean(a.Late),
		"step_index": num(a.StepIndex),
	}
	if !a.TimeoutAt.IsZero() {
		m["timeout_epoch_ms"] = millis(a.TimeoutAt)
	}
	if !a.CompletedAt.IsZero() {
		m["completed_epoch_ms"] = millis(a.CompletedAt)
	}
	if a.Digest != "" {
		m["sha256"] = str(a.Digest)
	}
	if !a.LatePayload.IsZero() {
		m["late_payload"] = ref(a.LatePayload)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// await decodes the await map attribute (nil when absent).
func (r *reader) await(name string) *store.Await {
	m, ok := r.item[name].(*types.AttributeValueMemberM)
	if !ok {
		if r.item[name] != nil {
			r.fail(name, "a map")
		}
		return nil
	}
	sub := &reader{item: m.Value}
	a := &store.Await{
		ID: sub.str("id"), Status: store.AwaitStatus(sub.str("status")), Late: sub.bool("late"), StepIndex: sub.int("step_index"),
		TimeoutAt: sub.millis("timeout_epoch_ms"), CompletedAt: sub.millis("completed_epoch_ms"), Digest: sub.str("sha256"),
	}
	if _, ok := m.Value["late_payload"]; ok {
		a.LatePayload = sub.ref("late_payload")
	}
	if sub.err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", name, sub.err)
	}
	return a
}

// reader decodes attributes, remembering the first error.
type reader struct {
	item map[string]types.AttributeValue
	err  error
}

func (r *reader) fail(name, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("dynamostore: attribute %s is not %s", name, want)
	}
}

func (r *reader) str(name string) string {
	switch v := r.item[name].(type) {
	case nil:
		return ""
	case *types.AttributeValueMemberS:
		return v.Value
	}
	r.fail(name, "a string")
	return ""
}

func (r *reader) int64(name string) int64 {
	switch v := r.item[name].(type) {
	case nil:
		return 0
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			r.fail(name, "an integer")
		}
		return n
	}
	r.fail(name, "a number")
	return 0
}

func (r *reader) int(name string) int { return int(r.int64(name)) }

func (r *reader) bool(name string) bool {
	v, ok := r.item[name].(*types.AttributeValueMemberBOOL)
	if !ok && r.item[name] != nil {
		r.fail(name, "a boolean")
	}
	return ok && v.Value
}

func (r *reader) bytes(name string) []byte {
	switch v := r.item[name].(type) {
	case nil:
		return nil
	case *types.AttributeValueMemberB:
		return v.Value
	}
	r.fail(name, "binary")
	return nil
}

func (r *reader) millis(name string) time.Time {
	if _, ok := r.item[name]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(r.int64(name)).UTC()
}

func (r *reader) seconds(name string) time.Time {
	if _, ok := r.item[name]; !ok {
		return time.Time{}
	}
	return time.Unix(r.int64(name), 0).UTC()
}

func (r *reader) ref(name string) payload.Ref {
	m, ok := r.item[name].(*types.AttributeValueMemberM)
	if !ok {
		if r.item[name] != nil {
			r.fail(name, "a map")
		}
		return payload.Ref{}
	}
	sub := &reader{item: m.Value}
	out := payload.Ref{
		Encoding: payload.Encoding(sub.str("encoding")), ContentType: sub.str("content_type"), Message: sub.str("_tpf_message"),
		Length: sub.int64("length"), SHA256: sub.str("sha256"), ManifestID: sub.str("manifest_id"), Inline: sub.bytes("inline"),
		Whole: sub.bool("whole"),
	}
	if out.ManifestID == "" && out.Inline == nil {
		out.Inline = []byte{} // an empty inline payload (DynamoDB returns empty binary as absent or empty)
	}
	if sub.err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", name, sub.err)
	}
	return out
}

// decode reads an execution item.
func decode(item map[string]types.AttributeValue) (store.Execution, error) {
	r := &reader{item: item}
	e := store.Execution{
		TenantID: r.str(s.AttrTenantID), ExecutionID: r.str(s.AttrExecutionID), PipelineID: r.str(s.AttrPipelineID),
		Status: store.Status(r.str(s.AttrStatus)), Version: r.int64(s.AttrVersion),
		StepIndex: r.int(s.AttrStepIndex), StepName: r.str(s.AttrStepName), Attempt: r.int(s.AttrAttempt), MaxAttempt: r.int(s.AttrMaxAttempt),
		LeaseOwner: r.str(s.AttrLeaseOwner), LeaseExpiresAt: r.millis(s.AttrLeaseExpires), NextDueAt: r.millis(s.AttrNextDue),
		SweepAt: r.millis(s.AttrSweepAt), Sweeps: r.int(s.AttrSweeps), PipelineVersion: r.str(s.AttrPipelineVersion),
		Releases: r.int(s.AttrReleases), VersionWaitSince: r.millis(s.AttrVersionWaitSince),
		LastTransitionKey: r.str(s.AttrLastTransitionKey), IdempotencyKey: r.str(s.AttrIdempotencyKey),
		Input: r.ref(s.AttrInput), Result: r.ref(s.AttrResult),
		DLQPending: r.bool(s.AttrDLQPending), Note: r.str(s.AttrNote), RedriveCount: r.int(s.AttrRedriveCount),
		CreatedAt: r.millis(s.AttrCreated), UpdatedAt: r.millis(s.AttrUpdated), ExpiresAt: r.seconds(s.AttrTTL),
		Await: r.await(s.AttrAwait),
	}
	if _, ok := item[s.AttrErrorCode]; ok {
		e.Error = &store.Failure{Code: r.str(s.AttrErrorCode), Message: r.str(s.AttrErrorMessage), TerminalReason: r.str(s.AttrTerminalReason)}
	}
	if _, ok := item[s.AttrResult]; !ok {
		e.Result = payload.Ref{}
	}
	return e, r.err
}

// update builds an UpdateExpression and its condition with placeholders.
type update struct {
	sets      []string
	removes   []string
	setValues map[string]types.AttributeValue
	names     map[string]string
	values    map[string]types.AttributeValue
}

func newUpdate() *update {
	return &update{setValues: map[string]types.AttributeValue{}, names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// name returns the placeholder of an attribute name.
func (u *update) name(attr string) string {
	p := "#" + attr
	u.names[p] = attr
	return p
}

// value returns a new placeholder for v.
func (u *update) value(v types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(u.values))
	u.values[p] = v
	return p
}

func (u *update) set(attr string, v types.AttributeValue) {
	u.setValues[attr] = v
	u.sets = append(u.sets, u.name(attr)+" = "+u.value(v))
}

func (u *update) setOrRemove(attr string, present bool, v types.AttributeValue) {
	if present {
		u.set(attr, v)
		return
	}
	u.removes = append(u.removes, u.name(attr))
}

func (u *update) expression() string {
	expr := ""
	if len(u.sets) > 0 {
		expr = "SET " + strings.Join(u.sets, ", ")
	}
	if len(u.removes) > 0 {
		expr += " REMOVE " + strings.Join(u.removes, ", ")
	}
	return expr
}

// alive reports whether an item's TTL (ttl_epoch_s, whole seconds) has not
// passed at now; DynamoDB deletes expired items lazily, so every read
// checks.
func alive(item map[string]types.AttributeValue, now time.Time) bool {
	exp := (&reader{item: item}).seconds(s.AttrTTL)
	return exp.IsZero() || now.Before(exp)
}

// withDeadline bounds ctx by d unless it already has a deadline.
func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
