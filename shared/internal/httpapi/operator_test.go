package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/store"
)

// fakeHistory answers the tenant "default"'s executions with a fixed
// history, and every other key with store.ErrNotFound (as readers do).
type fakeHistory struct{ err error }

func (f fakeHistory) History(_ context.Context, key store.Key) ([]history.Event, error) {
	if f.err != nil {
		return nil, f.err
	}
	if key.TenantID != "default" {
		return nil, store.ErrNotFound
	}
	at := epoch
	return []history.Event{
		{Seq: 1, Type: history.Submitted, At: at, StepName: "work", Attempt: 1, Status: store.Queued, Version: 1},
		{Seq: 2, Type: history.StepStarted, At: at, StepName: "work", Attempt: 1, Status: store.Running, Worker: "w-1", Version: 2},
		{Seq: 3, Type: history.StepFailed, At: at, StepName: "work", Attempt: 1, Status: store.WaitRetry,
			Error: &store.Failure{Code: "boom", Message: "it broke"}, RetryAt: at.Add(time.Second), Version: 3},
		{Seq: 4, Type: history.Cancelled, At: at, StepName: "work", Attempt: 2, Status: store.Cancelled, Reason: "ops", Version: 4},
	}, nil
}

// withOperator wires a history reader and a dead-letter lister, and
// hands back the fake clock.
func withOperator(clk **clock.Fake, dl *memory.DeadLetters, h history.Reader) envOption {
	return func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		if clk != nil {
			*clk = d.Clock.(*clock.Fake)
		}
		if dl != nil {
			d.DeadLetters = dl
		}
		d.History = h
	}
}

func get(e *env, path string, headers ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return e.do(req{method: http.MethodGet, path: path, headers: h})
}

// post sends body to path with the admin token (unless the headers say
// otherwise).
func post(e *env, path, body string, headers ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	h := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + adminToken}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			delete(h, headers[i])
		} else {
			h[headers[i]] = headers[i+1]
		}
	}
	return e.do(req{method: http.MethodPost, path: path, body: body, headers: h})
}

func TestListExecutionsRoute(t *testing.T) {
	t.Parallel()
	var clk *clock.Fake
	e := newEnv(t, withOperator(&clk, nil, nil))
	var ids []string
	for i := range 3 {
		ids = append(ids, e.mustSubmit("echo", fmt.Sprintf("k%d", i), `{}`).ExecutionID)
		clk.Advance(time.Millisecond)
	}
	failed := e.mustSubmit("fail", "f1", `{}`).ExecutionID
	clk.Advance(time.Millisecond)
	e.drive()
	e.mustSubmit("echo", "theirs", `{}`, "X-Tenant-Id", "other")

	all := decode[client.ExecutionPage](t, get(e, "/v1/executions"))
	if len(all.Executions) != 4 || all.NextCursor != "" || all.Executions[0].ExecutionID != failed || all.Executions[3].ExecutionID != ids[0] {
		t.Fatalf("list = %+v; want the tenant's 4, newest first, one page", all)
	}
	dlq := decode[client.ExecutionPage](t, get(e, "/v1/executions?status=DLQ,FAILED"))
	if len(dlq.Executions) != 1 || dlq.Executions[0].ExecutionID != failed || dlq.Executions[0].Status != store.DLQ {
		t.Fatalf("status=DLQ,FAILED lists %+v", dlq.Executions)
	}
	first := decode[client.ExecutionPage](t, get(e, "/v1/executions?pipelineId=echo&limit=2"))
	if len(first.Executions) != 2 || first.NextCursor == "" || first.Executions[0].ExecutionID != ids[2] {
		t.Fatalf("first page %+v", first)
	}
	rest := decode[client.ExecutionPage](t, get(e, "/v1/executions?pipelineId=echo&limit=2&cursor="+url.QueryEscape(first.NextCursor)))
	if len(rest.Executions) != 1 || rest.NextCursor != "" || rest.Executions[0].ExecutionID != ids[0] {
		t.Fatalf("second page %+v", rest)
	}
	theirs := decode[client.ExecutionPage](t, get(e, "/v1/executions", "X-Tenant-Id", "other"))
	if len(theirs.Executions) != 1 {
		t.Fatalf("the other tenant lists %d executions, want its 1", len(theirs.Executions))
	}
	for q, kind := range map[string]string{
		"status=NOPE":     "invalid-request",
		"status=DLQ,":     "invalid-request",
		"limit=0":         "invalid-request",
		"limit=501":       "invalid-request",
		"limit=ten":       "invalid-request",
		"limit=1&limit=2": "invalid-request",
		"pipelineId=-x":   "invalid-pipeline-id",
		"cursor=garbage":  "invalid-cursor",
		"cursor=" + url.QueryEscape(first.NextCursor):                               "invalid-cursor", // without pipelineId: another query
		"pipelineId=echo-2&cursor=" + url.QueryEscape(first.NextCursor):             "invalid-cursor",
		"pipelineId=echo&status=QUEUED&cursor=" + url.QueryEscape(first.NextCursor): "invalid-cursor",
	} {
		wantProblem(t, get(e, "/v1/executions?"+q), http.StatusBadRequest, kind)
	}
	wantProblem(t, get(e, "/v1/executions?pipelineId=echo&cursor="+url.QueryEscape(first.NextCursor), "X-Tenant-Id", "other"),
		http.StatusBadRequest, "invalid-cursor")
}

func TestHistoryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOperator(nil, nil, fakeHistory{}))
	id := e.mustSubmit("echo", "k1", `{}`).ExecutionID
	w := get(e, "/v1/executions/"+id+"/history")
	h := decode[client.History](t, w)
	if h.ExecutionID != id || len(h.Events) != 4 || h.Events[0].Seq != 1 || h.Events[0].Type != "SUBMITTED" {
		t.Fatalf("history = %+v", h)
	}
	if f := h.Events[2]; f.Type != "STEP_FAILED" || f.Error == nil || f.Error.Code != "boom" || f.RetryAt.IsZero() || f.Status != store.WaitRetry {
		t.Fatalf("STEP_FAILED event %+v", f)
	}
	if s := h.Events[1]; s.Worker != "w-1" || strings.Contains(w.Body.String(), `"error":null`) {
		t.Fatalf("STEP_STARTED event %+v (body %s)", s, w.Body)
	}
	wantProblem(t, get(e, "/v1/executions/"+id+"/history", "X-Tenant-Id", "other"), http.StatusNotFound, "execution-not-found")
	none := newEnv(t)
	wantProblem(t, get(none, "/v1/executions/"+id+"/history"), http.StatusNotFound, "history-unavailable")
}

func TestCancelRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	queued := e.mustSubmit("echo", "k1", `{}`).ExecutionID
	path := "/v1/executions/" + queued + "/cancel"
	w := post(e, path, `{"reason":"customer asked"}`)
	if w.Code != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", w.Code, w.Body)
	}
	doc := decode[client.Execution](t, w)
	if doc.Status != store.Cancelled || doc.CancelReason != "customer asked" || doc.CancelRequestedAt.IsZero() {
		t.Fatalf("cancelled document %+v", doc)
	}
	again := post(e, path, `{"reason":"again"}`)
	if again.Code != http.StatusOK || decode[client.Execution](t, again).CancelReason != "customer asked" {
		t.Fatalf("second cancel: %d %s; want 200 unchanged", again.Code, again.Body)
	}
	e.drive() // the cancelled execution's work item runs nothing
	done := e.mustSubmit("echo", "k2", `{}`).ExecutionID
	e.drive()
	p := wantProblem(t, post(e, "/v1/executions/"+done+"/cancel", `{"reason":"late"}`), http.StatusConflict, "execution-not-cancellable")
	if p.ExecutionStatus != store.Succeeded || p.ExecutionID != done {
		t.Fatalf("conflict problem %+v", p)
	}
	for _, body := range []string{`{}`, `{"reason":"  "}`, `{"reason":"x","extra":1}`, `not json`, `{"reason":"` + strings.Repeat("r", httpapi.MaxRedriveReasonLen+1) + `"}`} {
		wantProblem(t, post(e, path, body), http.StatusBadRequest, "invalid-request")
	}
	wantProblem(t, post(e, path, `{"reason":"x"}`, "Authorization", ""), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, post(e, path, `{"reason":"x"}`, "X-Tenant-Id", "other"), http.StatusNotFound, "execution-not-found")
	wantProblem(t, post(e, "/v1/executions/nope/cancel", `{"reason":"x"}`), http.StatusNotFound, "execution-not-found")
	closed := newEnv(t, withHTTP(func(o *httpapi.Options) { o.AdminToken = "" }))
	wantProblem(t, post(closed, path, `{"reason":"x"}`), http.StatusForbidden, "operator-routes-disabled")
	upstream := newEnv(t, withHTTP(func(o *httpapi.Options) { o.AdminToken, o.RedriveAuthorizedUpstream = "", true }))
	other := upstream.mustSubmit("echo", "k1", `{}`).ExecutionID
	if w := post(upstream, "/v1/executions/"+other+"/cancel", `{"reason":"x"}`, "Authorization", ""); w.Code != http.StatusAccepted {
		t.Fatalf("cancel authorized upstream: %d %s", w.Code, w.Body)
	}
}

func TestBulkRedriveRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 3 {
		e.mustSubmit("fail", fmt.Sprintf("f%d", i), fmt.Sprintf(`{"i":%d}`, i))
	}
	e.mustSubmit("echo", "ok", `{}`)
	e.drive()
	w := post(e, "/v1/redrives", `{"filter":{"pipelineId":"fail","status":["DLQ"],"errorCode":"boom"},"reason":"fixed","ratePerSecond":200}`)
	if w.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/redrives: %d %s", w.Code, w.Body)
	}
	started := decode[client.BulkRedrive](t, w)
	if started.Matched != 3 || started.RedriveID == "" || w.Header().Get("Location") != "/v1/redrives/"+started.RedriveID {
		t.Fatalf("started %+v, Location %q", started, w.Header().Get("Location"))
	}
	progressPath := "/v1/redrives/" + started.RedriveID
	auth := []string{"Authorization", "Bearer " + adminToken}
	before := decode[client.RedriveProgress](t, get(e, progressPath, auth...))
	if before.Matched != 3 || before.Redriven != 0 || before.Done {
		t.Fatalf("progress before the driver %+v", before)
	}
	if _, err := e.rt.DriveRedrives(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	after := decode[client.RedriveProgress](t, get(e, progressPath, auth...))
	if after.Matched != 3 || after.Redriven != 3 || after.Skipped != 0 || !after.Done || after.DryRun {
		t.Fatalf("progress after the driver %+v", after)
	}
	dry := decode[client.BulkRedrive](t, post(e, "/v1/redrives", `{"reason":"count","dryRun":true}`))
	if dry.Matched != 0 { // all three were re-driven: none is DLQ any more
		t.Fatalf("dry run matched %d, want 0", dry.Matched)
	}
	for _, body := range []string{`{}`, `{"reason":""}`, `{"reason":"x","filter":{"status":["QUEUED"]}}`, `{"reason":"x","filter":{"status":["NOPE"]}}`,
		`{"reason":"x","ratePerSecond":0}`, `{"reason":"x","ratePerSecond":5000}`, `{"reason":"x","filter":{"createdAfter":"yesterday"}}`,
		`{"reason":"x","filter":{"pipelineId":"-bad"}}`, `{"reason":"x","unknown":true}`} {
		wantProblem(t, post(e, "/v1/redrives", body), http.StatusBadRequest, "invalid-request")
	}
	wantProblem(t, post(e, "/v1/redrives", `{"reason":"x"}`, "Authorization", ""), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, get(e, progressPath), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, get(e, progressPath, append(auth, "X-Tenant-Id", "other")...), http.StatusNotFound, "redrive-not-found")
	wantProblem(t, get(e, "/v1/redrives/0123456789abcdef", auth...), http.StatusNotFound, "redrive-not-found")
}

// TestBulkRedriveRetriedWithKey: a client that lost the answer to POST
// /v1/redrives and sends it again with the same Idempotency-Key gets the
// job it started (200, the same redriveId and Location), not a second
// job; the same key with another body is refused (422
// idempotency-key-mismatch); another tenant's key is its own; without a
// key every POST starts a new job.
func TestBulkRedriveRetriedWithKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 3 {
		e.mustSubmit("fail", fmt.Sprintf("f%d", i), fmt.Sprintf(`{"i":%d}`, i))
	}
	e.drive()
	body := `{"filter":{"pipelineId":"fail","status":["DLQ"]},"reason":"fixed, OPS-7","ratePerSecond":50}`
	first := post(e, "/v1/redrives", body, "Idempotency-Key", "ops-7-redrive")
	if first.Code != http.StatusAccepted {
		t.Fatalf("first POST /v1/redrives: %d %s", first.Code, first.Body)
	}
	started := decode[client.BulkRedrive](t, first)
	// The answer was lost; the client sends the request again.
	retry := post(e, "/v1/redrives", body, "Idempotency-Key", "ops-7-redrive")
	again := decode[client.BulkRedrive](t, retry)
	if retry.Code != http.StatusOK || again.RedriveID != started.RedriveID || !again.Duplicate || started.Duplicate ||
		retry.Header().Get("Location") != first.Header().Get("Location") {
		t.Fatalf("retried POST /v1/redrives: %d %s (Location %q); want 200 with the first job %s (Location %q)",
			retry.Code, retry.Body, retry.Header().Get("Location"), started.RedriveID, first.Header().Get("Location"))
	}
	if held, err := e.rt.DriveRedrives(context.Background(), time.Minute); err != nil || held != 1 {
		t.Fatalf("DriveRedrives held %d jobs, %v; want the one job", held, err)
	}
	auth := []string{"Authorization", "Bearer " + adminToken}
	if p := decode[client.RedriveProgress](t, get(e, "/v1/redrives/"+started.RedriveID, auth...)); p.Redriven != 3 || !p.Done {
		t.Fatalf("progress %+v; want the 3 executions re-driven once", p)
	}
	// A retry after the job finished still answers the job.
	if late := decode[client.BulkRedrive](t, post(e, "/v1/redrives", body, "Idempotency-Key", "ops-7-redrive")); late.RedriveID != started.RedriveID {
		t.Fatalf("a retry after the job finished started %s, want %s", late.RedriveID, started.RedriveID)
	}
	p := wantProblem(t, post(e, "/v1/redrives", `{"filter":{"pipelineId":"fail"},"reason":"fixed, OPS-7","ratePerSecond":50}`,
		"Idempotency-Key", "ops-7-redrive"), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	if !strings.Contains(p.Detail, "Idempotency-Key") {
		t.Errorf("mismatch detail %q does not name the header", p.Detail)
	}
	other := post(e, "/v1/redrives", body, "Idempotency-Key", "ops-7-redrive", "X-Tenant-Id", "other")
	if o := decode[client.BulkRedrive](t, other); other.Code != http.StatusAccepted || o.RedriveID == started.RedriveID {
		t.Fatalf("another tenant's POST with the key: %d %s; want its own new job", other.Code, other.Body)
	}
	a := decode[client.BulkRedrive](t, post(e, "/v1/redrives", `{"reason":"count","dryRun":true}`))
	b := decode[client.BulkRedrive](t, post(e, "/v1/redrives", `{"reason":"count","dryRun":true}`))
	if a.RedriveID == b.RedriveID {
		t.Fatalf("two POSTs without a key answered one job %s, want two", a.RedriveID)
	}
	for _, key := range []string{strings.Repeat("k", httpapi.MaxIdempotencyKeyLen+1), "tab\tkey"} {
		wantProblem(t, post(e, "/v1/redrives", body, "Idempotency-Key", key), http.StatusBadRequest, "invalid-idempotency-key")
	}
}

func TestDeadLettersRoute(t *testing.T) {
	t.Parallel()
	dl := memory.NewDeadLetters(nil)
	now := time.Now()
	for i, p := range []string{"orders", "billing", "orders"} {
		env := deadletter.Envelope{TenantID: "default", ExecutionID: fmt.Sprintf("e%d", i), PipelineID: p, StepIndex: 1, StepName: "charge",
			TransitionKey: fmt.Sprintf("e%d:1:3", i), TerminalReason: "retry_exhausted", ErrorCode: "declined", ErrorMessage: "card declined",
			RetriesObserved: 2, FailedAt: now}
		if _, err := dl.Put(context.Background(), deadletter.ExecutionRecord(env, now.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	theirs := deadletter.Envelope{TenantID: "other", ExecutionID: "x", PipelineID: "orders", TransitionKey: "x:0:1", TerminalReason: "non_retryable"}
	if _, err := dl.Put(context.Background(), deadletter.ExecutionRecord(theirs, now)); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withOperator(nil, dl, nil))
	all := decode[client.DeadLetterPage](t, get(e, "/v1/dead-letters"))
	if len(all.DeadLetters) != 3 || all.NextCursor != "" || all.DeadLetters[0].ExecutionID != "e2" || all.DeadLetters[2].ExecutionID != "e0" {
		t.Fatalf("dead letters %+v; want the tenant's 3, newest first", all)
	}
	if d := all.DeadLetters[0]; d.ID != "e2:1:3" || d.ErrorCode != "declined" || d.RetriesObserved != 2 || d.TerminalReason != "retry_exhausted" || d.RecordedAt.IsZero() {
		t.Fatalf("record %+v", d)
	}
	page := decode[client.DeadLetterPage](t, get(e, "/v1/dead-letters?pipelineId=orders&limit=1"))
	if len(page.DeadLetters) != 1 || page.NextCursor == "" || page.DeadLetters[0].ExecutionID != "e2" {
		t.Fatalf("first page %+v", page)
	}
	next := decode[client.DeadLetterPage](t, get(e, "/v1/dead-letters?pipelineId=orders&limit=1&cursor="+url.QueryEscape(page.NextCursor)))
	if len(next.DeadLetters) != 1 || next.DeadLetters[0].ExecutionID != "e0" {
		t.Fatalf("second page %+v", next)
	}
	wantProblem(t, get(e, "/v1/dead-letters?cursor="+url.QueryEscape(page.NextCursor)), http.StatusBadRequest, "invalid-cursor")
	wantProblem(t, get(e, "/v1/dead-letters?limit=900"), http.StatusBadRequest, "invalid-request")
	if got := decode[client.DeadLetterPage](t, get(e, "/v1/dead-letters", "X-Tenant-Id", "other")); len(got.DeadLetters) != 1 {
		t.Fatalf("the other tenant's dead letters: %d", len(got.DeadLetters))
	}
	wantProblem(t, get(newEnv(t), "/v1/dead-letters"), http.StatusServiceUnavailable, "dead-letters-unavailable")
}

// TestOpenAPIRoute: the document is served as JSON, the embedded bytes.
// With QASYNC_OPENAPI_OUT=<file> it writes the served document there
// (make openapi-lint lints it).
func TestOpenAPIRoute(t *testing.T) {
	t.Parallel()
	w := get(newEnv(t), "/openapi.json")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || w.Body.String() != string(httpapi.OpenAPI) {
		t.Fatalf("GET /openapi.json: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if out := os.Getenv("QASYNC_OPENAPI_OUT"); out != "" {
		if err := os.WriteFile(out, w.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
