package httpapi

// The operator plane's routes: list executions, an execution's history
// and input, cancel, bulk re-drive and its progress, the dead letters and
// their counts, and the OpenAPI document of every route.

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// OpenAPI is the OpenAPI 3.1 document of every route, served at GET
// /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// maxCursorLen bounds a cursor query parameter (cursors are a few hundred
// bytes; a longer one is none of ours).
const maxCursorLen = 8 << 10

// RedrivesRequest is the body of POST /v1/redrives.
type RedrivesRequest struct {
	Filter RedrivesFilter `json:"filter"`
	// Reason is required, at most MaxRedriveReasonLen bytes: each
	// re-driven execution's audit note names the job and this reason.
	Reason string `json:"reason"`
	// RatePerSecond bounds the re-drives per second (1 to
	// engine.MaxRedriveRate; absent: engine.DefaultRedriveRate).
	RatePerSecond *int `json:"ratePerSecond,omitempty"`
	// DryRun only counts the matching executions.
	DryRun bool `json:"dryRun,omitempty"`
}

// RedrivesFilter selects the executions of a bulk re-drive.
type RedrivesFilter struct {
	PipelineID string `json:"pipelineId,omitempty"`
	// Status holds DLQ and/or FAILED (absent: both).
	Status    []store.Status `json:"status,omitempty"`
	ErrorCode string         `json:"errorCode,omitempty"`
	// CreatedAfter and CreatedBefore are RFC 3339 times (exclusive).
	CreatedAfter  string `json:"createdAfter,omitempty"`
	CreatedBefore string `json:"createdBefore,omitempty"`
}

// listParams reads the limit and cursor parameters shared by the lists,
// or writes the 400 and returns false.
func listParams(w http.ResponseWriter, q url.Values, max int) (limit int, cursor string, ok bool) {
	if vs, has := q["limit"]; has {
		n, err := strconv.Atoi(vs[0])
		if len(vs) != 1 || err != nil || n < 1 || n > max {
			writeProblem(w, kindInvalidRequest.problem(fmt.Sprintf("limit must be given once, an integer from 1 to %d.", max)))
			return 0, "", false
		}
		limit = n
	}
	if vs := q["cursor"]; len(vs) > 1 || (len(vs) == 1 && (vs[0] == "" || len(vs[0]) > maxCursorLen)) {
		writeProblem(w, kindInvalidCursor.problem("cursor must be given once, as the nextCursor of the previous page."))
		return 0, "", false
	}
	return limit, q.Get("cursor"), true
}

// pipelineParam reads the pipelineId parameter ("" when absent), or
// writes the 400 and returns false.
func pipelineParam(w http.ResponseWriter, q url.Values) (string, bool) {
	vs, has := q["pipelineId"]
	if !has {
		return "", true
	}
	if len(vs) != 1 || !pipeline.ValidID(vs[0]) {
		writeProblem(w, kindInvalidPipelineID.problem("pipelineId must be given once, 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit."))
		return "", false
	}
	return vs[0], true
}

// parseStatuses reads statuses given as comma-separated lists (repeated
// or not); ok is false with bad the first value that is not a status.
func parseStatuses(values []string) (out []store.Status, bad string, ok bool) {
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			st := store.Status(strings.TrimSpace(s))
			if !st.Valid() {
				return nil, s, false
			}
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	return out, "", true
}

// knownStatuses names every status for a problem's detail.
func knownStatuses() string {
	names := make([]string, len(store.Statuses))
	for i, s := range store.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// list handles GET /v1/executions (executionByKey with idempotencyKey).
func (a *api) list(w http.ResponseWriter, r *http.Request) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if q.Has("idempotencyKey") {
		a.executionByKey(w, r, tenant, q)
		return
	}
	pid, ok := pipelineParam(w, q)
	if !ok {
		return
	}
	statuses, bad, ok := parseStatuses(q["status"])
	if !ok {
		writeProblem(w, kindInvalidRequest.problem(fmt.Sprintf("status %q is unknown; status takes a comma-separated list of %s.", store.Truncate(bad, 64), knownStatuses())))
		return
	}
	limit, cursor, ok := listParams(w, q, store.MaxListLimit)
	if !ok {
		return
	}
	page, err := a.rt.List(r.Context(), store.ListQuery{TenantID: tenant, PipelineID: pid, Statuses: statuses, Limit: limit, Cursor: cursor})
	switch {
	case errors.Is(err, store.ErrInvalidCursor):
		writeProblem(w, kindInvalidCursor.problem("The cursor is not one this list returned for these parameters: start again without it."))
		return
	case errors.Is(err, store.ErrInvalidListQuery):
		writeProblem(w, kindInvalidRequest.problem("The list parameters are not valid."))
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	resp := client.ExecutionPage{Executions: make([]client.Execution, len(page.Executions)), NextCursor: page.Cursor}
	for i := range page.Executions {
		resp.Executions[i] = statusDocument(&page.Executions[i])
	}
	writeJSON(w, http.StatusOK, resp)
}

// maxHistoryBytes bounds the events of one history answer, as JSON. A
// page of history.MaxPage ordinary events is about a quarter of it (270
// KB, TestHistoryAnswerSizeIsBounded); events with error messages and
// reasons at their 2 KB bounds, full of characters JSON escapes, are 25
// KB each and would pass API Gateway's 6 MB response limit at a thousand
// a page, so an answer stops at this budget and hands out a nextCursor
// instead. Within a Lambda response the body's bytes are escaped once
// more, at most doubling them: 2 MiB, well under 6 MB.
const maxHistoryBytes = 1 << 20

// history handles GET /v1/executions/{executionId}/history: one page,
// limit events (client.DefaultHistoryPage when absent, at most
// history.MaxPage) after the cursor, cut shorter by maxHistoryBytes.
func (a *api) history(w http.ResponseWriter, r *http.Request) {
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	limit, raw, ok := listParams(w, r.URL.Query(), history.MaxPage)
	if !ok {
		return
	}
	if limit == 0 {
		limit = client.DefaultHistoryPage
	}
	after, err := history.ParseCursor(raw)
	if err != nil {
		writeProblem(w, kindInvalidCursor.problem("cursor must be a nextCursor or endCursor of this execution's history."))
		return
	}
	// The cursor comes from a caller: history.PageAfter checks that it
	// names an event of this history (the console pages with it too).
	events, err := a.rt.History(r.Context(), key)
	var page history.Page
	if err == nil {
		page, err = history.PageAfter(events, after, limit)
	}
	switch {
	case errors.Is(err, engine.ErrHistoryUnavailable):
		writeProblem(w, kindHistoryUnavailable.problem("This deployment keeps no execution history."))
		return
	case errors.Is(err, history.ErrCursor):
		writeProblem(w, kindInvalidCursor.problem("The cursor names no event of this execution's history (it is another execution's, or an earlier incarnation's): start again without it."))
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, historyDocument(key.ExecutionID, page))
}

// historyDocument is the answer of a page of history: its events up to
// maxHistoryBytes of JSON (at least one), and the cursors where they end.
func historyDocument(executionID string, p history.Page) client.History {
	events := make([]client.Event, 0, len(p.Events))
	size := 0
	for i, ev := range p.Events {
		doc := historyEvent(ev)
		b, _ := json.Marshal(doc) // a plain struct: cannot fail
		if size += len(b) + 1; size > maxHistoryBytes && i > 0 {
			p = p.Head(i)
			break
		}
		events = append(events, doc)
	}
	resp := client.History{ExecutionID: executionID, Events: events, EndCursor: p.End.String()}
	if p.Next != nil {
		resp.NextCursor = p.Next.String()
	}
	return resp
}

func historyEvent(ev history.Event) client.Event {
	out := client.Event{Seq: ev.Seq, Type: ev.Type, At: utc(ev.At), StepIndex: ev.StepIndex, StepName: ev.StepName,
		Attempt: ev.Attempt, Status: ev.Status, Worker: ev.Worker, Reason: ev.Reason}
	if ev.Error != nil {
		out.Error = &client.EventError{Code: ev.Error.Code, Message: ev.Error.Message}
	}
	if !ev.RetryAt.IsZero() {
		out.RetryAt = utc(ev.RetryAt)
	}
	if !ev.WakeAt.IsZero() {
		out.WakeAt = utc(ev.WakeAt)
	}
	return out
}

// decodeBody decodes a JSON object body into v, refusing unknown members,
// trailing data and an object whose shape is not what shape says; a
// non-empty detail says what is wrong.
func decodeBody(body []byte, v any, shape string) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return "The body must be a JSON object " + shape + " with no other members."
	}
	if _, err := dec.Token(); err != io.EOF {
		return "The body must hold exactly one JSON object."
	}
	return ""
}

// checkReason says what is wrong with an operator's reason ("" if nothing).
func checkReason(reason string) string {
	switch {
	case strings.TrimSpace(reason) == "":
		return `"reason" is required and must not be blank.`
	case len(reason) > MaxRedriveReasonLen:
		return fmt.Sprintf(`"reason" must be at most %d bytes.`, MaxRedriveReasonLen)
	}
	return ""
}

// cancel handles POST /v1/executions/{executionId}/cancel (authorized as
// re-drive is).
func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	body, ok := a.operatorBody(w, r)
	if !ok {
		return
	}
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	var req client.CancelRequest
	detail := decodeBody(body, &req, `{"reason": string}`)
	if detail == "" {
		detail = checkReason(req.Reason)
	}
	if detail != "" {
		writeProblem(w, kindInvalidRequest.problem(detail))
		return
	}
	e, changed, err := a.rt.Cancel(r.Context(), key, req.Reason)
	var prob Problem
	switch {
	case err == nil && !changed && e.Status == store.Cancelled:
		writeJSON(w, http.StatusOK, statusDocument(&e))
		return
	case err == nil:
		writeJSON(w, http.StatusAccepted, statusDocument(&e))
		return
	case errors.Is(err, engine.ErrNotCancellable):
		prob = kindNotCancellable.problem(fmt.Sprintf("The execution is %s: it has ended and cannot be cancelled.", e.Status))
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrLeaseLost):
		prob = kindVersionMismatch.problem("The execution kept changing while it was being cancelled; read its status and retry.")
	default:
		a.fail(w, r, err)
		return
	}
	prob.ExecutionID, prob.ExecutionStatus = e.ExecutionID, e.Status
	writeProblem(w, prob)
}

// redriveJobURL is the URL of a bulk re-drive's progress.
func (a *api) redriveJobURL(id string) string {
	return a.basePath + "/v1/redrives/" + url.PathEscape(id)
}

// startRedrives handles POST /v1/redrives (authorized as re-drive is).
// With an Idempotency-Key the job id derives from the tenant and the key:
// a retried request answers the job it started (200, the same id), the
// key with another body is 422; without one every request starts a new
// job.
func (a *api) startRedrives(w http.ResponseWriter, r *http.Request) {
	a.startJob(w, r, bulkKind{
		noun:        "bulk re-drive",
		invalid:     "The bulk re-drive is not valid: check its filter, reason and rate.",
		unavailable: "This deployment's state store keeps no bulk re-drive jobs.",
		url:         a.redriveJobURL,
		started: func(job engine.RedriveJob) any {
			return client.BulkRedrive{RedriveID: job.ID, Matched: job.Matched, Duplicate: job.Duplicate}
		},
	}, func(body []byte, key string) (engine.RedrivesOptions, string) {
		var req RedrivesRequest
		detail := decodeBody(body, &req, `{"filter": {"pipelineId", "status", "errorCode", "createdAfter", "createdBefore"}, "reason": string, "ratePerSecond": integer, "dryRun": boolean}`)
		filter, rate := engine.RedriveFilter{}, 0
		if detail == "" {
			filter, rate, detail = checkRedrives(&req)
		}
		return engine.RedrivesOptions{Filter: filter, Reason: req.Reason, RatePerSecond: rate, DryRun: req.DryRun, IdempotencyKey: key}, detail
	})
}

// bulkKind is what the routes of one kind of bulk job (re-drive, pause,
// resume) say: its name in problems, the problems' details, the job's
// URL and the document a start answers.
type bulkKind struct {
	noun, invalid, unavailable string
	url                        func(id string) string
	started                    func(engine.RedriveJob) any
}

// startJob starts a bulk job (authorized as re-drive is): parse turns
// the request's body into the job's options, or a detail of what is
// wrong. With an Idempotency-Key the job id derives from the tenant and
// the key: a retried request answers the job it started (200, the same
// id), the key with another body is 422.
func (a *api) startJob(w http.ResponseWriter, r *http.Request, k bulkKind, parse func(body []byte, key string) (engine.RedrivesOptions, string)) {
	body, ok := a.operatorBody(w, r)
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
	opts, detail := parse(body, key)
	if detail != "" {
		writeProblem(w, kindInvalidRequest.problem(detail))
		return
	}
	job, err := a.rt.StartRedrivesWith(r.Context(), tenant, opts)
	switch {
	case errors.Is(err, store.ErrKeyMismatch):
		writeProblem(w, kindKeyMismatch.problem("This Idempotency-Key was already used for a "+k.noun+" with another filter, reason, rate or dry run."))
		return
	case errors.Is(err, engine.ErrInvalidRedrive):
		writeProblem(w, kindInvalidRequest.problem(k.invalid))
		return
	case errors.Is(err, engine.ErrRedrivesUnavailable):
		writeProblem(w, kindRedrivesUnavailable.problem(k.unavailable))
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	code := http.StatusAccepted
	if job.Duplicate {
		code = http.StatusOK
	}
	w.Header().Set("Location", k.url(job.ID))
	writeJSON(w, code, k.started(job))
}

// readJob reads the bulk job named by the path value name for a progress
// route (authorized as re-drive is); accept says whether a job found is
// one of the route's kind (another kind's is not found here). It writes
// the problem and reports false when there is none to show.
func (a *api) readJob(w http.ResponseWriter, r *http.Request, name string, notFound Problem, unavailable string, accept func(engine.RedriveJob) bool) (engine.RedriveJob, bool) {
	if !a.authorized(w, r) {
		return engine.RedriveJob{}, false
	}
	tenant, ok := a.tenant(w, r)
	if !ok {
		return engine.RedriveJob{}, false
	}
	id := r.PathValue(name)
	if !validExecutionID(id) {
		writeProblem(w, notFound)
		return engine.RedriveJob{}, false
	}
	job, err := a.rt.RedriveJob(r.Context(), tenant, id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && !accept(job):
		writeProblem(w, notFound)
		return job, false
	case errors.Is(err, engine.ErrRedrivesUnavailable):
		writeProblem(w, kindRedrivesUnavailable.problem(unavailable))
		return job, false
	case err != nil:
		a.fail(w, r, err)
		return job, false
	}
	return job, true
}

// checkRedrives turns a bulk re-drive request into the engine's filter
// and rate; a non-empty detail says what is wrong.
func checkRedrives(req *RedrivesRequest) (engine.RedriveFilter, int, string) {
	f := engine.RedriveFilter{PipelineID: req.Filter.PipelineID, ErrorCode: req.Filter.ErrorCode}
	if detail := checkReason(req.Reason); detail != "" {
		return f, 0, detail
	}
	if f.PipelineID != "" && !pipeline.ValidID(f.PipelineID) {
		return f, 0, `"filter.pipelineId" must be 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit.`
	}
	if len(f.ErrorCode) > 128 {
		return f, 0, `"filter.errorCode" must be at most 128 bytes.`
	}
	for _, s := range req.Filter.Status {
		if s != store.DLQ && s != store.Failed {
			return f, 0, fmt.Sprintf(`"filter.status" may hold %s and %s (the statuses a re-drive takes without confirmation), not %q.`, store.DLQ, store.Failed, store.Truncate(string(s), 64))
		}
	}
	f.Statuses = req.Filter.Status
	for name, pair := range map[string]struct {
		v   string
		dst *time.Time
	}{"createdAfter": {req.Filter.CreatedAfter, &f.CreatedAfter}, "createdBefore": {req.Filter.CreatedBefore, &f.CreatedBefore}} {
		if pair.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, pair.v)
		if err != nil {
			return f, 0, fmt.Sprintf(`"filter.%s" must be an RFC 3339 time.`, name)
		}
		*pair.dst = t
	}
	rate := 0
	if req.RatePerSecond != nil {
		if rate = *req.RatePerSecond; rate < 1 || rate > engine.MaxRedriveRate {
			return f, 0, fmt.Sprintf(`"ratePerSecond" must be an integer from 1 to %d.`, engine.MaxRedriveRate)
		}
	}
	return f, rate, ""
}

// redriveProgress handles GET /v1/redrives/{redriveId} (authorized as
// re-drive is).
func (a *api) redriveProgress(w http.ResponseWriter, r *http.Request) {
	job, ok := a.readJob(w, r, "redriveId", kindRedriveNotFound.problem("No bulk re-drive with this id exists for this tenant."),
		"This deployment's state store keeps no bulk re-drive jobs.", func(engine.RedriveJob) bool { return true })
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, client.RedriveProgress{RedriveID: job.ID, Matched: job.Matched, Redriven: job.Redriven, Skipped: job.Skipped,
		Failed: job.Failed, Done: job.Done, DryRun: job.DryRun})
}

// deadLetters handles GET /v1/dead-letters: a page of the tenant's
// dead-letter records, each with its execution's current status and
// whether it is still outstanding (outstanding=true keeps those only).
func (a *api) deadLetters(w http.ResponseWriter, r *http.Request) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	pid, ok := pipelineParam(w, q)
	if !ok {
		return
	}
	limit, cursor, ok := listParams(w, q, deadletter.MaxListLimit)
	if !ok {
		return
	}
	outstanding := false
	if vs, has := q["outstanding"]; has {
		if len(vs) != 1 || (vs[0] != "true" && vs[0] != "false") {
			writeProblem(w, kindInvalidRequest.problem("outstanding must be given once, true or false."))
			return
		}
		outstanding = vs[0] == "true"
	}
	page, err := a.rt.DeadLetterViews(r.Context(), engine.DeadLetterViewQuery{
		ListQuery: deadletter.ListQuery{TenantID: tenant, PipelineID: pid, Limit: limit, Cursor: cursor}, OutstandingOnly: outstanding})
	if err != nil {
		a.deadLettersFailed(w, r, err)
		return
	}
	resp := client.DeadLetterPage{DeadLetters: make([]client.DeadLetter, 0, len(page.DeadLetters)), NextCursor: page.Cursor}
	for _, v := range page.DeadLetters {
		env := v.Envelope
		d := client.DeadLetter{
			ID: v.ID, ExecutionID: env.ExecutionID, PipelineID: env.PipelineID, StepIndex: env.StepIndex, StepName: env.StepName,
			TransitionKey: env.TransitionKey, TerminalReason: env.TerminalReason, ErrorCode: env.ErrorCode, ErrorMessage: env.ErrorMessage,
			RetriesObserved: env.RetriesObserved, FailedAt: utc(env.FailedAt), RecordedAt: utc(v.RecordedAt), Outstanding: v.Outstanding,
		}
		if v.Current != nil {
			d.CurrentStatus, d.CurrentVersion = v.Current.Status, v.Current.Version
		}
		resp.DeadLetters = append(resp.DeadLetters, d)
	}
	writeJSON(w, http.StatusOK, resp)
}

// deadLetterCounts handles GET /v1/dead-letters/counts: the tenant's
// records (of one pipeline with pipelineId) counted by error code, over
// the newest engine.DeadLetterCountLimit.
func (a *api) deadLetterCounts(w http.ResponseWriter, r *http.Request) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	pid, ok := pipelineParam(w, r.URL.Query())
	if !ok {
		return
	}
	n, err := a.rt.DeadLetterCounts(r.Context(), deadletter.ListQuery{TenantID: tenant, PipelineID: pid})
	if err != nil {
		a.deadLettersFailed(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, client.DeadLetterCounts{ByCode: n.ByCode, OutstandingByCode: n.Outstanding, Scanned: n.Scanned, Complete: n.Complete})
}

// deadLettersFailed answers an error of the dead-letter routes.
func (a *api) deadLettersFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, deadletter.ErrInvalidCursor):
		writeProblem(w, kindInvalidCursor.problem("The cursor is not one this list returned for these parameters: start again without it."))
	case errors.Is(err, deadletter.ErrInvalidListQuery):
		writeProblem(w, kindInvalidRequest.problem("The list parameters are not valid."))
	case errors.Is(err, engine.ErrDeadLettersUnavailable):
		writeProblem(w, kindDeadLettersUnavailable.problem("This deployment records no dead letters that it can list."))
	default:
		a.fail(w, r, err)
	}
}

// MaxInputViewBytes bounds the input GET /v1/inputs/{executionId}
// serves: 1 MiB. A larger input is answered 413 input-too-large with its
// size (it is not read): an operator plane view is for looking at an
// input, and the bound keeps every answer far inside a Lambda response
// (6 MB, binary bytes base64-encoded).
const MaxInputViewBytes = 1 << 20

// kindInputTooLarge: the input is larger than MaxInputViewBytes.
var kindInputTooLarge = kind{"input-too-large", http.StatusRequestEntityTooLarge, "Input too large to view"}

// input handles GET /v1/inputs/{executionId} (an operator route,
// registered only where re-drive is; not under /v1/executions/, whose
// IAM grant a client holds for the status route and which would then
// cover it): the bytes the execution was
// submitted with, as a download (Content-Disposition: attachment) of
// application/json or application/octet-stream, never of the submitted
// media type, so that a browser renders none of it; the submitted type is
// in X-Input-Content-Type. The input can hold personal data: every answer
// with its bytes is logged as payload_viewed.
func (a *api) input(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(w, r) {
		return
	}
	key, ok := a.executionKey(w, r)
	if !ok {
		return
	}
	e, p, err := a.rt.InputWithin(r.Context(), key, MaxInputViewBytes)
	switch {
	case errors.Is(err, engine.ErrPayloadTooLarge):
		prob := kindInputTooLarge.problem(fmt.Sprintf("The input is %d bytes; this route serves inputs of at most %d bytes.", e.Input.Length, MaxInputViewBytes))
		prob.ExecutionID, prob.ExecutionStatus = e.ExecutionID, e.Status
		writeProblem(w, prob)
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	a.payloadViewed(r, key, "input", len(p.Data))
	h := w.Header()
	ct, ext := payload.ContentTypeOctet, ".bin"
	if p.Encoding == payload.EncodingJSON {
		ct, ext = payload.ContentTypeJSON, ".json"
	}
	h.Set("Content-Type", ct)
	// The id is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-'
	// (validExecutionID): a file name as it is.
	h.Set("Content-Disposition", `attachment; filename="`+key.ExecutionID+"-input"+ext+`"`)
	if p.ContentType != "" {
		h.Set(client.InputContentTypeHeader, p.ContentType)
	}
	if p.Encoding == payload.EncodingProtobuf && p.Message != "" {
		h.Set(MessageTypeHeader, p.Message)
	}
	writePayload(w, p.Data)
}

// writePayload writes the bytes of a stored payload (a result, an input)
// with 200 and the headers that keep a browser from running them.
func writePayload(w http.ResponseWriter, data []byte) {
	h := w.Header()
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// The bytes are whatever a caller or a step produced: never let a
	// browser run them.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// payloadViewed writes the audit line of an operator's view of a payload
// (which: input or result): tenant, execution, size and the caller's
// address (and IAM identity behind API Gateway), never the bytes.
func (a *api) payloadViewed(r *http.Request, key store.Key, which string, n int) {
	addr := r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	attrs := []slog.Attr{slog.String("event", "payload_viewed"), slog.String("tenant", key.TenantID),
		slog.String("execution_id", key.ExecutionID), slog.String("which", which), slog.Int("bytes", n),
		slog.String("client_address", addr), slog.String("route", r.Pattern)}
	if rc, ok := GatewayContext(r.Context()); ok && rc.Authorizer != nil && rc.Authorizer.IAM != nil {
		attrs = append(attrs, slog.String("caller_arn", rc.Authorizer.IAM.UserARN))
	}
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "payload_viewed", attrs...)
}

// openAPI handles GET /openapi.json.
func (a *api) openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(OpenAPI)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(OpenAPI)
}
