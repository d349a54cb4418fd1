package httpapi_test

// The OpenAPI document against the real handler: every route is called
// for every status code the document lists, and each response (and each
// request meant to be valid) is validated with libopenapi-validator, a
// maintained OpenAPI 3.1 validator; no schema is checked by hand. A listed
// code no case provokes fails the test, unless it is one of the few listed
// in unprovoked with the reason.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// A failingStore (httpapi_test.go) fails creates and lists as well: a
// broken backend (a plain error: 500) or an unavailable one
// (store.ErrUnavailable: 503).

func (f failingStore) CreateOrGet(context.Context, store.CreateRequest) (store.Execution, bool, error) {
	return store.Execution{}, false, f.err
}

func (f failingStore) List(context.Context, store.ListQuery) (store.ListPage, error) {
	return store.ListPage{}, f.err
}

// failingJobs is a job store answering every call with err.
type failingJobs struct {
	store.JobStore
	err error
}

func (f failingJobs) CreateJob(context.Context, store.Job) error { return f.err }
func (f failingJobs) GetJob(context.Context, store.JobKey) (store.Job, error) {
	return store.Job{}, f.err
}

// failingLister is a dead-letter lister answering err.
type failingLister struct{ err error }

func (f failingLister) List(context.Context, deadletter.ListQuery) (deadletter.ListPage, error) {
	return deadletter.ListPage{}, f.err
}

const openapiSecret = "openapi-await-secret"

// openapiEnv is a runtime with every operator provider (history, dead
// letters, jobs) and an await pipeline; fail, when set, breaks every
// provider with it.
func openapiEnv(t *testing.T, fail error, opts ...envOption) *env {
	t.Helper()
	dl := memory.NewDeadLetters(nil)
	env := deadletter.Envelope{TenantID: "default", ExecutionID: "e1", PipelineID: "fail", StepName: "explode", TransitionKey: "e1:0:1",
		TerminalReason: "non_retryable", ErrorCode: "boom", ErrorMessage: "the step always fails", FailedAt: time.Now()}
	for i := range 2 {
		env.TransitionKey = fmt.Sprintf("e1:0:%d", i+1)
		if _, err := dl.Put(context.Background(), deadletter.ExecutionRecord(env, time.Now().Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	approve := await.Step("approve", await.Spec{}, func(context.Context, await.Request) error { return nil })
	all := append(testPipelines(), pipeline.Pipeline{ID: "approval", Steps: []pipeline.Step{approve}})
	return newEnv(t, append([]envOption{func(c *engine.Config, d *engine.Deps, o *httpapi.Options) {
		c.AwaitSecret = openapiSecret
		reg, err := pipeline.NewRegistry(all...)
		if err != nil {
			t.Fatal(err)
		}
		d.Registry, d.History, d.DeadLetters = reg, fakeHistory{}, dl
		o.MaxBodyBytes = 64 << 10
		if fail != nil {
			d.Jobs = failingJobs{JobStore: d.Store.(store.JobStore), err: fail}
			d.Store = failingStore{Store: d.Store, err: fail}
			d.History, d.DeadLetters = fakeHistory{err: fail}, failingLister{err: fail}
		}
	}}, opts...)...)
}

// apiCase is one request and the status it must get.
type apiCase struct {
	method, path, body string
	headers            map[string]string
	want               int
	// valid: the request follows the document (validated as well); the
	// requests made to provoke a 4xx often do not, on purpose.
	valid bool
}

func TestOpenAPIDocumentMatchesEveryResponse(t *testing.T) {
	doc, err := libopenapi.NewDocument(httpapi.OpenAPI)
	if err != nil {
		t.Fatalf("the embedded document does not parse: %v", err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1") {
		t.Fatalf("the document is OpenAPI %s, want 3.1", v)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("document: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}

	e := openapiEnv(t, nil)
	broken := openapiEnv(t, errors.New("the disk is on fire"))
	down := openapiEnv(t, store.ErrUnavailable)
	anonymous := openapiEnv(t, nil, withHTTP(func(o *httpapi.Options) {
		o.TenantFunc = func(*http.Request) (string, error) { return "", httpapi.ErrUnauthenticated }
	}))
	noHistory := newEnv(t)
	closed := openapiEnv(t, nil, withHTTP(func(o *httpapi.Options) { o.AdminToken = "" }))
	throttled := openapiEnv(t, nil, withHTTP(func(o *httpapi.Options) { o.AuthLimiter = authlimit.New(authlimit.Config{Burst: 1}) }))
	if w := throttled.do(req{method: http.MethodGet, path: "/v1/redrives/x", headers: map[string]string{"Authorization": "Bearer wrong"}}); w.Code != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", w.Code)
	}

	// Executions in every state the cases need.
	js := map[string]string{"Content-Type": "application/json"}
	succeeded := e.mustSubmit("echo", "done", `{"a":1}`).ExecutionID
	dead := e.mustSubmit("fail", "dead", `{}`).ExecutionID
	e.drive()
	parked := e.mustSubmit("approval", "parked", `{}`).ExecutionID
	e.drive()
	queued := e.mustSubmit("echo", "queued", `{}`).ExecutionID
	toCancel := e.mustSubmit("echo", "to-cancel", `{}`).ExecutionID
	cancelled := e.mustSubmit("echo", "cancelled", `{}`).ExecutionID
	if _, _, err := e.rt.Cancel(context.Background(), store.Key{TenantID: "default", ExecutionID: cancelled}, "setup"); err != nil {
		t.Fatal(err)
	}
	st := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: "/v1/executions/" + parked}))
	if st.Await == nil {
		t.Fatalf("the approval execution did not park: %+v", st)
	}
	awaitPath := "/v1/executions/" + parked + "/awaits/" + st.Await.AwaitID + "/complete"
	token := await.Sign([]byte(openapiSecret), "default", parked, st.Await.AwaitID)
	job := decode[client.BulkRedrive](t, post(e, "/v1/redrives", `{"reason":"count","dryRun":true}`))
	toPause := e.mustSubmit("echo", "to-pause", `{}`).ExecutionID
	running := e.mustSubmit("echo", "running", `{}`)
	now := time.Now()
	if _, err := e.rt.Store().Claim(context.Background(), store.ClaimRequest{Key: store.Key{TenantID: "default", ExecutionID: running.ExecutionID},
		ExpectVersion: 1, Owner: "elsewhere", Now: now, DueBy: now.Add(time.Hour), TakeoverBy: now, LeaseUntil: now.Add(time.Hour), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	pauseJob := decode[client.BulkJob](t, post(e, "/v1/pauses", `{"reason":"count","dryRun":true}`))
	resumeJob := decode[client.BulkJob](t, post(e, "/v1/resumes", `{"reason":"count","dryRun":true}`))
	bigInput, err := payload.JSON(map[string]string{"pad": strings.Repeat("p", httpapi.MaxInputViewBytes)})
	if err != nil {
		t.Fatal(err)
	}
	large, err := e.rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "default", PipelineID: "echo", IdempotencyKey: "large", Input: bigInput})
	if err != nil {
		t.Fatal(err)
	}
	firstPage := decode[client.ExecutionPage](t, e.do(req{method: http.MethodGet, path: "/v1/executions?limit=1"}))
	firstEvents := decode[client.History](t, e.do(req{method: http.MethodGet, path: "/v1/executions/" + succeeded + "/history?limit=1"}))
	if firstEvents.NextCursor == "" {
		t.Fatalf("a history page of 1 event has no nextCursor: %+v", firstEvents)
	}

	admin := func(h map[string]string) map[string]string {
		out := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	badTenant := map[string]string{"X-Tenant-Id": "not a tenant!"}
	big := `{"reason":"` + strings.Repeat("x", 20<<10) + `"}`
	ex := func(id string) string { return "/v1/executions/" + id }
	cases := map[*env][]apiCase{
		e: {
			{"POST", "/v1/pipelines/echo/executions", `{"n":1}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "new"}, 202, true},
			{"POST", "/v1/pipelines/echo/executions", `{"n":1}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "new"}, 200, true},
			{"POST", "/v1/pipelines/-bad/executions", `{}`, js, 400, false},
			{"POST", "/v1/pipelines/nope/executions", `{}`, js, 404, true},
			{"POST", "/v1/pipelines/echo/executions", `{"pad":"` + strings.Repeat("p", 70<<10) + `"}`, js, 413, true},
			{"POST", "/v1/pipelines/greet/executions", `hello`, map[string]string{"Content-Type": "text/plain"}, 415, true},
			{"POST", "/v1/pipelines/echo/executions", `{"n":2}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "new"}, 422, true},

			{"GET", "/v1/executions", "", nil, 200, true},
			{"GET", "/v1/executions?pipelineId=echo&status=SUCCEEDED,QUEUED&limit=2", "", nil, 200, true},
			{"GET", "/v1/executions?cursor=" + firstPage.NextCursor, "", nil, 200, true},
			{"GET", "/v1/executions?status=NOPE", "", nil, 400, false},
			{"GET", "/v1/executions?limit=1000", "", nil, 400, false},
			{"GET", "/v1/executions?cursor=not-ours", "", nil, 400, true},
			{"GET", "/v1/executions?idempotencyKey=done", "", nil, 200, true},
			{"GET", "/v1/executions?idempotencyKey=done&status=DLQ", "", nil, 400, true},

			{"GET", "/v1/pipelines", "", nil, 200, true},
			{"GET", "/v1/pipelines", "", badTenant, 400, false},
			{"GET", "/v1/pipelines/greet", "", nil, 200, true},
			{"GET", "/v1/pipelines/approval", "", nil, 200, true},
			{"GET", "/v1/pipelines/-bad", "", nil, 400, false},
			{"GET", "/v1/pipelines/nope", "", nil, 404, true},

			{"GET", ex(succeeded), "", nil, 200, true},
			{"GET", ex(dead), "", nil, 200, true},
			{"GET", ex(parked), "", nil, 200, true},
			{"GET", ex(cancelled), "", nil, 200, true},
			{"GET", ex(succeeded), "", badTenant, 400, false},
			{"GET", ex("nope"), "", nil, 404, true},

			{"GET", ex(succeeded) + "/result", "", nil, 200, true},
			{"GET", ex(succeeded) + "/result", "", badTenant, 400, false},
			{"GET", ex("nope") + "/result", "", nil, 404, true},
			{"GET", ex(dead) + "/result", "", nil, 409, true},

			{"GET", ex(succeeded) + "/history", "", nil, 200, true},
			{"GET", ex(succeeded) + "/history", "", badTenant, 400, false},
			{"GET", ex(succeeded) + "/history", "", map[string]string{"X-Tenant-Id": "other"}, 404, true},
			{"GET", ex(succeeded) + "/history?limit=2", "", nil, 200, true},
			{"GET", ex(succeeded) + "/history?limit=1000&cursor=" + firstEvents.NextCursor, "", nil, 200, true},
			{"GET", ex(succeeded) + "/history?limit=1001", "", nil, 400, false},
			{"GET", ex(succeeded) + "/history?limit=0", "", nil, 400, false},
			{"GET", ex(succeeded) + "/history?cursor=not-ours", "", nil, 400, true},
			{"GET", ex(dead) + "/history?cursor=h1.999.0.999", "", nil, 400, true},

			{"POST", ex(dead) + "/redrive", `{"reason":"fixed"}`, admin(nil), 202, true},
			{"POST", ex(succeeded) + "/redrive", `{"reason":""}`, admin(nil), 400, false},
			{"POST", ex(succeeded) + "/redrive", `{"reason":"x"}`, js, 401, false},
			{"POST", ex("nope") + "/redrive", `{"reason":"x"}`, admin(nil), 404, true},
			{"POST", ex(succeeded) + "/redrive", `{"reason":"x"}`, admin(nil), 409, true},
			{"POST", ex(succeeded) + "/redrive", big, admin(nil), 413, false},

			{"POST", ex(toCancel) + "/cancel", `{"reason":"no longer needed"}`, admin(nil), 202, true},
			{"POST", ex(cancelled) + "/cancel", `{"reason":"again"}`, admin(nil), 200, true},
			{"POST", ex(queued) + "/cancel", `{}`, admin(nil), 400, false},
			{"POST", ex(queued) + "/cancel", `{"reason":"x"}`, js, 401, false},
			{"POST", ex("nope") + "/cancel", `{"reason":"x"}`, admin(nil), 404, true},
			{"POST", ex(succeeded) + "/cancel", `{"reason":"x"}`, admin(nil), 409, true},
			{"POST", ex(queued) + "/cancel", big, admin(nil), 413, false},

			{"POST", ex(toPause) + "/pause", `{"reason":"hold"}`, admin(nil), 200, true},
			{"POST", ex(toPause) + "/pause", `{"reason":"again"}`, admin(nil), 200, true},
			{"POST", ex(running.ExecutionID) + "/pause", `{"reason":"hold"}`, admin(nil), 202, true},
			{"POST", ex(queued) + "/pause", `{}`, admin(nil), 400, false},
			{"POST", ex(queued) + "/pause", `{"reason":"x"}`, js, 401, false},
			{"POST", ex("nope") + "/pause", `{"reason":"x"}`, admin(nil), 404, true},
			{"POST", ex(succeeded) + "/pause", `{"reason":"x"}`, admin(nil), 409, true},
			{"POST", ex(queued) + "/pause", big, admin(nil), 413, false},
			{"POST", ex(toPause) + "/resume", `{"reason":"go on","expectedVersion":0}`, admin(nil), 409, true},
			{"POST", ex(toPause) + "/resume", `{"reason":"go on"}`, admin(nil), 200, true},
			{"POST", ex(toPause) + "/resume", `{"reason":"again"}`, admin(nil), 409, true},
			{"POST", ex(queued) + "/resume", `{}`, admin(nil), 400, false},
			{"POST", ex(queued) + "/resume", `{"reason":"x"}`, js, 401, false},
			{"POST", ex("nope") + "/resume", `{"reason":"x"}`, admin(nil), 404, true},
			{"POST", ex(queued) + "/resume", big, admin(nil), 413, false},

			{"POST", awaitPath, `{"approved":true}`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": token}, 200, true},
			{"POST", awaitPath, `{bad`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": token}, 400, false},
			{"POST", awaitPath, `{}`, js, 401, false},
			{"POST", awaitPath, `{}`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": token + "x"}, 403, true},
			{"POST", "/v1/executions/" + strings.Repeat("a", 200) + "/awaits/a/complete", `{}`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": token}, 404, false},
			{"POST", awaitPath, `{"approved":false}`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": token}, 409, true},
			{"POST", awaitPath, `{"pad":"` + strings.Repeat("p", 70<<10) + `"}`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": token}, 413, true},

			{"POST", "/v1/redrives", `{"filter":{"pipelineId":"fail","status":["DLQ"],"createdAfter":"2020-01-01T00:00:00Z"},"reason":"fixed","ratePerSecond":5}`, admin(nil), 202, true},
			{"POST", "/v1/redrives", `{"reason":"keyed"}`, admin(map[string]string{"Idempotency-Key": "job-1"}), 202, true},
			{"POST", "/v1/redrives", `{"reason":"keyed"}`, admin(map[string]string{"Idempotency-Key": "job-1"}), 200, true},
			{"POST", "/v1/redrives", `{"reason":"keyed","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "job-1"}), 422, true},
			{"POST", "/v1/redrives", `{"reason":"x"}`, admin(map[string]string{"Idempotency-Key": ""}), 400, false},
			{"POST", "/v1/redrives", `{"reason":"x","filter":{"status":["QUEUED"]}}`, admin(nil), 400, false},
			{"POST", "/v1/redrives", `{"reason":"x"}`, js, 401, false},
			{"POST", "/v1/redrives", big, admin(nil), 413, false},

			{"GET", "/v1/redrives/" + job.RedriveID, "", admin(nil), 200, true},
			{"GET", "/v1/redrives/" + job.RedriveID, "", admin(badTenant), 400, false},
			{"GET", "/v1/redrives/" + job.RedriveID, "", nil, 401, false},
			{"GET", "/v1/redrives/0123456789abcdef0123456789abcdef", "", admin(nil), 404, true},

			{"POST", "/v1/pauses", `{"filter":{"pipelineId":"greet","status":["QUEUED","RUNNING"],"createdAfter":"2020-01-01T00:00:00Z"},"reason":"freeze","ratePerSecond":5,"dryRun":true}`, admin(nil), 202, true},
			{"POST", "/v1/pauses", `{"reason":"keyed","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "pause-1"}), 202, true},
			{"POST", "/v1/pauses", `{"reason":"keyed","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "pause-1"}), 200, true},
			{"POST", "/v1/pauses", `{"reason":"other","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "pause-1"}), 422, true},
			{"POST", "/v1/pauses", `{"reason":"x","filter":{"status":["DLQ"]}}`, admin(nil), 400, true},
			{"POST", "/v1/pauses", `{"reason":"x"}`, js, 401, false},
			{"POST", "/v1/pauses", big, admin(nil), 413, false},
			{"POST", "/v1/resumes", `{"filter":{"pipelineId":"greet"},"reason":"thaw","dryRun":true}`, admin(nil), 202, true},
			{"POST", "/v1/resumes", `{"reason":"keyed","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "resume-1"}), 202, true},
			{"POST", "/v1/resumes", `{"reason":"keyed","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "resume-1"}), 200, true},
			{"POST", "/v1/resumes", `{"reason":"other","dryRun":true}`, admin(map[string]string{"Idempotency-Key": "resume-1"}), 422, true},
			{"POST", "/v1/resumes", `{"reason":"x","filter":{"status":["QUEUED"]}}`, admin(nil), 400, true},
			{"POST", "/v1/resumes", `{"reason":"x"}`, js, 401, false},
			{"POST", "/v1/resumes", big, admin(nil), 413, false},
			{"GET", "/v1/pauses/" + pauseJob.JobID, "", admin(nil), 200, true},
			{"GET", "/v1/pauses/" + pauseJob.JobID, "", admin(badTenant), 400, false},
			{"GET", "/v1/pauses/" + pauseJob.JobID, "", nil, 401, false},
			{"GET", "/v1/pauses/" + resumeJob.JobID, "", admin(nil), 404, true},
			{"GET", "/v1/resumes/" + resumeJob.JobID, "", admin(nil), 200, true},
			{"GET", "/v1/resumes/" + resumeJob.JobID, "", admin(badTenant), 400, false},
			{"GET", "/v1/resumes/" + resumeJob.JobID, "", nil, 401, false},
			{"GET", "/v1/resumes/" + job.RedriveID, "", admin(nil), 404, true},

			{"GET", "/v1/dead-letters", "", nil, 200, true},
			{"GET", "/v1/dead-letters?pipelineId=fail&limit=1", "", nil, 200, true},
			{"GET", "/v1/dead-letters?limit=0", "", nil, 400, false},
			{"GET", "/v1/dead-letters?outstanding=true", "", nil, 200, true},
			{"GET", "/v1/dead-letters?outstanding=maybe", "", nil, 400, false},
			{"GET", "/v1/dead-letters/counts", "", nil, 200, true},
			{"GET", "/v1/dead-letters/counts?pipelineId=fail", "", nil, 200, true},
			{"GET", "/v1/dead-letters/counts?pipelineId=-bad", "", nil, 400, false},

			{"GET", "/v1/inputs/" + succeeded, "", admin(nil), 200, true},
			{"GET", "/v1/inputs/" + dead, "", admin(nil), 200, true},
			{"GET", "/v1/inputs/" + succeeded, "", admin(badTenant), 400, false},
			{"GET", "/v1/inputs/" + succeeded, "", nil, 401, false},
			{"GET", "/v1/inputs/nope", "", admin(nil), 404, true},
			{"GET", "/v1/inputs/" + large.Execution.ExecutionID, "", admin(nil), 413, true},

			{"GET", "/openapi.json", "", nil, 200, true},
			{"GET", "/healthz", "", nil, 200, true},
		},
		noHistory: {{"GET", ex("any") + "/history", "", nil, 404, true}},
		closed: {
			{"POST", ex("x") + "/redrive", `{"reason":"r"}`, admin(nil), 403, true},
			{"POST", ex("x") + "/cancel", `{"reason":"r"}`, admin(nil), 403, true},
			{"POST", "/v1/redrives", `{"reason":"r"}`, admin(nil), 403, true},
			{"GET", "/v1/redrives/x", "", admin(nil), 403, true},
			{"POST", ex("x") + "/pause", `{"reason":"r"}`, admin(nil), 403, true},
			{"POST", ex("x") + "/resume", `{"reason":"r"}`, admin(nil), 403, true},
			{"POST", "/v1/pauses", `{"reason":"r"}`, admin(nil), 403, true},
			{"POST", "/v1/resumes", `{"reason":"r"}`, admin(nil), 403, true},
			{"GET", "/v1/pauses/x", "", admin(nil), 403, true},
			{"GET", "/v1/resumes/x", "", admin(nil), 403, true},
			{"GET", "/v1/inputs/x", "", admin(nil), 403, true},
		},
		throttled: {
			{"POST", ex("x") + "/redrive", `{"reason":"r"}`, admin(nil), 429, true},
			{"POST", ex("x") + "/cancel", `{"reason":"r"}`, admin(nil), 429, true},
			{"POST", "/v1/redrives", `{"reason":"r"}`, admin(nil), 429, true},
			{"GET", "/v1/redrives/x", "", admin(nil), 429, true},
			{"POST", ex("x") + "/pause", `{"reason":"r"}`, admin(nil), 429, true},
			{"POST", ex("x") + "/resume", `{"reason":"r"}`, admin(nil), 429, true},
			{"POST", "/v1/pauses", `{"reason":"r"}`, admin(nil), 429, true},
			{"POST", "/v1/resumes", `{"reason":"r"}`, admin(nil), 429, true},
			{"GET", "/v1/pauses/x", "", admin(nil), 429, true},
			{"GET", "/v1/resumes/x", "", admin(nil), 429, true},
			{"GET", "/v1/inputs/x", "", admin(nil), 429, true},
		},
		anonymous: {
			{"POST", "/v1/pipelines/echo/executions", `{}`, js, 401, true},
			{"GET", "/v1/executions", "", nil, 401, true},
			{"GET", ex("x"), "", nil, 401, true},
			{"GET", ex("x") + "/result", "", nil, 401, true},
			{"GET", ex("x") + "/history", "", nil, 401, true},
			{"GET", "/v1/dead-letters", "", nil, 401, true},
			{"GET", "/v1/dead-letters/counts", "", nil, 401, true},
			{"GET", "/v1/pipelines", "", nil, 401, true},
			{"GET", "/v1/pipelines/echo", "", nil, 401, true},
		},
	}
	// Every operation: headers over the handler's limit.
	padded := map[string]string{"X-Padding": strings.Repeat("p", httpapi.DefaultMaxHeaderBytes)}
	for _, op := range documentedOperations(t) {
		method, tpl, _ := strings.Cut(op, " ")
		path := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(tpl, "x")
		cases[e] = append(cases[e], apiCase{method, path, "", padded, 431, false})
	}
	for _, failing := range []struct {
		env  *env
		want int
	}{{broken, 500}, {down, 503}} {
		f := failing.env
		// Awaits: the token of an execution the failing store cannot read.
		tok := await.Sign([]byte(openapiSecret), "default", "x", "a")
		cases[f] = []apiCase{
			{"POST", "/v1/pipelines/echo/executions", `{}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"}, failing.want, true},
			{"GET", "/v1/executions", "", nil, failing.want, true},
			{"GET", ex("x"), "", nil, failing.want, true},
			{"GET", ex("x") + "/result", "", nil, failing.want, true},
			{"GET", ex("x") + "/history", "", nil, failing.want, true},
			{"POST", ex("x") + "/redrive", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"POST", ex("x") + "/cancel", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"POST", "/v1/executions/x/awaits/a/complete", `{}`, map[string]string{"Content-Type": "application/json", "X-Resume-Token": tok}, failing.want, true},
			{"POST", "/v1/redrives", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"GET", "/v1/redrives/abc", "", admin(nil), failing.want, true},
			{"POST", ex("x") + "/pause", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"POST", ex("x") + "/resume", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"POST", "/v1/pauses", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"POST", "/v1/resumes", `{"reason":"r"}`, admin(nil), failing.want, true},
			{"GET", "/v1/pauses/abc", "", admin(nil), failing.want, true},
			{"GET", "/v1/resumes/abc", "", admin(nil), failing.want, true},
			{"GET", "/v1/dead-letters", "", nil, failing.want, true},
			{"GET", "/v1/dead-letters/counts", "", nil, failing.want, true},
			{"GET", "/v1/inputs/x", "", admin(nil), failing.want, true},
		}
	}
	addScheduleCases(t, cases, e, broken, down, closed, throttled, admin, badTenant, big)

	provoked := map[string]bool{}
	for env, list := range cases {
		for _, c := range list {
			name := fmt.Sprintf("%s %s -> %d", c.method, trimmed(c.path), c.want)
			w := env.do(req{method: c.method, path: c.path, body: c.body, headers: c.headers})
			if w.Code != c.want {
				t.Errorf("%s: got %d %s", name, w.Code, trimmed(w.Body.String()))
				continue
			}
			request := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
			for k, val := range c.headers {
				request.Header.Set(k, val)
			}
			resp := w.Result()
			var (
				ok    bool
				verrs []*verrors.ValidationError
			)
			if c.valid {
				ok, verrs = v.ValidateHttpRequestResponse(request, resp)
			} else {
				ok, verrs = v.ValidateHttpResponse(request, resp)
			}
			if !ok {
				for _, ve := range verrs {
					t.Errorf("%s: %s (%s)", name, ve.Error(), ve.Reason)
				}
			}
			provoked[operationKey(c.method, c.path)+" "+strconv.Itoa(c.want)] = true
		}
	}
	// Every documented response code was provoked, but these (with why).
	unprovoked := map[string]string{}
	var missing []string
	for _, key := range documentedResponses(t) {
		if !provoked[key] {
			if _, skip := unprovoked[key]; !skip {
				missing = append(missing, key)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented responses no case provoked:\n  %s", strings.Join(missing, "\n  "))
	}
}

// trimmed shortens long paths and bodies for test names.
func trimmed(s string) string {
	if len(s) > 90 {
		return s[:90] + "..."
	}
	return s
}

// operationKey is "METHOD /template" for a request path.
func operationKey(method, path string) string {
	p, _, _ := strings.Cut(path, "?")
	parts := strings.Split(p, "/")
	templates := map[string]string{}
	for _, tpl := range documentedPaths() {
		templates[tpl] = tpl
	}
	for tpl := range templates {
		tp := strings.Split(tpl, "/")
		if len(tp) != len(parts) {
			continue
		}
		match := true
		for i := range tp {
			if !(strings.HasPrefix(tp[i], "{") || tp[i] == parts[i]) {
				match = false
				break
			}
		}
		if match {
			return method + " " + tpl
		}
	}
	return method + " " + p
}

// openapiDoc is the document's paths, decoded plainly to list what it
// documents (the validator does the checking).
type openapiDoc struct {
	Paths map[string]map[string]struct {
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
}

func documentedPaths() []string {
	var d openapiDoc
	_ = json.Unmarshal(httpapi.OpenAPI, &d)
	var out []string
	for p := range d.Paths {
		out = append(out, p)
	}
	return out
}

// documentedOperations lists "METHOD /template" for every operation the
// document lists.
func documentedOperations(t *testing.T) []string {
	t.Helper()
	var d openapiDoc
	if err := json.Unmarshal(httpapi.OpenAPI, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, ops := range d.Paths {
		for method := range ops {
			out = append(out, strings.ToUpper(method)+" "+p)
		}
	}
	sort.Strings(out)
	return out
}

// documentedResponses lists "METHOD /template code" for every response
// the document lists.
func documentedResponses(t *testing.T) []string {
	t.Helper()
	var d openapiDoc
	if err := json.Unmarshal(httpapi.OpenAPI, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, ops := range d.Paths {
		for method, op := range ops {
			for code := range op.Responses {
				out = append(out, strings.ToUpper(method)+" "+p+" "+code)
			}
		}
	}
	return out
}
