package clitest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// Fake starts the contract fake: an HTTP server that implements the
// issue-13 contract of the operator routes (GET /v1/executions,
// /v1/executions/{id}/history, POST /v1/executions/{id}/cancel,
// POST /v1/redrives, GET /v1/redrives/{id}, GET /v1/dead-letters,
// GET /openapi.json) and the submit, status, result and re-drive routes,
// over a model of the test pipelines in which an execution reaches its
// resting state during its submission: PipelineOK SUCCEEDED,
// PipelineFail DLQ (with a dead-letter record), PipelineWait
// WAITING_EXTERNAL.
func Fake(t testing.TB) *Target {
	t.Helper()
	f := &fake{execs: map[string]*fexec{}, idem: map[string]string{}, jobs: map[string]*client.RedriveProgress{}}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	f.tokens = &tokens{m: map[string][2]string{}}
	return &Target{URL: srv.URL, AdminToken: AdminToken, tokens: f.tokens}
}

// fake is the contract fake's state.
type fake struct {
	mu     sync.Mutex
	last   time.Time
	execs  map[string]*fexec // by tenant + "/" + id
	order  []*fexec          // submission order
	idem   map[string]string // tenant + "/" + key -> id
	jobs   map[string]*client.RedriveProgress
	dead   []fdead
	tokens *tokens
}

type fexec struct {
	tenant string
	input  json.RawMessage
	e      client.Execution
	events []client.Event
}

type fdead struct {
	tenant, pipeline string
	r                deadletter.Record
}

// tick returns a time after every time tick returned before, so that
// "newest first" is a strict order.
func (f *fake) tick() time.Time {
	now := time.Now().UTC().Truncate(time.Millisecond)
	if !now.After(f.last) {
		now = f.last.Add(time.Millisecond)
	}
	f.last = now
	return now
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// event appends an event of x's current step and status.
func (f *fake) event(x *fexec, typ history.Type, mut func(*client.Event)) {
	x.e.Version++
	x.e.UpdatedAt = f.tick()
	ev := client.Event{Seq: len(x.events) + 1, Type: typ, At: x.e.UpdatedAt, StepIndex: x.e.StepIndex,
		StepName: x.e.StepName, Attempt: x.e.Attempt, Status: x.e.Status}
	if mut != nil {
		mut(&ev)
	}
	x.events = append(x.events, ev)
}

var steps = map[string][]string{PipelineOK: {"prepare", "finish"}, PipelineFail: {"work"}, PipelineWait: {"approve", "finish"}}

// run moves x from QUEUED to its resting state, as the real workers do.
func (f *fake) run(x *fexec) {
	names := steps[x.e.PipelineID]
	for {
		x.e.Status, x.e.StepName = store.Running, names[x.e.StepIndex]
		f.event(x, history.StepStarted, func(ev *client.Event) { ev.Worker = "fake-worker" })
		switch {
		case x.e.PipelineID == PipelineFail:
			x.e.Status = store.DLQ
			x.e.Error = &client.ExecutionError{Code: ErrorCodeFail, Message: "this step always fails", TerminalReason: "non_retryable"}
			fail := &client.EventError{Code: ErrorCodeFail, Message: x.e.Error.Message}
			f.event(x, history.StepFailed, func(ev *client.Event) { ev.Error = fail })
			f.event(x, history.DeadLettered, func(ev *client.Event) { ev.Error = fail })
			key := fmt.Sprintf("%s:%d:%d", x.e.ExecutionID, x.e.StepIndex, x.e.Attempt)
			f.dead = append(f.dead, fdead{tenant: x.tenant, pipeline: x.e.PipelineID, r: deadletter.Record{
				ID: key, Kind: deadletter.KindExecution, TenantID: x.tenant, ExecutionID: x.e.ExecutionID, RecordedAt: x.e.UpdatedAt,
				Envelope: &deadletter.Envelope{TenantID: x.tenant, ExecutionID: x.e.ExecutionID, PipelineID: x.e.PipelineID,
					StepIndex: x.e.StepIndex, StepName: x.e.StepName, TransitionKey: key, TerminalReason: "non_retryable",
					ErrorCode: ErrorCodeFail, ErrorMessage: x.e.Error.Message, RetriesObserved: x.e.Attempt - 1, FailedAt: x.e.UpdatedAt},
			}})
			return
		case x.e.PipelineID == PipelineWait && x.e.StepIndex == 0:
			x.e.Status = store.WaitingExternal
			id := "aw-" + x.e.ExecutionID[:8]
			x.e.Await = &client.Await{AwaitID: id, Status: store.AwaitWaiting}
			f.event(x, history.Awaiting, nil)
			f.tokens.put(x.e.ExecutionID, id, "fake-token-"+id)
			return
		}
		if x.e.StepIndex == len(names)-1 {
			x.e.Status = store.Succeeded
			f.event(x, history.StepSucceeded, nil)
			f.event(x, history.Succeeded, nil)
			return
		}
		x.e.Status = store.Queued
		f.event(x, history.StepSucceeded, nil)
		x.e.StepIndex, x.e.Attempt = x.e.StepIndex+1, 1
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func problem(w http.ResponseWriter, code int, kind, title, detail string, x *client.Execution) {
	p := client.Problem{Type: client.ProblemTypePrefix + kind, Title: title, Status: code, Detail: detail}
	if x != nil {
		p.ExecutionID, p.ExecutionStatus = x.ExecutionID, x.Status
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func badRequest(w http.ResponseWriter, detail string) {
	problem(w, http.StatusBadRequest, "invalid-request", "Invalid request", detail, nil)
}

func notFound(w http.ResponseWriter) {
	problem(w, http.StatusNotFound, "execution-not-found", "Execution not found", "No execution with this id exists for this tenant.", nil)
}

func tenantOf(r *http.Request) string {
	if t := r.Header.Get(client.TenantHeader); t != "" {
		return t
	}
	return "default"
}

// admin checks the operator token, or writes the 401.
func admin(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") == "Bearer "+AdminToken {
		return true
	}
	problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "This route requires an Authorization: Bearer admin token.", nil)
	return false
}

// lookup returns the caller's execution the path names, or writes the 404.
func (f *fake) lookup(w http.ResponseWriter, r *http.Request) *fexec {
	x := f.execs[tenantOf(r)+"/"+r.PathValue("id")]
	if x == nil {
		notFound(w)
	}
	return x
}

// decode reads a JSON body into v, or writes the 400.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		badRequest(w, "The body is not the expected JSON object.")
		return false
	}
	return true
}

func (f *fake) handler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.HandlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			defer f.mu.Unlock()
			h(w, r)
		})
	}
	handle("POST /v1/pipelines/{pid}/executions", f.submit)
	handle("GET /v1/executions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if x := f.lookup(w, r); x != nil {
			writeJSON(w, http.StatusOK, x.e)
		}
	})
	handle("GET /v1/executions/{id}/result", func(w http.ResponseWriter, r *http.Request) {
		x := f.lookup(w, r)
		switch {
		case x == nil:
		case x.e.Status != store.Succeeded:
			problem(w, http.StatusConflict, "execution-not-succeeded", "Execution has not succeeded", "The execution has not succeeded.", &x.e)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(x.input)
		}
	})
	handle("GET /v1/executions/{id}/history", func(w http.ResponseWriter, r *http.Request) {
		if x := f.lookup(w, r); x != nil {
			writeJSON(w, http.StatusOK, client.History{ExecutionID: x.e.ExecutionID, Events: x.events})
		}
	})
	handle("POST /v1/executions/{id}/cancel", f.cancel)
	handle("POST /v1/executions/{id}/redrive", func(w http.ResponseWriter, r *http.Request) {
		if !admin(w, r) {
			return
		}
		var req client.RedriveRequest
		x := f.lookup(w, r)
		if x == nil || !decode(w, r, &req) {
			return
		}
		if strings.TrimSpace(req.Reason) == "" {
			badRequest(w, `"reason" is required and must not be blank.`)
			return
		}
		if x.e.Status != store.DLQ && x.e.Status != store.Failed {
			problem(w, http.StatusConflict, "execution-not-redrivable", "Execution cannot be re-driven", "Only DLQ and FAILED executions can be re-driven.", &x.e)
			return
		}
		writeJSON(w, http.StatusAccepted, f.redrive(x, req.Reason))
	})
	handle("GET /v1/executions", f.list)
	handle("POST /v1/redrives", f.startRedrives)
	handle("GET /v1/redrives/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !admin(w, r) {
			return
		}
		job := f.jobs[tenantOf(r)+"/"+r.PathValue("id")]
		if job == nil {
			problem(w, http.StatusNotFound, "redrive-not-found", "Re-drive not found", "No bulk re-drive with this id exists for this tenant.", nil)
			return
		}
		writeJSON(w, http.StatusOK, job)
	})
	handle("GET /v1/dead-letters", f.deadLetters)
	handle("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"openapi": "3.1.0", "info": map[string]string{"title": "qasync (contract fake)", "version": "0"},
			"paths": map[string]any{"/v1/executions": map[string]any{}, "/v1/redrives": map[string]any{}, "/v1/dead-letters": map[string]any{}}})
	})
	handle("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "Not found", "No route matches the request path.", nil)
	})
	return mux
}

func (f *fake) submit(w http.ResponseWriter, r *http.Request) {
	pid, tenant := r.PathValue("pid"), tenantOf(r)
	if steps[pid] == nil {
		problem(w, http.StatusNotFound, "pipeline-not-found", "Pipeline not found", "No pipeline with this id is registered.", nil)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if len(body) == 0 || !json.Valid(body) {
		problem(w, http.StatusBadRequest, "invalid-json", "Invalid JSON body", "The request body is not valid UTF-8 JSON.", nil)
		return
	}
	// Without a key, the key is derived from the pipeline and the body
	// (the default policy OPTIONAL_CLIENT_KEY): identical submissions
	// collapse into one execution.
	key := r.Header.Get(client.IdempotencyKeyHeader)
	if key == "" {
		key = "derived\x00" + pid + "\x00" + string(body)
	}
	if id, ok := f.idem[tenant+"/"+key]; ok {
		x := f.execs[tenant+"/"+id]
		writeJSON(w, http.StatusOK, submission(x, true))
		return
	}
	now := f.tick()
	x := &fexec{tenant: tenant, input: body, e: client.Execution{ExecutionID: newID(), PipelineID: pid, PipelineVersion: "fake",
		Status: store.Queued, StepName: steps[pid][0], Attempt: 1, CreatedAt: now, UpdatedAt: now}}
	x.events = []client.Event{{Seq: 1, Type: history.Submitted, At: now, StepName: x.e.StepName, Attempt: 1, Status: store.Queued}}
	x.e.Version = 1
	f.execs[tenant+"/"+x.e.ExecutionID] = x
	f.order = append(f.order, x)
	f.idem[tenant+"/"+key] = x.e.ExecutionID
	sub := submission(x, false)
	f.run(x)
	writeJSON(w, http.StatusAccepted, sub)
}

func submission(x *fexec, dup bool) client.Submission {
	u := "/v1/executions/" + x.e.ExecutionID
	return client.Submission{ExecutionID: x.e.ExecutionID, PipelineID: x.e.PipelineID, Status: store.Queued, Duplicate: dup,
		StatusURL: u, ResultURL: u + "/result", SubmittedAt: x.e.CreatedAt}
}

func (f *fake) cancel(w http.ResponseWriter, r *http.Request) {
	if !admin(w, r) {
		return
	}
	var req client.CancelRequest
	x := f.lookup(w, r)
	if x == nil || !decode(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		badRequest(w, `"reason" is required and must not be blank.`)
		return
	}
	switch x.e.Status {
	case store.Cancelled:
		writeJSON(w, http.StatusOK, x.e)
	case store.Succeeded, store.Failed, store.DLQ:
		problem(w, http.StatusConflict, "execution-not-cancellable", "Execution cannot be cancelled",
			fmt.Sprintf("The execution is %s; only unfinished executions can be cancelled.", x.e.Status), &x.e)
	default:
		f.event(x, history.CancelRequested, func(ev *client.Event) { ev.Reason = req.Reason })
		x.e.Status = store.Cancelled
		f.event(x, history.Cancelled, func(ev *client.Event) { ev.Reason = req.Reason })
		writeJSON(w, http.StatusAccepted, x.e)
	}
}

// redrive re-drives x (DLQ or FAILED) and returns its QUEUED status; the
// model then runs it to its resting state again.
func (f *fake) redrive(x *fexec, reason string) client.Execution {
	x.e.Status, x.e.Attempt, x.e.Error = store.Queued, x.e.Attempt+1, nil
	f.event(x, history.Redriven, func(ev *client.Event) { ev.Reason = reason })
	queued := x.e
	f.run(x)
	return queued
}

// cursor is the fake's page cursor: the query it belongs to and the offset.
func cursor(query string, offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(query + "\x00" + strconv.Itoa(offset)))
}

// page parses limit and cursor for query, or writes the 400.
func page(w http.ResponseWriter, r *http.Request, query string) (limit, offset int, ok bool) {
	limit = 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			badRequest(w, "limit must be an integer from 1 to 500.")
			return 0, 0, false
		}
		limit = n
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		i := strings.LastIndexByte(string(b), 0)
		n, aerr := strconv.Atoi(string(b[i+1:]))
		if err != nil || i < 0 || string(b[:i]) != query || aerr != nil || n < 0 {
			badRequest(w, "The cursor does not belong to this query.")
			return 0, 0, false
		}
		offset = n
	}
	return limit, offset, true
}

// window returns items[offset:offset+limit] and the next cursor.
func window[T any](items []T, query string, limit, offset int) ([]T, string) {
	if offset > len(items) {
		offset = len(items)
	}
	end := min(offset+limit, len(items))
	next := ""
	if end < len(items) {
		next = cursor(query, end)
	}
	return items[offset:end], next
}

func parseStatuses(s string) ([]store.Status, bool) {
	if s == "" {
		return nil, true
	}
	var out []store.Status
	for _, p := range strings.Split(s, ",") {
		st := store.Status(p)
		if !st.Valid() {
			return nil, false
		}
		out = append(out, st)
	}
	return out, true
}

func (f *fake) list(w http.ResponseWriter, r *http.Request) {
	tenant, q := tenantOf(r), r.URL.Query()
	statuses, ok := parseStatuses(q.Get("status"))
	if !ok {
		badRequest(w, "status must be a comma-separated list of execution statuses.")
		return
	}
	query := "executions\x00" + tenant + "\x00" + q.Get("pipelineId") + "\x00" + q.Get("status")
	limit, offset, ok := page(w, r, query)
	if !ok {
		return
	}
	var all []client.Execution
	for _, x := range slices.Backward(f.order) {
		if x.tenant == tenant && (q.Get("pipelineId") == "" || x.e.PipelineID == q.Get("pipelineId")) &&
			(len(statuses) == 0 || slices.Contains(statuses, x.e.Status)) {
			all = append(all, x.e)
		}
	}
	items, next := window(all, query, limit, offset)
	writeJSON(w, http.StatusOK, client.ExecutionPage{Executions: append([]client.Execution{}, items...), NextCursor: next})
}

func (f *fake) startRedrives(w http.ResponseWriter, r *http.Request) {
	if !admin(w, r) {
		return
	}
	var req client.BulkRedriveRequest
	if !decode(w, r, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.Reason) == "":
		badRequest(w, `"reason" is required and must not be blank.`)
		return
	case req.RatePerSecond < 0:
		badRequest(w, `"ratePerSecond" must not be negative.`)
		return
	}
	statuses := req.Filter.Statuses
	if len(statuses) == 0 {
		statuses = []store.Status{store.DLQ}
	}
	for _, s := range statuses {
		if !s.Valid() {
			badRequest(w, `"filter.status" holds an unknown status.`)
			return
		}
	}
	tenant := tenantOf(r)
	var matched []*fexec
	for _, x := range f.order {
		fl := req.Filter
		if x.tenant == tenant && slices.Contains(statuses, x.e.Status) && (fl.PipelineID == "" || fl.PipelineID == x.e.PipelineID) &&
			(fl.ErrorCode == "" || (x.e.Error != nil && x.e.Error.Code == fl.ErrorCode)) &&
			(fl.CreatedAfter.IsZero() || x.e.CreatedAt.After(fl.CreatedAfter)) &&
			(fl.CreatedBefore.IsZero() || x.e.CreatedAt.Before(fl.CreatedBefore)) {
			matched = append(matched, x)
		}
	}
	id := "rd-" + newID()
	job := &client.RedriveProgress{RedriveID: id, Matched: len(matched), Done: true}
	if !req.DryRun {
		for _, x := range matched {
			if x.e.Status == store.DLQ || x.e.Status == store.Failed {
				f.redrive(x, req.Reason)
				job.Redriven++
			} else {
				job.Skipped++
			}
		}
	}
	f.jobs[tenant+"/"+id] = job
	writeJSON(w, http.StatusAccepted, client.BulkRedrive{RedriveID: id, Matched: len(matched)})
}

func (f *fake) deadLetters(w http.ResponseWriter, r *http.Request) {
	tenant, pid := tenantOf(r), r.URL.Query().Get("pipelineId")
	query := "dead-letters\x00" + tenant + "\x00" + pid
	limit, offset, ok := page(w, r, query)
	if !ok {
		return
	}
	var all []deadletter.Record
	for _, d := range slices.Backward(f.dead) {
		if d.tenant == tenant && (pid == "" || d.pipeline == pid) {
			all = append(all, d.r)
		}
	}
	items, next := window(all, query, limit, offset)
	writeJSON(w, http.StatusOK, client.DeadLetterPage{DeadLetters: append([]deadletter.Record{}, items...), NextCursor: next})
}
