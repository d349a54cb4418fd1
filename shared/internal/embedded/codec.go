package embedded

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// Values are sealed: a CRC-32C of the body, then the body. bbolt checks
// its meta pages but not the pages holding values, so a value damaged on
// disk is caught here, at open (verify) and on every read.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum reports a value whose checksum does not match.
var errChecksum = errors.New("value fails its checksum")

func seal(body []byte) []byte {
	out := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(out, crc32.Checksum(body, castagnoli))
	return append(out, body...)
}

// unseal checks v's checksum and returns its body (sharing v's memory:
// valid only inside the transaction).
func unseal(v []byte) ([]byte, error) {
	if len(v) < 4 {
		return nil, errChecksum
	}
	if binary.BigEndian.Uint32(v) != crc32.Checksum(v[4:], castagnoli) {
		return nil, errChecksum
	}
	return v[4:], nil
}

// sealJSON marshals x and seals it.
func sealJSON(x any) ([]byte, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	return seal(b), nil
}

// openJSON unseals v into x; a damaged value is an error naming what.
func openJSON(v []byte, x any, what string) error {
	body, err := unseal(v)
	if err == nil {
		err = json.Unmarshal(body, x)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDamaged, what, err)
	}
	return nil
}

// appendStr appends s length-prefixed (uvarint), so that a key made of
// such parts is never a prefix of another's.
func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// tenantKey is the prefix of a tenant's keys in the list indexes.
func tenantKey(tenant string) []byte { return appendStr(nil, tenant) }

// execKey is an execution's key: its tenant and its id's slot
// (store.Slot), each length-prefixed. A slot holds one row, whichever
// incarnation created it last.
func execKey(k store.Key) []byte {
	return appendStr(appendStr(nil, k.TenantID), store.Slot(k.ExecutionID))
}

// splitExecKey is execKey's inverse.
func splitExecKey(b []byte) (store.Key, bool) {
	t, rest, ok := cutStr(b)
	if !ok {
		return store.Key{}, false
	}
	id, rest, ok := cutStr(rest)
	if !ok || len(rest) != 0 {
		return store.Key{}, false
	}
	return store.Key{TenantID: t, ExecutionID: id}, true
}

func cutStr(b []byte) (string, []byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

// ms and fromMs keep times to the millisecond (zero stays zero).
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// secs and fromSecs keep the TTL to the second, as DynamoDB does.
func secs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func fromSecs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(v, 0).UTC()
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// rowRec is the stored form of an execution row (short names; times in
// milliseconds, the TTL in seconds).
type rowRec struct {
	T  string         `json:"t"`
	E  string         `json:"e"`
	P  string         `json:"p"`
	S  store.Status   `json:"s"`
	V  int64          `json:"v"`
	SI int            `json:"si,omitempty"`
	SN string         `json:"sn,omitempty"`
	A  int            `json:"a,omitempty"`
	MA int            `json:"ma,omitempty"`
	LO string         `json:"lo,omitempty"`
	LE int64          `json:"le,omitempty"`
	ND int64          `json:"nd,omitempty"`
	SW int64          `json:"sw,omitempty"`
	SC int            `json:"sc,omitempty"`
	PV string         `json:"pv,omitempty"`
	RL int            `json:"rl,omitempty"`
	VW int64          `json:"vw,omitempty"`
	LT string         `json:"lt,omitempty"`
	IK string         `json:"ik,omitempty"`
	FP string         `json:"fp,omitempty"`
	CT string         `json:"ct,omitempty"`
	In *payload.Ref   `json:"in,omitempty"`
	Re *payload.Ref   `json:"re,omitempty"`
	Er *store.Failure `json:"er,omitempty"`
	DP bool           `json:"dp,omitempty"`
	N  string         `json:"n,omitempty"`
	RD int            `json:"rd,omitempty"`
	CR string         `json:"cr,omitempty"`
	CQ int64          `json:"cq,omitempty"`
	PR string         `json:"pr,omitempty"`
	PQ int64          `json:"pq,omitempty"`
	PF store.Status   `json:"pf,omitempty"`
	C  int64          `json:"c"`
	U  int64          `json:"u"`
	X  int64          `json:"x,omitempty"`
	RX int64          `json:"rx,omitempty"`
	Aw *awaitRec      `json:"aw,omitempty"`
	Pa *parentRec     `json:"pa,omitempty"`
	Ch *childrenRec   `json:"ch,omitempty"`
	CK string         `json:"ck,omitempty"`
	SH bool           `json:"sh,omitempty"`
	RN string         `json:"rn,omitempty"`
	RY string         `json:"ry,omitempty"`
	RA int64          `json:"ra,omitempty"`
	RS int64          `json:"rs,omitempty"`
	PY int            `json:"py,omitempty"`
	RK int64          `json:"rk,omitempty"`
}

// parentRec is a child's store.ParentRef.
type parentRec struct {
	E  string `json:"e"`
	CT string `json:"ct"`
	SI int    `json:"si"`
	I  int    `json:"i"`
	N  int    `json:"n"`
	M  int    `json:"m"`
	R  int    `json:"r,omitempty"`  // the round (0: the fan-out)
	EL int    `json:"el,omitempty"` // the element, kept for rounds after 0
}

// childrenRec is a parent's store.Children.
type childrenRec struct {
	SI int          `json:"si"`
	N  int          `json:"n"`
	M  int          `json:"m"`
	D  bool         `json:"d,omitempty"`
	R  int          `json:"r,omitempty"`
	RT bool         `json:"rt,omitempty"`
	PR *payload.Ref `json:"pr,omitempty"`
	KS int          `json:"ks,omitempty"`
	KO int          `json:"ko,omitempty"`
}

type awaitRec struct {
	ID string            `json:"id"`
	SI int               `json:"si"`
	S  store.AwaitStatus `json:"s"`
	TO int64             `json:"to,omitempty"`
	CA int64             `json:"ca,omitempty"`
	D  string            `json:"d,omitempty"`
	L  bool              `json:"l,omitempty"`
	LP *payload.Ref      `json:"lp,omitempty"`
}

func refPtr(r payload.Ref) *payload.Ref {
	if r.IsZero() {
		return nil
	}
	return &r
}

func refVal(r *payload.Ref) payload.Ref {
	if r == nil {
		return payload.Ref{}
	}
	return *r
}

// encodeRow seals e's stored form.
func encodeRow(e *store.Execution) ([]byte, error) {
	r := rowRec{
		T: e.TenantID, E: e.ExecutionID, P: e.PipelineID, S: e.Status, V: e.Version,
		SI: e.StepIndex, SN: e.StepName, A: e.Attempt, MA: e.MaxAttempt, LO: e.LeaseOwner, LE: ms(e.LeaseExpiresAt),
		ND: ms(e.NextDueAt), SW: ms(e.SweepAt), SC: e.Sweeps, PV: e.PipelineVersion, RL: e.Releases,
		VW: ms(e.VersionWaitSince), LT: e.LastTransitionKey, IK: e.IdempotencyKey, FP: e.Fingerprint, CT: e.CreateToken,
		In: refPtr(e.Input), Re: refPtr(e.Result), Er: e.Error, DP: e.DLQPending, N: e.Note, RD: e.RedriveCount,
		CR: e.CancelReason, CQ: ms(e.CancelRequestedAt), PR: e.PauseReason, PQ: ms(e.PauseRequestedAt), PF: e.PausedFrom, C: ms(e.CreatedAt), U: ms(e.UpdatedAt), X: secs(e.ExpiresAt),
		RX: secs(e.RecordsExpireAt), CK: e.ConcurrencyKey, SH: e.SlotHeld, PY: e.Priority, RK: ms(e.Rank),
		RN: e.RateLimit, RY: e.RateKey, RA: ms(e.RateReservedAt), RS: e.RateReservedVersion,
	}
	if a := e.Await; a != nil {
		r.Aw = &awaitRec{ID: a.ID, SI: a.StepIndex, S: a.Status, TO: ms(a.TimeoutAt), CA: ms(a.CompletedAt), D: a.Digest, L: a.Late, LP: refPtr(a.LatePayload)}
	}
	if p := e.Parent; p != nil {
		r.Pa = &parentRec{E: p.ExecutionID, CT: p.CreateToken, SI: p.StepIndex, I: p.Index, N: p.Total, M: p.MaxInFlight, R: p.Round}
		if p.Round > 0 {
			r.Pa.EL = p.Element
		}
	}
	if c := e.Children; c != nil {
		r.Ch = &childrenRec{SI: c.StepIndex, N: c.Total, M: c.MaxInFlight, D: c.Done, R: c.Round, RT: c.Retry, PR: c.Prior,
			KS: c.KeptSucceeded, KO: c.KeptOther}
	}
	return sealJSON(&r)
}

// decodeRow reads a row's body (already unsealed).
func decodeRow(body []byte) (store.Execution, error) {
	var r rowRec
	if err := json.Unmarshal(body, &r); err != nil {
		return store.Execution{}, err
	}
	e := store.Execution{
		TenantID: r.T, ExecutionID: r.E, PipelineID: r.P, Status: r.S, Version: r.V,
		StepIndex: r.SI, StepName: r.SN, Attempt: r.A, MaxAttempt: r.MA, LeaseOwner: r.LO, LeaseExpiresAt: fromMs(r.LE),
		NextDueAt: fromMs(r.ND), SweepAt: fromMs(r.SW), Sweeps: r.SC, PipelineVersion: r.PV, Releases: r.RL,
		VersionWaitSince: fromMs(r.VW), LastTransitionKey: r.LT, IdempotencyKey: r.IK, Fingerprint: r.FP, CreateToken: r.CT,
		Input: refVal(r.In), Result: refVal(r.Re), Error: r.Er, DLQPending: r.DP, Note: r.N, RedriveCount: r.RD,
		CancelReason: r.CR, CancelRequestedAt: fromMs(r.CQ), PauseReason: r.PR, PauseRequestedAt: fromMs(r.PQ), PausedFrom: r.PF, CreatedAt: fromMs(r.C), UpdatedAt: fromMs(r.U), ExpiresAt: fromSecs(r.X),
		RecordsExpireAt: fromSecs(r.RX), ConcurrencyKey: r.CK, SlotHeld: r.SH, Priority: r.PY, Rank: fromMs(r.RK),
		RateLimit: r.RN, RateKey: r.RY, RateReservedAt: fromMs(r.RA), RateReservedVersion: r.RS,
	}
	if a := r.Aw; a != nil {
		e.Await = &store.Await{ID: a.ID, StepIndex: a.SI, Status: a.S, TimeoutAt: fromMs(a.TO), CompletedAt: fromMs(a.CA),
			Digest: a.D, Late: a.L, LatePayload: refVal(a.LP)}
	}
	if p := r.Pa; p != nil {
		e.Parent = &store.ParentRef{ExecutionID: p.E, CreateToken: p.CT, StepIndex: p.SI, Index: p.I, Total: p.N, MaxInFlight: p.M,
			Round: p.R, Element: p.I}
		if p.R > 0 {
			e.Parent.Element = p.EL
		}
	}
	if c := r.Ch; c != nil {
		e.Children = &store.Children{StepIndex: c.SI, Total: c.N, MaxInFlight: c.M, Done: c.D, Round: c.R, Retry: c.RT, Prior: c.PR,
			KeptSucceeded: c.KS, KeptOther: c.KO}
	}
	return e, nil
}

// sweepKey is a row's entry in the sweep index: its sweep time, then its
// key, so that the index reads oldest first.
func sweepKey(at time.Time, k []byte) []byte {
	return append(be64(ms(at)), k...)
}

// listKey is a row's entry in the list index: the tenant, the creation
// time, the id (read backwards: newest first, then id descending).
func listKey(e *store.Execution) []byte {
	b := append(tenantKey(e.TenantID), be64(ms(e.CreatedAt))...)
	return append(b, e.ExecutionID...)
}

// histKey is an event's key: the execution, the row version, the event's
// position among that version's events.
func histKey(k []byte, version int64, i int) []byte {
	b := append(append([]byte(nil), k...), be64(version)...)
	return binary.BigEndian.AppendUint16(b, uint16(i))
}

// expired reports whether an expiry at is set and has passed at now.
func expired(at, now time.Time) bool { return !at.IsZero() && !now.Before(at) }
