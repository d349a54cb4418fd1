package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// Attribute value constructors.
func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num[T int | int64](v T) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(int64(v), 10)}
}
func boolean(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }
func bin(v []byte) types.AttributeValue {
	if v == nil {
		v = []byte{} // the SDK leaves a nil value out, which DynamoDB refuses
	}
	return &types.AttributeValueMemberB{Value: v}
}
func millis(t time.Time) types.AttributeValue  { return num(t.UnixMilli()) }
func seconds(t time.Time) types.AttributeValue { return num(t.Unix()) }

// dueShard spreads rows over the due index's partitions.
func dueShard(executionID string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(executionID))
	return int(h.Sum32() % uint32(shards))
}

// Keys of a payload reference's map attribute. They are one or two
// letters for the reason the row's attribute names are (see package
// schema): a reference rides in every write of the row.
const (
	refEncoding    = "e"
	refContentType = "c"
	refMessage     = "m"
	refLength      = "l"
	refSHA256      = "h"  // 32 bytes, binary
	refSHA256Text  = "hs" // a digest that is not 64 hex digits, as written
	refInline      = "d"
	refManifest    = "id"
	refWhole       = "w"
)

// ref encodes a payload reference as a map attribute.
func ref(r payload.Ref) types.AttributeValue {
	m := map[string]types.AttributeValue{
		refEncoding: str(string(r.Encoding)),
		refLength:   num(r.Length),
	}
	if r.ContentType != "" {
		m[refContentType] = str(r.ContentType)
	}
	if sum, err := hex.DecodeString(r.SHA256); err == nil && len(sum) == sha256.Size && hex.EncodeToString(sum) == r.SHA256 {
		m[refSHA256] = bin(sum)
	} else {
		m[refSHA256Text] = str(r.SHA256)
	}
	if r.Message != "" {
		m[refMessage] = str(r.Message)
	}
	if r.ManifestID != "" {
		m[refManifest] = str(r.ManifestID)
		if r.Whole {
			m[refWhole] = boolean(true)
		}
	} else {
		m[refInline] = bin(r.Inline)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// pk is the execution row's partition key: the tenant, '#', the execution
// id's slot (store.Slot; the incarnation is the attribute ic). An
// execution id never holds '#' (the runtime's are UUIDs and a token; a
// lookup of one that does finds nothing, see validKey), so the key splits
// at its last '#' whatever the tenant is spelled with.
func pk(k store.Key) string { return k.TenantID + "#" + store.Slot(k.ExecutionID) }

// withIncarnation is the key of an item: its pk's tenant and slot, and the
// incarnation of its ic attribute (none when absent).
func withIncarnation(k store.Key, item map[string]types.AttributeValue) store.Key {
	if ic := (&reader{item: item}).str(AttrIncarnation); ic != "" {
		k.ExecutionID += store.IncarnationSep + ic
	}
	return k
}

// createToken is a row's create token: ct when present, else the
// incarnation (see encode).
func createToken(item map[string]types.AttributeValue) string {
	if _, ok := item[AttrCreateToken]; ok {
		return (&reader{item: item}).str(AttrCreateToken)
	}
	return (&reader{item: item}).str(AttrIncarnation)
}

// validKey reports whether k can name a row: both parts present and no
// '#' in the execution id.
func validKey(k store.Key) bool {
	return k.TenantID != "" && k.ExecutionID != "" && !strings.Contains(k.ExecutionID, "#")
}

// splitPK is pk's inverse.
func splitPK(v string) (store.Key, bool) {
	i := strings.LastIndexByte(v, '#')
	if i <= 0 || i == len(v)-1 {
		return store.Key{}, false
	}
	return store.Key{TenantID: v[:i], ExecutionID: v[i+1:]}, true
}

// listKey is the list index's partition key of a row: the tenant and one
// of shards buckets (fixed at submit from the execution id).
func listKey(k store.Key, shards int) string {
	return k.TenantID + "#" + strconv.Itoa(dueShard(k.ExecutionID, shards))
}

// encode is the full item of a new execution row. Besides what mutable
// writes, it holds what never changes: the key, the pipeline, the input,
// the index keys fixed at submit and the create's identity.
func encode(e *store.Execution, shards int) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		AttrPK:              str(pk(e.Key())),
		AttrPipelineID:      str(e.PipelineID),
		AttrPipelineVersion: str(e.PipelineVersion),
		AttrDueShard:        num(dueShard(e.ExecutionID, shards)),
		AttrListKey:         str(listKey(e.Key(), shards)),
		AttrCreated:         millis(e.CreatedAt),
		AttrTTL:             seconds(e.ExpiresAt),
		AttrVersion:         num(e.Version),
	}
	if !e.Input.IsZero() {
		item[AttrInput] = ref(e.Input)
	}
	if e.IdempotencyKey != "" {
		item[AttrIdempotencyKey] = str(e.IdempotencyKey)
	}
	if e.Fingerprint != "" {
		item[AttrFingerprint] = str(e.Fingerprint)
	}
	// The runtime's create token is the incarnation: stored once, in ic,
	// which saves 18 bytes of every write of the row. Only a token of its
	// own (or none, beside an incarnation) is stored in ct.
	ic := store.Incarnation(e.ExecutionID)
	if ic != "" {
		item[AttrIncarnation] = str(ic)
	}
	if e.CreateToken != ic {
		item[AttrCreateToken] = str(e.CreateToken)
	}
	if e.Parent != nil {
		item[AttrParent] = parentAttr(e.Parent)
	}
	if e.ConcurrencyKey != "" {
		item[AttrConcurrencyKey] = str(e.ConcurrencyKey)
	}
	if e.RateLimit != "" {
		item[AttrRateLimit] = str(e.RateLimit)
		if e.RateKey != "" {
			item[AttrRateKey] = str(e.RateKey)
		}
	}
	if e.Priority != 0 {
		item[AttrPriority] = num(e.Priority)
	}
	if !e.Rank.IsZero() {
		item[AttrRank] = millis(e.Rank)
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
	u.set(AttrStatus, str(string(e.Status)))
	u.set(AttrStepIndex, num(e.StepIndex))
	u.set(AttrStepName, str(e.StepName))
	u.set(AttrAttempt, num(e.Attempt))
	u.set(AttrMaxAttempt, num(e.MaxAttempt))
	u.set(AttrDLQPending, boolean(e.DLQPending))
	u.set(AttrRedriveCount, num(e.RedriveCount))
	u.set(AttrUpdated, millis(e.UpdatedAt))
	u.setOrRemove(AttrLastTransitionKey, e.LastTransitionKey != "", str(shortTransitionKey(e)))
	u.setOrRemove(AttrLeaseOwner, e.LeaseOwner != "", str(e.LeaseOwner))
	u.setOrRemove(AttrLeaseExpires, !e.LeaseExpiresAt.IsZero(), millis(e.LeaseExpiresAt))
	u.setOrRemove(AttrNextDue, !e.NextDueAt.IsZero(), millis(e.NextDueAt))
	if !keepSweep {
		// The sparse sweep index: the row is in it while sweep_at is set.
		u.setOrRemove(AttrSweepAt, !e.SweepAt.IsZero(), millis(e.SweepAt))
		u.set(AttrSweeps, num(e.Sweeps))
	}
	u.set(AttrReleases, num(e.Releases))
	u.setOrRemove(AttrVersionWaitSince, !e.VersionWaitSince.IsZero(), millis(e.VersionWaitSince))
	if !e.ExpiresAt.IsZero() {
		u.set(AttrTTL, seconds(e.ExpiresAt))
	}
	u.setOrRemove(AttrRecordsExpire, !e.RecordsExpireAt.IsZero(), seconds(e.RecordsExpireAt))
	u.setOrRemove(AttrResult, !e.Result.IsZero(), ref(e.Result))
	var f store.Failure
	if e.Error != nil {
		f = *e.Error
	}
	u.setOrRemove(AttrErrorCode, e.Error != nil, str(f.Code))
	u.setOrRemove(AttrErrorMessage, e.Error != nil, str(f.Message))
	u.setOrRemove(AttrTerminalReason, f.TerminalReason != "", str(f.TerminalReason))
	u.setOrRemove(AttrNote, e.Note != "", str(e.Note))
	u.setOrRemove(AttrCancelReason, e.CancelReason != "", str(e.CancelReason))
	u.setOrRemove(AttrCancelRequested, !e.CancelRequestedAt.IsZero(), millis(e.CancelRequestedAt))
	u.setOrRemove(AttrPauseReason, e.PauseReason != "", str(e.PauseReason))
	u.setOrRemove(AttrPauseRequested, !e.PauseRequestedAt.IsZero(), millis(e.PauseRequestedAt))
	u.setOrRemove(AttrPausedFrom, e.PausedFrom != "", str(string(e.PausedFrom)))
	u.setOrRemove(AttrAwait, e.Await != nil, awaitAttr(e.Await))
	u.setOrRemove(AttrChildren, e.Children != nil, childrenAttr(e.Children))
	if e.ConcurrencyKey != "" {
		// Only keyed rows: a row without a key writes exactly what it did.
		u.setOrRemove(AttrSlotHeld, e.SlotHeld, boolean(true))
		u.setOrRemove(AttrWaitKey, e.Status == store.WaitingKey, str(e.SlotScope().ID()))
		if e.Status == store.WaitingKey && e.Rank.IsZero() {
			// A row written before priorities: its rank, the index's
			// sort key, is its creation (the row then reads it back).
			u.set(AttrRank, millis(e.WaitRank()))
		}
	}
	if e.RateLimit != "" || !e.RateReservedAt.IsZero() {
		// Only rows with a rate limit (or a wait for one: an execution
		// submitted before its definition declared the limit): a row
		// without one writes exactly what it did. Such a row's wait is not
		// removed once over: harmless, a reservation holds only for the
		// version after the one that recorded it.
		u.setOrRemove(AttrRateReservedAt, !e.RateReservedAt.IsZero(), millis(e.RateReservedAt))
		u.setOrRemove(AttrRateReservedVersion, e.RateReservedVersion != 0, num(e.RateReservedVersion))
	}
}

// Keys of the parent and children map attributes.
const (
	mapExecution = "e"
	mapToken     = "ct"
	mapStep      = "si"
	mapIndex     = "i"
	mapTotal     = "n"
	mapInFlight  = "m"
	mapRound     = "r"
	mapElement   = "el"
	mapRetry     = "rt"
	mapPrior     = "pr"
	mapKeptOK    = "ks"
	mapKeptOther = "ko"
	mapDone      = "d"
)

// parentAttr encodes a child's parent reference as a map attribute.
func parentAttr(p *store.ParentRef) types.AttributeValue {
	m := map[string]types.AttributeValue{
		mapExecution: str(p.ExecutionID), mapToken: str(p.CreateToken), mapStep: num(p.StepIndex),
		mapIndex: num(p.Index), mapTotal: num(p.Total), mapInFlight: num(p.MaxInFlight),
	}
	if p.Round > 0 {
		m[mapRound], m[mapElement] = num(p.Round), num(p.Element)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// childrenAttr encodes a parent's map as a map attribute.
func childrenAttr(c *store.Children) types.AttributeValue {
	if c == nil {
		return nil
	}
	m := map[string]types.AttributeValue{mapStep: num(c.StepIndex), mapTotal: num(c.Total), mapInFlight: num(c.MaxInFlight)}
	if c.Done {
		m[mapDone] = boolean(true)
	}
	if c.Round > 0 {
		m[mapRound] = num(c.Round)
	}
	if c.Retry {
		m[mapRetry] = boolean(true)
	}
	if c.Prior != nil {
		m[mapPrior] = ref(*c.Prior)
	}
	if c.KeptSucceeded > 0 {
		m[mapKeptOK] = num(c.KeptSucceeded)
	}
	if c.KeptOther > 0 {
		m[mapKeptOther] = num(c.KeptOther)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// sub returns a reader of the map attribute name (nil when absent).
func (r *reader) sub(name string) *reader {
	m, ok := r.item[name].(*types.AttributeValueMemberM)
	if !ok {
		if r.item[name] != nil {
			r.fail(name, "a map")
		}
		return nil
	}
	return &reader{item: m.Value}
}

// done carries a sub-reader's error up.
func (r *reader) done(name string, sub *reader) {
	if sub.err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", name, sub.err)
	}
}

// parent decodes the parent map attribute (nil when absent).
func (r *reader) parent(name string) *store.ParentRef {
	sub := r.sub(name)
	if sub == nil {
		return nil
	}
	p := &store.ParentRef{ExecutionID: sub.str(mapExecution), CreateToken: sub.str(mapToken), StepIndex: sub.int(mapStep),
		Index: sub.int(mapIndex), Total: sub.int(mapTotal), MaxInFlight: sub.int(mapInFlight), Round: sub.int(mapRound)}
	p.Element = p.Index
	if p.Round > 0 {
		p.Element = sub.int(mapElement)
	}
	r.done(name, sub)
	return p
}

// children decodes the children map attribute (nil when absent).
func (r *reader) children(name string) *store.Children {
	sub := r.sub(name)
	if sub == nil {
		return nil
	}
	c := &store.Children{StepIndex: sub.int(mapStep), Total: sub.int(mapTotal), MaxInFlight: sub.int(mapInFlight), Done: sub.bool(mapDone),
		Round: sub.int(mapRound), Retry: sub.bool(mapRetry), KeptSucceeded: sub.int(mapKeptOK), KeptOther: sub.int(mapKeptOther)}
	if _, ok := sub.item[mapPrior]; ok {
		pr := sub.ref(mapPrior)
		c.Prior = &pr
	}
	r.done(name, sub)
	return c
}

// Keys of the await map attribute.
const (
	awaitID        = "id"
	awaitStatus    = "s"
	awaitLate      = "lt"
	awaitStep      = "si"
	awaitTimeout   = "to"
	awaitCompleted = "ca"
	awaitDigest    = "h"
	awaitPayload   = "lp"
)

// shortTransitionKey is the last transition key as stored: without the
// execution id it starts with (store.TransitionKey), which the row's key
// already holds; longTransitionKey puts it back.
func shortTransitionKey(e *store.Execution) string {
	if rest, ok := strings.CutPrefix(e.LastTransitionKey, e.ExecutionID+":"); ok {
		return ":" + rest
	}
	return e.LastTransitionKey
}

func longTransitionKey(executionID, stored string) string {
	if strings.HasPrefix(stored, ":") {
		return executionID + stored
	}
	return stored
}

// awaitAttr encodes an external await as a map attribute.
func awaitAttr(a *store.Await) types.AttributeValue {
	if a == nil {
		return nil
	}
	m := map[string]types.AttributeValue{
		awaitID:     str(a.ID),
		awaitStatus: str(string(a.Status)),
		awaitStep:   num(a.StepIndex),
	}
	if a.Late {
		m[awaitLate] = boolean(true)
	}
	if !a.TimeoutAt.IsZero() {
		m[awaitTimeout] = millis(a.TimeoutAt)
	}
	if !a.CompletedAt.IsZero() {
		m[awaitCompleted] = millis(a.CompletedAt)
	}
	if a.Digest != "" {
		m[awaitDigest] = str(a.Digest)
	}
	if !a.LatePayload.IsZero() {
		m[awaitPayload] = ref(a.LatePayload)
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
		ID: sub.str(awaitID), Status: store.AwaitStatus(sub.str(awaitStatus)), Late: sub.bool(awaitLate), StepIndex: sub.int(awaitStep),
		TimeoutAt: sub.millis(awaitTimeout), CompletedAt: sub.millis(awaitCompleted), Digest: sub.str(awaitDigest),
	}
	if _, ok := m.Value[awaitPayload]; ok {
		a.LatePayload = sub.ref(awaitPayload)
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
		r.err = fmt.Errorf("dynamo: attribute %s is not %s", name, want)
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
		Encoding: payload.Encoding(sub.str(refEncoding)), ContentType: sub.str(refContentType), Message: sub.str(refMessage),
		Length: sub.int64(refLength), SHA256: sub.str(refSHA256Text), ManifestID: sub.str(refManifest), Inline: sub.bytes(refInline),
		Whole: sub.bool(refWhole),
	}
	if sum := sub.bytes(refSHA256); sum != nil {
		out.SHA256 = hex.EncodeToString(sum)
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
	key, ok := splitPK(r.str(AttrPK))
	if !ok && r.err == nil {
		r.err = fmt.Errorf("dynamo: attribute %s is not <tenant>#<execution id>", AttrPK)
	}
	key = withIncarnation(key, item)
	e := store.Execution{
		TenantID: key.TenantID, ExecutionID: key.ExecutionID, PipelineID: r.str(AttrPipelineID),
		Status: store.Status(r.str(AttrStatus)), Version: r.int64(AttrVersion),
		StepIndex: r.int(AttrStepIndex), StepName: r.str(AttrStepName), Attempt: r.int(AttrAttempt), MaxAttempt: r.int(AttrMaxAttempt),
		LeaseOwner: r.str(AttrLeaseOwner), LeaseExpiresAt: r.millis(AttrLeaseExpires), NextDueAt: r.millis(AttrNextDue),
		SweepAt: r.millis(AttrSweepAt), Sweeps: r.int(AttrSweeps), PipelineVersion: r.str(AttrPipelineVersion),
		Releases: r.int(AttrReleases), VersionWaitSince: r.millis(AttrVersionWaitSince),
		LastTransitionKey: longTransitionKey(key.ExecutionID, r.str(AttrLastTransitionKey)), IdempotencyKey: r.str(AttrIdempotencyKey),
		Fingerprint: r.str(AttrFingerprint), CreateToken: createToken(item),
		Input: r.ref(AttrInput), Result: r.ref(AttrResult),
		DLQPending: r.bool(AttrDLQPending), Note: r.str(AttrNote), RedriveCount: r.int(AttrRedriveCount),
		CancelReason: r.str(AttrCancelReason), CancelRequestedAt: r.millis(AttrCancelRequested),
		PauseReason: r.str(AttrPauseReason), PauseRequestedAt: r.millis(AttrPauseRequested), PausedFrom: store.Status(r.str(AttrPausedFrom)),
		CreatedAt: r.millis(AttrCreated), UpdatedAt: r.millis(AttrUpdated), ExpiresAt: r.seconds(AttrTTL),
		RecordsExpireAt:     r.seconds(AttrRecordsExpire),
		Await:               r.await(AttrAwait),
		Parent:              r.parent(AttrParent),
		Children:            r.children(AttrChildren),
		ConcurrencyKey:      r.str(AttrConcurrencyKey),
		SlotHeld:            r.bool(AttrSlotHeld),
		RateLimit:           r.str(AttrRateLimit),
		RateKey:             r.str(AttrRateKey),
		RateReservedAt:      r.millis(AttrRateReservedAt),
		RateReservedVersion: r.int64(AttrRateReservedVersion),
		Priority:            r.int(AttrPriority),
		Rank:                r.millis(AttrRank),
	}
	if _, ok := item[AttrErrorCode]; ok {
		e.Error = &store.Failure{Code: r.str(AttrErrorCode), Message: r.str(AttrErrorMessage), TerminalReason: r.str(AttrTerminalReason)}
	}
	if _, ok := item[AttrResult]; !ok {
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
	exp := (&reader{item: item}).seconds(AttrTTL)
	return exp.IsZero() || now.Before(exp)
}

// withDeadline bounds ctx by d unless it already has a deadline.
func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
