package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// IdempotencyKeyHeader is the request header carrying the client's key.
const IdempotencyKeyHeader = "Idempotency-Key"

// MessageTypeHeader names the protobuf message of an application/x-protobuf
// body (alternatively the content type's messageType parameter). The
// result of a protobuf execution carries it too.
const MessageTypeHeader = "X-Message-Type"

// MaxIdempotencyKeyLen is the longest valid idempotency key.
const MaxIdempotencyKeyLen = 255

// MaxRedriveReasonLen is the longest re-drive reason, in bytes.
const MaxRedriveReasonLen = 2048

// Limits on what the API accepts beyond the body size.
const (
	maxContentTypeLen = 255
	maxMessageTypeLen = 512
	maxRedriveBody    = 16 << 10
	maxExecutionIDLen = 128
)

var protoNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// The documents the API answers with are package client's (Submission,
// Execution, ExecutionPage, History, BulkRedrive, RedriveProgress,
// DeadLetterPage, Problem): the server encodes the very types its Go
// client decodes, so the two cannot drift. Times are encoded in UTC.

// utc is t in UTC (the zero time stays zero: an optional member is then
// left out).
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// statusDocument is the status document of e.
func statusDocument(e *store.Execution) client.Execution {
	d := client.Execution{
		ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, PipelineVersion: e.PipelineVersion, IdempotencyKey: e.IdempotencyKey, Status: e.Status,
		StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt, Version: e.Version,
		CreatedAt: utc(e.CreatedAt), UpdatedAt: utc(e.UpdatedAt),
	}
	if !e.NextDueAt.IsZero() && (e.Status == store.Queued || e.Status == store.WaitRetry) {
		d.NextDueAt = utc(e.NextDueAt)
	}
	if !e.VersionWaitSince.IsZero() {
		d.VersionWaitSince = utc(e.VersionWaitSince)
	}
	d.ConcurrencyKey, d.Priority = e.ConcurrencyKey, e.Priority
	if e.Status == store.WaitingKey {
		d.KeyWaitSince = utc(e.UpdatedAt) // the wait's commit; the sweeper's looks leave the row's time alone
	}
	d.RateLimit, d.RateKey, d.RateLimitedUntil = e.RateLimit, e.RateKey, utc(engine.RateLimitedUntil(e))
	if e.Error != nil {
		d.Error = &client.ExecutionError{Code: e.Error.Code, Message: e.Error.Message, TerminalReason: e.Error.TerminalReason}
	}
	if !e.CancelRequestedAt.IsZero() {
		d.CancelReason, d.CancelRequestedAt = e.CancelReason, utc(e.CancelRequestedAt)
	}
	if !e.PauseRequestedAt.IsZero() {
		d.Pause = &client.PauseState{Reason: e.PauseReason, RequestedAt: utc(e.PauseRequestedAt), ResumesTo: e.PausedFrom}
	}
	if p := e.Parent; p != nil {
		d.Parent = &client.ParentLink{ExecutionID: p.ExecutionID, StepIndex: p.StepIndex, Index: p.Element, Round: p.Round}
	}
	if c := e.Children; c != nil {
		d.Children = &client.ChildCounts{Total: c.Total + c.KeptSucceeded + c.KeptOther, Round: c.Round}
	}
	if aw := e.Await; aw != nil {
		d.Await = &client.Await{AwaitID: aw.ID, Status: aw.Status, Late: aw.Late}
		if !aw.TimeoutAt.IsZero() {
			d.Await.TimeoutAt = utc(aw.TimeoutAt)
		}
		if !aw.CompletedAt.IsZero() {
			d.Await.CompletedAt = utc(aw.CompletedAt)
		}
	}
	return d
}

// tenant resolves the request's tenant, recording it for the log, or
// writes the 400 and returns false.
func (a *api) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t, err := a.tenantFunc(r)
	if err == nil && !ValidTenantID(t) {
		err = fmt.Errorf("%w: the tenant function returned an invalid tenant id", ErrInvalidTenant)
		a.logError(r, "tenant_func_invalid", err)
		writeProblem(w, kindInternal.problem("The request could not be processed."))
		return "", false
	}
	if err != nil && errors.Is(err, ErrUnauthenticated) {
		writeProblem(w, kindUnauthorized.problem("The request carries no caller identity."))
		return "", false
	}
	if err != nil {
		detail := "The tenant of the request could not be determined."
		if errors.Is(err, ErrInvalidTenant) {
			detail = err.Error()
		} else {
			a.logError(r, "tenant_func_failed", err)
		}
		writeProblem(w, kindInvalidTenant.problem(detail))
		return "", false
	}
	if info, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		info.tenant = t
	}
	return t, true
}

// idempotencyKey returns the client's key ("" when the header is absent),
// or writes the 400 and returns false.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	vs := r.Header.Values(IdempotencyKeyHeader)
	if len(vs) == 0 {
		return "", true
	}
	bad := func(detail string) (string, bool) {
		writeProblem(w, kindInvalidKey.problem(detail))
		return "", false
	}
	if len(vs) > 1 {
		return bad("The Idempotency-Key header must be sent at most once.")
	}
	if detail := checkKey(vs[0], "The Idempotency-Key header"); detail != "" {
		return bad(detail)
	}
	return vs[0], true
}

// checkKey says what is wrong with idempotency key k, named what in the
// answer ("" if nothing): 1-MaxIdempotencyKeyLen printable ASCII
// characters.
func checkKey(k, what string) string {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLen {
		return fmt.Sprintf("%s must be 1-%d characters long.", what, MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return what + " must contain printable ASCII characters only."
		}
	}
	return ""
}

// bodyKind says how a submitted body is stored.
type bodyKind int

const (
	bodyJSON bodyKind = iota
	bodyRaw
	bodyProto
)

// classifyBody reads the Content-Type: empty, application/json and any
// +json type mean JSON; application/x-protobuf with a message name means
// protobuf; anything else is stored raw under its (normalized) type.
func classifyBody(r *http.Request) (k bodyKind, contentType, message string, problem *Problem) {
	bad := func(detail string) (bodyKind, string, string, *Problem) {
		p := kindInvalidContentType.problem(detail)
		return 0, "", "", &p
	}
	ct := r.Header.Get("Content-Type")
	if strings.TrimSpace(ct) == "" {
		return bodyJSON, payload.ContentTypeJSON, "", nil
	}
	if len(ct) > maxContentTypeLen {
		return bad(fmt.Sprintf("The Content-Type header must be at most %d characters long.", maxContentTypeLen))
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return bad("The Content-Type header is not a valid media type.")
	}
	switch {
	case mt == payload.ContentTypeJSON || strings.HasSuffix(mt, "+json"):
		return bodyJSON, payload.ContentTypeJSON, "", nil
	case mt == payload.ContentTypeProtobuf:
		msg := params["messagetype"]
		if h := r.Header.Get(MessageTypeHeader); h != "" {
			if msg != "" && msg != h {
				return bad("The messageType parameter and the X-Message-Type header disagree.")
			}
			msg = h
		}
		if msg == "" {
			return bodyRaw, mt, "", nil
		}
		if len(msg) > maxMessageTypeLen || !protoNamePattern.MatchString(msg) {
			return bad("The protobuf message type must be a full message name such as pkg.Message.")
		}
		return bodyProto, payload.ContentTypeProtobuf, msg, nil
	}
	normalized := mime.FormatMediaType(mt, params)
	if normalized == "" {
		normalized = mt
	}
	return bodyRaw, normalized, "", nil
}

// readBody reads at most a.maxBody bytes of the body, or writes the 413
// (or 400) and returns false.
func (a *api) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if r.ContentLength > limit {
		writeProblem(w, kindTooLarge.problem(fmt.Sprintf("The request body must be at most %d bytes.", limit)))
		return nil, false
	}
	if r.Body == nil {
		return []byte{}, true
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeProblem(w, kindTooLarge.problem(fmt.Sprintf("The request body must be at most %d bytes.", limit)))
		return nil, false
	case err != nil:
		writeProblem(w, kindInvalidRequest.problem("The request body could not be read."))
		return nil, false
	}
	return b, true
}

// encodings maps a body kind to the payload encoding it is stored in.
var encodings = map[bodyKind]payload.Encoding{
	bodyJSON: payload.EncodingJSON, bodyRaw: payload.EncodingRaw, bodyProto: payload.EncodingProtobuf,
}

// mediaTypes names, for a client, the Content-Types of each encoding.
var mediaTypes = map[payload.Encoding]string{
	payload.EncodingJSON:     payload.ContentTypeJSON + " (or a +json type)",
	payload.EncodingProtobuf: payload.ContentTypeProtobuf + " with a messageType",
	payload.EncodingRaw:      "another media type (raw bytes)",
}

// readPayload reads the body as a payload by its Content-Type (JSON, raw
// or protobuf), or writes the 400, 413 or 415 and returns false. When p is
// set, a Content-Type whose encoding p does not accept
// (pipeline.Pipeline.AcceptsEncoding) is answered 415 before the body is
// read, naming the accepted types.
func (a *api) readPayload(w http.ResponseWriter, r *http.Request, p *pipeline.Pipeline) (payload.Payload, bool) {
	kind, contentType, message, prob := classifyBody(r)
	if prob != nil {
		writeProblem(w, *prob)
		return payload.Payload{}, false
	}
	if p != nil && !p.AcceptsEncoding(encodings[kind]) {
		var accepted []string
		for _, e := range p.Steps[0].Accepts {
			accepted = append(accepted, mediaTypes[e])
		}
		writeProblem(w, kindUnsupportedType.problem(fmt.Sprintf("Pipeline %s takes %s input only.", p.ID, strings.Join(accepted, " or "))))
		return payload.Payload{}, false
	}
	body, ok := a.readBody(w, r, a.maxBody)
	if !ok {
		return payload.Payload{}, false
	}
	switch kind {
	case bodyJSON:
		if !utf8.Valid(body) || !json.Valid(body) {
			writeProblem(w, kindInvalidJSON.problem("The request body is not valid UTF-8 JSON."))
			return payload.Payload{}, false
		}
		return payload.Payload{Encoding: payload.EncodingJSON, ContentType: contentType, Data: body}, true
	case bodyProto:
		return payload.Payload{Encoding: payload.EncodingProtobuf, ContentType: contentType, Message: message, Data: body}, true
	default:
		return payload.Raw(contentType, body), true
	}
}

// pipelinePath returns the pipelineId of the path, or writes the 400 and
// returns false.
func pipelinePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	pid := r.PathValue("pipelineId")
	if !pipeline.ValidID(pid) {
		writeProblem(w, kindInvalidPipelineID.problem("A pipeline id is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit."))
		return "", false
	}
	return pid, true
}

// pipelineNotFound is the 404 of a pipeline id nothing is registered under.
func pipelineNotFound(id string) Problem {
	return kindPipelineNotFound.problem(fmt.Sprintf("No pipeline %q is registered here.", id))
}

// submit handles POST /v1/pipelines/{pipelineId}/executions.
func (a *api) submit(w http.ResponseWriter, r *http.Request) {
	pid, ok := pipelinePath(w, r)
	if !ok {
		return
	}
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	p, ok := a.rt.Registry().Get(pid)
	if !ok {
		writeProblem(w, pipelineNotFound(pid))
		return
	}
	if key == "" && a.rt.Config().IdempotencyPolicy == engine.ClientKeyRequired {
		writeProblem(w, kindKeyRequired.problem("This service requires an Idempotency-Key header on every submission."))
		return
	}
	prio, ok := priorityParam(w, r.URL.Query())
	if !ok {
		return
	}
	in, ok := a.readPayload(w, r, p)
	if !ok {
		return
	}

	res, err := a.rt.Submit(r.Context(), engine.SubmitRequest{TenantID: tenant, PipelineID: pid, IdempotencyKey: key, Input: in, Priority: prio,
		TraceParent: r.Header.Get("Traceparent")})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	e := &res.Execution
	doc := client.Submission{
		ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, Status: e.Status, Duplicate: res.Duplicate,
		StatusURL: a.statusURL(e.ExecutionID), ResultURL: a.resultURL(e.ExecutionID),
		SubmittedAt: utc(e.CreatedAt),
	}
	code := http.StatusAccepted
	if res.Duplicate {
		code = http.StatusOK
	}
	w.Header().Set("Location", doc.StatusURL)
	writeJSON(w, code, doc)
}

// priorityParam reads a submit's priority query parameter (0 when absent:
// the pipeline's default), or writes the 400 naming it and returns false.
// It is a parameter, not a body field: the body is the pipeline's input
// as it is (JSON or protobuf).
func priorityParam(w http.ResponseWriter, q url.Values) (int, bool) {
	vs, has := q["priority"]
	if !has {
		return 0, true
	}
	n, err := strconv.Atoi(vs[0])
	if len(vs) != 1 || err != nil || pipeline.CheckPriority(n) != nil {
		writeProblem(w, kindInvalidRequest.problem(fmt.Sprintf("priority must be given once, an integer from %d (most urgent) to %d (least urgent).",
			pipeline.HighestPriority, pipeline.LowestPriority)))
		return 0, false
	}
	return n, true
}

// executionKey returns the key of the execution the path names, or writes
// the 400 or 404 and returns false. A malformed id is simply not found.
func (a *api) executionKey(w http.ResponseWriter, r *http.Request) (store.Key, bool) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return store.Key{}, false
	}
	id := r.PathValue("executionId")
	if !validExecutionID(id) {
		writeProblem(w, kindExecutionNotFound.problem("No execution with this id exists for this tenant."))
		return store.Key{}, false
	}
	return store.Key{TenantID: tenant, ExecutionID: id}, true
}

// validExecutionID accepts the ids the runtime issues (UUIDs) and any
// other 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-'.
func validExecutionID(id string) bool {
	return len(id) <= maxExecutionIDLen && ValidTenantID(id)
}

// status handles GET /v1/executions/{executionId}.
func (a *api) status(w http.ResponseWriter, r *http.Request) {
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	e, err := a.rt.Status(r.Context(), key)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	doc := statusDocument(&e)
	if c, err := a.rt.ChildCounts(r.Context(), e); err != nil {
		a.fail(w, r, err)
		return
	} else if c != nil {
		doc.Children = &client.ChildCounts{Total: c.Total, Succeeded: c.Succeeded, Failed: c.Failed, Running: c.Running, Pending: c.Pending,
			Round: c.Round}
	}
	writeJSON(w, http.StatusOK, doc)
}

// result handles GET /v1/executions/{executionId}/result.
func (a *api) result(w http.ResponseWriter, r *http.Request) {
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	e, p, err := a.rt.Result(r.Context(), key)
	if errors.Is(err, engine.ErrNotSucceeded) {
		prob := kindNotSucceeded.problem(fmt.Sprintf("The execution is %s; its result is available once it is %s.", e.Status, store.Succeeded))
		prob.ExecutionID, prob.ExecutionStatus = e.ExecutionID, e.Status
		writeProblem(w, prob)
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if a.adminToken(r) == tokenValid {
		// An operator reading a result (the route is the submitter's too):
		// audit-logged as the input view is.
		a.payloadViewed(r, key, "result", len(p.Data))
	}
	ct := p.ContentType
	if ct == "" {
		ct = payload.ContentTypeOctet
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	if p.Encoding == payload.EncodingProtobuf && p.Message != "" {
		h.Set(MessageTypeHeader, p.Message)
	}
	writePayload(w, p.Data)
}

// redrive handles POST /v1/executions/{executionId}/redrive (operator:
// authorized).
func (a *api) redrive(w http.ResponseWriter, r *http.Request) {
	body, ok := a.operatorBody(w, r)
	if !ok {
		return
	}
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	req, detail := parseRedrive(body)
	if detail != "" {
		writeProblem(w, kindInvalidRequest.problem(detail))
		return
	}
	e, err := a.rt.RedriveWith(r.Context(), key, engine.RedriveOptions{
		Reason: req.Reason, ExpectedVersion: req.ExpectedVersion, ConfirmedNoRemoteEffect: req.ConfirmedNoRemoteEffect})
	var prob Problem
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, statusDocument(&e))
		return
	case errors.Is(err, engine.ErrRemoteEffectUnconfirmed):
		prob = kindNotRedrivable.problem(fmt.Sprintf(`The execution is %s: its remote worker may still make effects. Confirm that the remote invocation completed, was cancelled or can make no more effects, then re-drive with "confirmedNoRemoteEffect": true.`, e.Status))
	case errors.Is(err, engine.ErrChildrenExpired):
		prob = kindNotRedrivable.problem("The execution failed while collecting its map's outcomes, and some of its children have expired since: their outcomes are gone, so it cannot be re-driven. Submit it again.")
	case errors.Is(err, engine.ErrNotRedrivable):
		prob = kindNotRedrivable.problem(fmt.Sprintf("The execution is %s; only %s and %s executions (and %s ones with confirmedNoRemoteEffect) can be re-driven.", e.Status, store.DLQ, store.Failed, store.RemoteOutcomeUnknown))
	case errors.Is(err, engine.ErrVersionMismatch):
		prob = kindVersionMismatch.problem(fmt.Sprintf("The execution is at version %d, not %d.", e.Version, *req.ExpectedVersion))
		prob.CurrentVersion = e.Version
	case errors.Is(err, store.ErrConflict):
		prob = kindVersionMismatch.problem("The execution changed while it was being re-driven; read its status and retry.")
	default:
		a.fail(w, r, err)
		return
	}
	prob.ExecutionID, prob.ExecutionStatus = e.ExecutionID, e.Status
	writeProblem(w, prob)
}

// ResumeTokenHeader carries the resume token of an await completion.
const ResumeTokenHeader = "X-Resume-Token"

// completeAwait handles POST /v1/executions/{executionId}/awaits/{awaitId}/complete.
// The resume token is its authorization and names the tenant: the route
// asks no other caller identity (behind API Gateway it has no authorizer),
// so the tenant function is not consulted.
func (a *api) completeAwait(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("executionId")
	if !validExecutionID(id) {
		writeProblem(w, kindExecutionNotFound.problem("No execution with this id exists for this tenant."))
		return
	}
	awaitID := r.PathValue("awaitId")
	in, ok := a.readPayload(w, r, nil)
	if !ok {
		return
	}
	e, _, err := a.rt.CompleteAwait(r.Context(), id, awaitID, r.Header.Get(ResumeTokenHeader), in)
	var prob Problem
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, statusDocument(&e))
		return
	case errors.Is(err, engine.ErrResumeTokenMissing):
		prob = kindUnauthorized.problem("This route requires the await's resume token in the X-Resume-Token header.")
	case errors.Is(err, engine.ErrResumeTokenInvalid):
		prob = kindForbidden.problem("The resume token is not valid for this await.")
	case errors.Is(err, engine.ErrAwaitsDisabled):
		prob = kindAwaitsDisabled.problem("Await completion is not configured on this service.")
	case errors.Is(err, engine.ErrAwaitNotCurrent):
		prob = kindAwaitConflict.problem("This await is not the execution's current await.")
	case errors.Is(err, engine.ErrAwaitAlreadyCompleted):
		prob = kindAwaitConflict.problem("This await was already completed with a different payload.")
	case errors.Is(err, engine.ErrAwaitBusy):
		w.Header().Set("Retry-After", "1")
		prob = kindAwaitConflict.problem("The await timed out and its step is running again; retry the completion later.")
	case errors.Is(err, store.ErrConflict):
		w.Header().Set("Retry-After", "1")
		prob = kindAwaitConflict.problem("The execution changed while the completion was recorded; retry it.")
	default:
		a.fail(w, r, err)
		return
	}
	if prob.Status == http.StatusConflict {
		prob.ExecutionID, prob.ExecutionStatus = e.ExecutionID, e.Status
	}
	writeProblem(w, prob)
}

// operatorBody starts an operator call (re-drive, cancel, bulk
// re-drive): the operator's authorization, then the body, at most
// maxRedriveBody. It answers the request itself and returns false when
// the call cannot go on.
func (a *api) operatorBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if !a.authorized(w, r) {
		return nil, false
	}
	return a.readBody(w, r, min(a.maxBody, maxRedriveBody))
}

// adminTokenKey is the configuration key of the admin token (short name).
const adminTokenKey = "admin.token"

// operatorDisabled is the detail of an operator route on a server without
// an admin token: the setting that enables it.
var operatorDisabled = fmt.Sprintf("The operator routes are disabled: this server has no operator token. "+
	"Set %s (configuration key %s, flag --%s) to a secret and restart the server to enable them, "+
	"then send it in an Authorization: Bearer header.",
	config.EnvName(config.FullKey(adminTokenKey)), config.FullKey(adminTokenKey), adminTokenKey)

// authorized checks the Bearer admin token in constant time, or writes the
// 401 (403 when the operator routes are disabled, 429 when the client's
// wrong tokens are over the limit) and returns false. Every wrong token
// is logged (operator_auth_failed) and counted against the client's
// address; past the limit the token is not even looked at.
func (a *api) authorized(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case a.redriveUpstream:
		return true
	case a.adminHash == nil:
		writeProblem(w, kindOperatorDisabled.problem(operatorDisabled))
		return false
	}
	now := a.rt.Now()
	if retry, ok := a.limiter.Check(r.Context(), a.log, r, "api", now); !ok {
		w.Header().Set("Retry-After", retry)
		writeProblem(w, kindTooManyAttempts.problem(fmt.Sprintf("Too many wrong operator tokens came from this address: try again in %s s.", retry)))
		return false
	}
	if check := a.adminToken(r); check != tokenNone {
		a.limiter.Done(r.Context(), a.log, r, "api", now, check == tokenInvalid)
		if check == tokenValid {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="qasync-admin", error="invalid_token"`)
		writeProblem(w, kindUnauthorized.problem("The bearer token is not valid for this route."))
		return false
	}
	a.limiter.Done(r.Context(), a.log, r, "api", now, false) // no token offered: not a guess
	w.Header().Set("WWW-Authenticate", `Bearer realm="qasync-admin"`)
	writeProblem(w, kindUnauthorized.problem("This route requires an Authorization: Bearer admin token."))
	return false
}

// tokenCheck is what a request's Authorization says of the admin token.
type tokenCheck int

const (
	tokenNone    tokenCheck = iota // no Bearer token (or none configured)
	tokenInvalid                   // a Bearer token, not the admin token
	tokenValid                     // the admin token
)

// adminToken checks the request's Bearer token against the admin token,
// in constant time.
func (a *api) adminToken(r *http.Request) tokenCheck {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimLeft(token, " ")
	if a.adminHash == nil || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return tokenNone
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], a.adminHash[:]) == 1 {
		return tokenValid
	}
	return tokenInvalid
}

// parseRedrive decodes and checks a re-drive body. A non-empty detail
// says what is wrong with it.
func parseRedrive(body []byte) (client.RedriveRequest, string) {
	var req client.RedriveRequest
	detail := decodeBody(body, &req, `{"reason": string, "expectedVersion": integer (optional), "confirmedNoRemoteEffect": boolean (optional)}`)
	switch {
	case detail != "":
		return req, detail
	case checkReason(req.Reason) != "":
		return req, checkReason(req.Reason)
	case req.ExpectedVersion != nil && *req.ExpectedVersion < 1:
		return req, `"expectedVersion" must be a positive integer.`
	}
	return req, ""
}

// fail answers an error from the runtime: the documented client errors by
// kind, a deadline or a throttled backend with 503, anything else with a
// generic 500. Internal
// errors are logged, never echoed.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, engine.ErrPipelineNotFound):
		writeProblem(w, pipelineNotFound(strings.TrimPrefix(err.Error(), engine.ErrPipelineNotFound.Error()+": ")))
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, kindExecutionNotFound.problem("No execution with this id exists for this tenant."))
	case errors.Is(err, store.ErrKeyMismatch):
		writeProblem(w, kindKeyMismatch.problem("This Idempotency-Key was already used with a different pipeline or body."))
	case errors.Is(err, engine.ErrInvalidInput):
		// The message names the limit and the step, never input bytes.
		writeProblem(w, kindInvalidInput.problem(strings.TrimPrefix(err.Error(), engine.ErrInvalidInput.Error()+": ")))
	case errors.Is(err, engine.ErrKeyRequired):
		writeProblem(w, kindKeyRequired.problem("This service requires an Idempotency-Key header on every submission."))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, store.ErrUnavailable):
		a.logError(r, "http_backend_unavailable", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, kindUnavailable.problem("The request did not complete in time; retry it (a submission with the same Idempotency-Key)."))
	default:
		a.logError(r, "http_internal_error", err)
		writeProblem(w, kindInternal.problem("The request could not be processed."))
	}
}

// logError logs the error behind a response. Runtime and store errors
// carry ids and codes, never payload bytes.
func (a *api) logError(r *http.Request, event string, err error) {
	a.log.LogAttrs(r.Context(), slog.LevelError, event, slog.String("event", event),
		slog.String("method", r.Method), slog.String("route", r.Pattern), slog.String("error", err.Error()))
}
