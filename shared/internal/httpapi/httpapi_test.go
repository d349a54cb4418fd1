package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

const adminToken = "s3cret-admin-token"

var epoch = time.Date(2025, 3, 4, 5, 6, 7, 890000000, time.UTC)

// recordingDispatcher keeps the dispatched messages for the test to run.
type recordingDispatcher struct {
	mu   sync.Mutex
	msgs []dispatch.Message
}

func (d *recordingDispatcher) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, msgs...)
	return nil
}

func (d *recordingDispatcher) take() []dispatch.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.msgs
	d.msgs = nil
	return m
}

type greeting struct {
	Name string `json:"name"`
}

func testPipelines() []pipeline.Pipeline {
	echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	})
	greet := pipeline.NewStep("greet", func(_ context.Context, _ pipeline.StepInfo, in greeting) (map[string]string, error) {
		return map[string]string{"greeting": "hello " + in.Name}, nil
	})
	fail := pipeline.NewStep("explode", func(context.Context, pipeline.StepInfo, payload.Payload) (payload.Payload, error) {
		return payload.Payload{}, pipeline.NonRetryable("boom", errors.New("the step always fails"))
	})
	unknown := pipeline.NewStep("remote", func(context.Context, pipeline.StepInfo, payload.Payload) (payload.Payload, error) {
		return payload.Payload{}, &pipeline.OutcomeUnknownError{Protocol: "rest", Target: "http://worker/run", Deadline: time.Second, Elapsed: time.Second}
	})
	return []pipeline.Pipeline{
		{ID: "echo", Steps: []pipeline.Step{echo}},
		{ID: "echo-2", Steps: []pipeline.Step{echo}},
		{ID: "greet", Steps: []pipeline.Step{greet}},
		{ID: "fail", Steps: []pipeline.Step{fail}},
		{ID: "unknown", Steps: []pipeline.Step{unknown}},
		{ID: "fan", Steps: []pipeline.Step{pipeline.Map("each", "echo", pipeline.MapOptions{})}},
	}
}

type env struct {
	t    *testing.T
	rt   *engine.Runtime
	h    http.Handler
	disp *recordingDispatcher
	logs *logtest.Buffer
}

type envOption func(*engine.Config, *engine.Deps, *httpapi.Options)

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg, err := pipeline.NewRegistry(testPipelines()...)
	if err != nil {
		t.Fatal(err)
	}
	disp := &recordingDispatcher{}
	cfg := engine.Config{WorkerID: "test-worker"}
	deps := engine.Deps{
		Registry: reg, Store: memory.NewStateStore(clk), Payloads: memory.NewPayloadStore(clk),
		Dispatcher: disp, DeadLetter: memory.NewLogDLQ(logger), Clock: clk, Logger: logger,
	}
	hopts := httpapi.Options{Logger: logger, AdminToken: adminToken}
	for _, o := range opts {
		o(&cfg, &deps, &hopts)
	}
	rt, err := engine.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, rt: rt, h: httpapi.New(rt, hopts), disp: disp, logs: logs}
}

func withHTTP(f func(*httpapi.Options)) envOption {
	return func(_ *engine.Config, _ *engine.Deps, o *httpapi.Options) { f(o) }
}

// req describes one request.
type req struct {
	method, path string
	body         string
	headers      map[string]string
	// remoteAddr is the client's address (default httptest's 192.0.2.1:1234).
	remoteAddr string
}

func (e *env) do(r req) *httptest.ResponseRecorder {
	e.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	for k, v := range r.headers {
		hr.Header.Set(k, v)
	}
	if r.remoteAddr != "" {
		hr.RemoteAddr = r.remoteAddr
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, hr)
	return w
}

func (e *env) submit(pipelineID, key, body string, headers ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return e.do(req{method: http.MethodPost, path: "/v1/pipelines/" + pipelineID + "/executions", body: body, headers: h})
}

func (e *env) mustSubmit(pipelineID, key, body string, headers ...string) client.Submission {
	e.t.Helper()
	w := e.submit(pipelineID, key, body, headers...)
	if w.Code != http.StatusAccepted {
		e.t.Fatalf("submit: status %d, want 202; body %s", w.Code, w.Body)
	}
	return decode[client.Submission](e.t, w)
}

// drive runs every dispatched work item until none is left.
func (e *env) drive() {
	e.t.Helper()
	for range 10 {
		msgs := e.disp.take()
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			if err := e.rt.Process(context.Background(), m.Item); err != nil {
				e.t.Fatalf("process: %v", err)
			}
		}
	}
	e.t.Fatal("work items kept coming")
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, w.Body, err)
	}
	return v
}

// wantProblem checks an error response and returns its document.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, kind string) httpapi.Problem {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != httpapi.ContentTypeProblem {
		t.Fatalf("Content-Type %q, want %q", ct, httpapi.ContentTypeProblem)
	}
	var raw map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	for _, k := range []string{"type", "title", "status", "detail"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("problem lacks %q: %s", k, w.Body)
		}
	}
	p := decode[httpapi.Problem](t, w)
	if p.Status != status {
		t.Errorf("problem status %d, want %d", p.Status, status)
	}
	if want := httpapi.ProblemTypePrefix + kind; p.Type != want {
		t.Errorf("problem type %q, want %q", p.Type, want)
	}
	return p
}

func TestSubmitAcceptedThenDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.submit("greet", "key-1", `{"name":"ada"}`)
	if w.Code != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	got := decode[client.Submission](t, w)
	if got.ExecutionID == "" || got.PipelineID != "greet" || got.Status != store.Queued || got.Duplicate {
		t.Errorf("response %+v", got)
	}
	if want := "/v1/executions/" + got.ExecutionID; got.StatusURL != want || w.Header().Get("Location") != want {
		t.Errorf("statusUrl %q, Location %q, want %q", got.StatusURL, w.Header().Get("Location"), want)
	}
	if want := "/v1/executions/" + got.ExecutionID + "/result"; got.ResultURL != want {
		t.Errorf("resultUrl %q, want %q", got.ResultURL, want)
	}
	if !got.SubmittedAt.Equal(epoch) || !strings.Contains(w.Body.String(), `"submittedAt":"2025-03-04T05:06:07.89Z"`) {
		t.Errorf("submittedAt %v in %s, want 2025-03-04T05:06:07.89Z (UTC)", got.SubmittedAt, w.Body)
	}
	if n := len(e.disp.take()); n != 1 {
		t.Errorf("%d work items dispatched, want 1", n)
	}

	w = e.submit("greet", "key-1", `{"name":"ada"}`)
	if w.Code != http.StatusOK {
		t.Fatalf("duplicate: status %d, want 200: %s", w.Code, w.Body)
	}
	dup := decode[client.Submission](t, w)
	if dup.ExecutionID != got.ExecutionID || !dup.Duplicate || w.Header().Get("Location") != got.StatusURL {
		t.Errorf("duplicate %+v, Location %q; first %+v", dup, w.Header().Get("Location"), got)
	}
	if n := len(e.disp.take()); n != 0 {
		t.Errorf("duplicate dispatched %d work items", n)
	}
}

func TestSubmitContentTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name, contentType, body string
		encoding                payload.Encoding
		storedType, message     string
	}{
		{"empty content type is JSON", "", `[1,2]`, payload.EncodingJSON, payload.ContentTypeJSON, ""},
		{"json with charset", "application/json; charset=utf-8", `{}`, payload.EncodingJSON, payload.ContentTypeJSON, ""},
		{"+json suffix", "application/vnd.acme+json", `"x"`, payload.EncodingJSON, payload.ContentTypeJSON, ""},
		{"raw text", "Text/Plain; Charset=utf-8", `not json`, payload.EncodingRaw, "text/plain; charset=utf-8", ""},
		{"raw octets", "application/octet-stream", "\x00\x01\xff", payload.EncodingRaw, payload.ContentTypeOctet, ""},
		{"protobuf with messageType", "application/x-protobuf; messageType=acme.v1.Order", "\x08\x01", payload.EncodingProtobuf, payload.ContentTypeProtobuf, "acme.v1.Order"},
		{"protobuf without name is raw", "application/x-protobuf", "\x08\x01", payload.EncodingRaw, payload.ContentTypeProtobuf, ""},
	}
	for i, c := range cases {
		w := e.submit("echo", "ct-"+string(rune('a'+i)), c.body, "Content-Type", c.contentType)
		if w.Code != http.StatusAccepted {
			t.Errorf("%s: status %d: %s", c.name, w.Code, w.Body)
			continue
		}
		id := decode[client.Submission](t, w).ExecutionID
		row, err := e.rt.Status(context.Background(), store.Key{TenantID: "default", ExecutionID: id})
		if err != nil {
			t.Fatal(err)
		}
		if row.Input.Encoding != c.encoding || row.Input.ContentType != c.storedType || row.Input.Message != c.message {
			t.Errorf("%s: stored %s %q %q, want %s %q %q", c.name, row.Input.Encoding, row.Input.ContentType,
				row.Input.Message, c.encoding, c.storedType, c.message)
		}
	}
	// The message type may also come as a header.
	w := e.submit("echo", "ct-header", "\x08\x02", "Content-Type", "application/x-protobuf", "X-Message-Type", "acme.v1.Order")
	if w.Code != http.StatusAccepted {
		t.Fatalf("protobuf with header: %d %s", w.Code, w.Body)
	}
}

func TestSubmitBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name     string
		pipeline string
		body     string
		headers  map[string]string
		kind     string
	}{
		{"key too long", "echo", `{}`, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, "invalid-idempotency-key"},
		{"key with control character", "echo", `{}`, map[string]string{"Idempotency-Key": "a\x01b"}, "invalid-idempotency-key"},
		{"key with non-ASCII", "echo", `{}`, map[string]string{"Idempotency-Key": "clé"}, "invalid-idempotency-key"},
		{"key with DEL", "echo", `{}`, map[string]string{"Idempotency-Key": "a\x7f"}, "invalid-idempotency-key"},
		{"empty key header", "echo", `{}`, map[string]string{"Idempotency-Key": ""}, "invalid-idempotency-key"},
		{"invalid JSON", "echo", `{"a":`, map[string]string{"Idempotency-Key": "k"}, "invalid-json"},
		{"empty JSON body", "echo", ``, map[string]string{"Idempotency-Key": "k"}, "invalid-json"},
		{"JSON not UTF-8", "echo", "\"\xff\"", map[string]string{"Idempotency-Key": "k"}, "invalid-json"},
		{"invalid JSON under +json", "echo", `nope`, map[string]string{"Idempotency-Key": "k", "Content-Type": "application/problem+json"}, "invalid-json"},
		{"tenant with space", "echo", `{}`, map[string]string{"Idempotency-Key": "k", "X-Tenant-Id": "bad tenant"}, "invalid-tenant"},
		{"tenant too long", "echo", `{}`, map[string]string{"Idempotency-Key": "k", "X-Tenant-Id": strings.Repeat("t", 129)}, "invalid-tenant"},
		{"empty tenant", "echo", `{}`, map[string]string{"Idempotency-Key": "k", "X-Tenant-Id": ""}, "invalid-tenant"},
		{"malformed content type", "echo", `{}`, map[string]string{"Idempotency-Key": "k", "Content-Type": "what/"}, "invalid-content-type"},
		{"bad protobuf name", "echo", "x", map[string]string{"Idempotency-Key": "k", "Content-Type": "application/x-protobuf; messageType=\"a..b\""}, "invalid-content-type"},
		{"bad pipeline id", "-echo", `{}`, map[string]string{"Idempotency-Key": "k"}, "invalid-pipeline-id"},
		{"escaped slash in pipeline id", "a%2Fb", `{}`, map[string]string{"Idempotency-Key": "k"}, "invalid-pipeline-id"},
	}
	for _, c := range cases {
		h := map[string]string{"Content-Type": "application/json"}
		for k, v := range c.headers {
			h[k] = v
		}
		w := e.do(req{method: http.MethodPost, path: "/v1/pipelines/" + c.pipeline + "/executions", body: c.body, headers: h})
		t.Run(c.name, func(t *testing.T) { wantProblem(t, w, http.StatusBadRequest, c.kind) })
	}
	// Nothing was stored or dispatched: key "k" is still free.
	if n := len(e.disp.take()); n != 0 {
		t.Errorf("rejected requests dispatched %d work items", n)
	}
	if w := e.submit("echo", "k", `{"valid":true}`); w.Code != http.StatusAccepted {
		t.Errorf("after rejections, submit with the same key: %d, want 202: %s", w.Code, w.Body)
	}
}

func TestSubmitUnknownPipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := wantProblem(t, e.submit("no-such-pipeline", "k", `{}`), http.StatusNotFound, "pipeline-not-found")
	if !strings.Contains(p.Detail, `"no-such-pipeline"`) {
		t.Errorf("detail %q does not name the pipeline", p.Detail)
	}
}

// TestSubmitNonJSONToJSONPipelineIs415: a pipeline whose first step
// decodes JSON answers a text, octet-stream or protobuf body with 415
// (unsupported-media-type, naming application/json) at submit, and stores
// and dispatches nothing, instead of dead-lettering the execution later;
// a raw pipeline still takes them, and the JSON pipeline JSON.
func TestSubmitNonJSONToJSONPipelineIs415(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, ct := range []string{"text/plain", "application/octet-stream", "application/x-protobuf; messageType=acme.v1.Order", "application/x-protobuf"} {
		key := "media-" + string(rune('a'+i))
		p := wantProblem(t, e.submit("greet", key, `{"name":"ada"}`, "Content-Type", ct), http.StatusUnsupportedMediaType, "unsupported-media-type")
		if !strings.Contains(p.Detail, "application/json") || !strings.Contains(p.Detail, "greet") {
			t.Errorf("%s: detail %q does not name the pipeline and application/json", ct, p.Detail)
		}
		if n := len(e.disp.take()); n != 0 {
			t.Errorf("%s: %d work items dispatched", ct, n)
		}
		// Nothing was stored: the same key is free for a JSON body.
		if w := e.submit("greet", key, `{"name":"ada"}`); w.Code != http.StatusAccepted {
			t.Errorf("%s: the JSON retry with the same key: %d %s", ct, w.Code, w.Body)
		}
		if w := e.submit("echo", key+"-raw", "hello", "Content-Type", ct); w.Code != http.StatusAccepted {
			t.Errorf("%s to a raw pipeline: %d %s", ct, w.Code, w.Body)
		}
		e.disp.take()
	}
	if w := e.submit("greet", "media-json", `{"name":"ada"}`, "Content-Type", "application/vnd.acme+json"); w.Code != http.StatusAccepted {
		t.Errorf("+json to the JSON pipeline: %d %s", w.Code, w.Body)
	}
}

func TestSubmitKeyRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *engine.Config, _ *engine.Deps, _ *httpapi.Options) {
		c.IdempotencyPolicy = engine.ClientKeyRequired
	})
	wantProblem(t, e.submit("echo", "", `{}`), http.StatusBadRequest, "idempotency-key-required")
	if w := e.submit("echo", "k", `{}`); w.Code != http.StatusAccepted {
		t.Errorf("with key: %d %s", w.Code, w.Body)
	}
}

// TestSubmitWithoutKeyIsNew: without an Idempotency-Key every submit is a
// new execution (audit item 2: the same body again answered 200
// duplicate and nothing ran); SERVER_KEY_ONLY is the policy that
// deduplicates identical bodies, while the execution's row lives.
func TestSubmitWithoutKeyIsNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.mustSubmit("echo", "", `{"n":1}`)
	w := e.submit("echo", "", `{"n":1}`)
	if w.Code != http.StatusAccepted || decode[client.Submission](t, w).ExecutionID == first.ExecutionID {
		t.Errorf("same body without key: %d %s, want 202 and a new execution (not %s)", w.Code, w.Body, first.ExecutionID)
	}
	server := newEnv(t, func(c *engine.Config, _ *engine.Deps, _ *httpapi.Options) { c.IdempotencyPolicy = engine.ServerKeyOnly })
	first = server.mustSubmit("echo", "", `{"n":1}`)
	w = server.submit("echo", "client-key-ignored", `{"n":1}`)
	if w.Code != http.StatusOK || decode[client.Submission](t, w).ExecutionID != first.ExecutionID {
		t.Errorf("same body under SERVER_KEY_ONLY: %d %s, want 200 duplicate of %s", w.Code, w.Body, first.ExecutionID)
	}
}

func TestSubmitTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.MaxBodyBytes = 16 }))
	big := `{"padding":"0123456789"}` // 24 bytes
	wantProblem(t, e.submit("echo", "k", big), http.StatusRequestEntityTooLarge, "payload-too-large")

	// Without a Content-Length the limit is enforced while reading.
	hr := httptest.NewRequest(http.MethodPost, "/v1/pipelines/echo/executions", io.MultiReader(strings.NewReader(big)))
	hr.ContentLength = -1
	hr.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, hr)
	wantProblem(t, w, http.StatusRequestEntityTooLarge, "payload-too-large")

	// Exactly at the limit is fine, and the key was not taken by the 413s.
	if w := e.submit("echo", "k", `{"n":"12345678"}`); w.Code != http.StatusAccepted {
		t.Errorf("16-byte body after 413s: %d, want 202: %s", w.Code, w.Body)
	}
}

// TestSubmitOverMapLimitsIs400: a pipeline whose first step is a map
// refuses, at submit, an input that is not a list, a list of more than
// pipeline.MaxChildren elements, or one with an element over
// pipeline.MaxElementBytes: 400 invalid-input naming the limit, nothing
// stored or dispatched (the key stays free); at the limits it is taken.
func TestSubmitOverMapLimitsIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	list := func(n int, elem string) string {
		return "[" + strings.Repeat(elem+",", n-1) + elem + "]"
	}
	big := `"` + strings.Repeat("x", pipeline.MaxElementBytes-1) + `"` // MaxElementBytes + 1 with its quotes
	for _, c := range []struct{ name, body, want string }{
		{"not a list", `{"n":1}`, "must be a JSON list"},
		{"too many", list(pipeline.MaxChildren+1, "1"), "10001 elements, more than the 10000"},
		{"element too large", "[1," + big + "]", "element 1 is 262145 bytes"},
	} {
		p := wantProblem(t, e.submit("fan", "k", c.body), http.StatusBadRequest, "invalid-input")
		if !strings.Contains(p.Detail, c.want) || strings.Contains(p.Detail, "xxxx") {
			t.Errorf("%s: detail %q, want it to name %q (and no input bytes)", c.name, p.Detail, c.want)
		}
		if n := len(e.disp.take()); n != 0 {
			t.Errorf("%s: %d work items dispatched", c.name, n)
		}
	}
	if w := e.submit("fan", "k", list(pipeline.MaxChildren, "1")); w.Code != http.StatusAccepted {
		t.Errorf("a list at the limit (same key): %d %s", w.Code, w.Body)
	}
}

// TestSubmitUndecodableInputIs400: an input the first step cannot decode
// into its input type is refused at submit with 400 invalid-input and the
// decode error (today it was taken, 202, and dead-lettered at once with
// invalid_input); nothing is stored, the key stays free; a raw step
// takes anything.
func TestSubmitUndecodableInputIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := wantProblem(t, e.submit("greet", "k", `{"name":42}`), http.StatusBadRequest, "invalid-input")
	if !strings.HasPrefix(p.Detail, "step greet: decode input") || !strings.Contains(p.Detail, "does not fit Go type string") || strings.Contains(p.Detail, "42") {
		t.Errorf("detail %q: want the step and the decode error, not the value", p.Detail)
	}
	if n := len(e.disp.take()); n != 0 {
		t.Errorf("%d work items dispatched", n)
	}
	if w := e.submit("greet", "k", `{"name":"ada"}`); w.Code != http.StatusAccepted {
		t.Errorf("a decodable input with the same key: %d %s", w.Code, w.Body)
	}
	if w := e.submit("echo", "k2", `[1,"two"]`); w.Code != http.StatusAccepted {
		t.Errorf("a raw step's input: %d %s", w.Code, w.Body)
	}
}

func TestSubmitKeyReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustSubmit("echo", "reused", `{"a":1}`)
	wantProblem(t, e.submit("echo", "reused", `{"a":2}`), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	wantProblem(t, e.submit("echo-2", "reused", `{"a":1}`), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	wantProblem(t, e.submit("echo", "reused", `{"a":1}`, "Content-Type", "text/plain"), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	// Keys are scoped by tenant: another tenant may use the same key.
	if w := e.submit("echo", "reused", `{"a":2}`, "X-Tenant-Id", "other"); w.Code != http.StatusAccepted {
		t.Errorf("same key, other tenant: %d %s", w.Code, w.Body)
	}
	// The same JSON document with other whitespace is the same request
	// (today it was a 422 mismatch): a duplicate of the first.
	if w := e.submit("echo", "reused", "{\n  \"a\": 1\n}\n"); w.Code != http.StatusOK || !decode[client.Submission](t, w).Duplicate {
		t.Errorf("the same document pretty-printed: %d %s, want 200 duplicate", w.Code, w.Body)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.mustSubmit("greet", "k", `{"name":"bob"}`, "X-Tenant-Id", "acme")
	w := e.do(req{method: http.MethodGet, path: sub.StatusURL, headers: map[string]string{"X-Tenant-Id": "acme"}})
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var raw map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"executionId", "pipelineId", "pipelineVersion", "idempotencyKey", "status", "stepIndex", "stepName", "attempt", "version", "createdAt", "updatedAt", "nextDueAt"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status document lacks %q: %s", k, w.Body)
		}
	}
	if _, ok := raw["error"]; ok {
		t.Errorf("status document has an error: %s", w.Body)
	}
	doc := decode[client.Execution](t, w)
	if doc.PipelineVersion == "" {
		t.Errorf("status document lacks the pipeline version: %s", w.Body)
	}
	want := client.Execution{
		ExecutionID: sub.ExecutionID, PipelineID: "greet", PipelineVersion: doc.PipelineVersion, IdempotencyKey: "k", Status: store.Queued, StepIndex: 0, StepName: "greet",
		Attempt: 1, Version: 1, CreatedAt: epoch, UpdatedAt: epoch,
		NextDueAt: epoch, Priority: pipeline.DefaultPriority,
	}
	if doc != want {
		t.Errorf("status document\n got %+v\nwant %+v", doc, want)
	}

	e.drive()
	doc = decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL, headers: map[string]string{"X-Tenant-Id": "acme"}}))
	if doc.Status != store.Succeeded || !doc.NextDueAt.IsZero() || doc.Version != 3 {
		t.Errorf("after success: %+v", doc)
	}

	// Another tenant, an unknown id and a malformed id are all not found.
	wantProblem(t, e.do(req{method: http.MethodGet, path: sub.StatusURL, headers: map[string]string{"X-Tenant-Id": "intruder"}}), http.StatusNotFound, "execution-not-found")
	wantProblem(t, e.do(req{method: http.MethodGet, path: sub.StatusURL}), http.StatusNotFound, "execution-not-found")
	wantProblem(t, e.do(req{method: http.MethodGet, path: "/v1/executions/0190c3c4-0000-7000-8000-000000000000"}), http.StatusNotFound, "execution-not-found")
	wantProblem(t, e.do(req{method: http.MethodGet, path: "/v1/executions/not%20an%20id"}), http.StatusNotFound, "execution-not-found")
	wantProblem(t, e.do(req{method: http.MethodGet, path: sub.StatusURL, headers: map[string]string{"X-Tenant-Id": "bad!"}}), http.StatusBadRequest, "invalid-tenant")
}

func TestResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.mustSubmit("greet", "k", `{"name":"ada"}`)
	p := wantProblem(t, e.do(req{method: http.MethodGet, path: sub.ResultURL}), http.StatusConflict, "execution-not-succeeded")
	if p.ExecutionStatus != store.Queued || p.ExecutionID != sub.ExecutionID || !strings.Contains(p.Detail, "QUEUED") {
		t.Errorf("409 problem %+v", p)
	}

	e.drive()
	w := e.do(req{method: http.MethodGet, path: sub.ResultURL})
	if w.Code != http.StatusOK {
		t.Fatalf("result: %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if got := w.Body.String(); got != `{"greeting":"hello ada"}` {
		t.Errorf("result %q", got)
	}
	wantProblem(t, e.do(req{method: http.MethodGet, path: sub.ResultURL, headers: map[string]string{"X-Tenant-Id": "other"}}), http.StatusNotFound, "execution-not-found")
	wantProblem(t, e.do(req{method: http.MethodGet, path: "/v1/executions/nope/result"}), http.StatusNotFound, "execution-not-found")
}

func TestRawRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := "line one\nline two\x00\xfe"
	sub := e.mustSubmit("echo", "raw", body, "Content-Type", "text/plain; charset=iso-8859-1")
	e.drive()
	w := e.do(req{method: http.MethodGet, path: sub.ResultURL})
	if w.Code != http.StatusOK {
		t.Fatalf("result: %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=iso-8859-1" {
		t.Errorf("Content-Type %q", ct)
	}
	if w.Body.String() != body {
		t.Errorf("result %q, want %q", w.Body, body)
	}
	if w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Error("result lacks X-Content-Type-Options: nosniff")
	}

	// Protobuf keeps its message name.
	sub = e.mustSubmit("echo", "pb", "\x08\x96\x01", "Content-Type", "application/x-protobuf; messageType=acme.v1.Order")
	e.drive()
	w = e.do(req{method: http.MethodGet, path: sub.ResultURL})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != payload.ContentTypeProtobuf ||
		w.Header().Get("X-Message-Type") != "acme.v1.Order" || w.Body.String() != "\x08\x96\x01" {
		t.Errorf("protobuf result: %d %q %q %q", w.Code, w.Header().Get("Content-Type"), w.Header().Get("X-Message-Type"), w.Body)
	}
}

func redriveReq(path, token, body string, headers ...string) req {
	h := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return req{method: http.MethodPost, path: path + "/redrive", body: body, headers: h}
}

// TestOperatorRoutesDisabledAre403: without an admin token (and not
// authorized upstream) every operator route is still routed and answers
// 403 operator-routes-disabled naming the setting that enables it (the
// environment variable of config key admin.token), with or without a
// token, and changes nothing; a wrong method is still 405.
func TestOperatorRoutesDisabledAre403(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.AdminToken = "" }))
	sub := e.mustSubmit("fail", "k", `{}`)
	e.drive()
	env := config.EnvName(config.FullKey("admin.token"))
	if env != "PIPELINE_ORCHESTRATOR_ADMIN_TOKEN" || !slices.ContainsFunc(config.Keys(), func(k config.KeyDoc) bool { return k.Env == env }) {
		t.Fatalf("the admin token's variable is %q, not one of config.Keys", env)
	}
	before := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL}))
	for _, r := range []req{
		redriveReq(sub.StatusURL, "anything", `{"reason":"x"}`),
		redriveReq(sub.StatusURL, "", `{"reason":"x"}`),
		{method: http.MethodPost, path: sub.StatusURL + "/cancel", body: `{"reason":"x"}`},
		{method: http.MethodPost, path: "/v1/redrives", body: `{"reason":"x"}`},
		{method: http.MethodGet, path: "/v1/redrives/job-1"},
	} {
		p := wantProblem(t, e.do(r), http.StatusForbidden, "operator-routes-disabled")
		if !strings.Contains(p.Detail, "PIPELINE_ORCHESTRATOR_ADMIN_TOKEN") || !strings.Contains(p.Detail, "admin.token") {
			t.Errorf("%s %s: the detail %q does not name the setting", r.method, r.path, p.Detail)
		}
	}
	if st := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL})); st.Status != store.DLQ || st.Version != before.Version {
		t.Errorf("a refused re-drive changed the execution: %+v, was %+v", st, before)
	}
	wantProblem(t, e.do(req{method: http.MethodGet, path: sub.StatusURL + "/redrive"}), http.StatusMethodNotAllowed, "method-not-allowed")
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.mustSubmit("fail", "k", `{}`)
	e.drive()
	queued := e.mustSubmit("echo", "q", `{}`)

	doc := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL}))
	if doc.Status != store.DLQ || doc.Error == nil || doc.Error.Code != "boom" || doc.Error.TerminalReason != store.ReasonNonRetryable || !doc.NextDueAt.IsZero() {
		t.Fatalf("failed execution: %+v (error %+v)", doc, doc.Error)
	}

	// Authentication comes first.
	w := e.do(redriveReq(sub.StatusURL, "", `{"reason":"x"}`))
	wantProblem(t, w, http.StatusUnauthorized, "unauthorized")
	if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("WWW-Authenticate %q", w.Header().Get("WWW-Authenticate"))
	}
	w = e.do(redriveReq(sub.StatusURL, "wrong-token", `{"reason":"x"}`))
	wantProblem(t, w, http.StatusUnauthorized, "unauthorized")
	if !strings.Contains(w.Header().Get("WWW-Authenticate"), "invalid_token") {
		t.Errorf("WWW-Authenticate %q", w.Header().Get("WWW-Authenticate"))
	}
	wantProblem(t, e.do(req{method: http.MethodPost, path: sub.StatusURL + "/redrive", body: `{"reason":"x"}`,
		headers: map[string]string{"Authorization": "Basic " + adminToken}}), http.StatusUnauthorized, "unauthorized")

	// Malformed bodies.
	for _, body := range []string{``, `{}`, `{"reason":"  "}`, `{"reason":"x","extra":1}`, `{"reason":"x"} {}`,
		`{"reason":"x","expectedVersion":"3"}`, `{"reason":"x","expectedVersion":0}`, `[]`,
		`{"reason":"` + strings.Repeat("r", 2049) + `"}`} {
		wantProblem(t, e.do(redriveReq(sub.StatusURL, adminToken, body)), http.StatusBadRequest, "invalid-request")
	}

	// Wrong status, wrong version, unknown execution, another tenant.
	p := wantProblem(t, e.do(redriveReq(queued.StatusURL, adminToken, `{"reason":"x"}`)), http.StatusConflict, "execution-not-redrivable")
	if p.ExecutionStatus != store.Queued {
		t.Errorf("not redrivable: %+v", p)
	}
	p = wantProblem(t, e.do(redriveReq(sub.StatusURL, adminToken, `{"reason":"x","expectedVersion":1}`)), http.StatusConflict, "version-mismatch")
	if p.CurrentVersion != doc.Version || p.ExecutionStatus != store.DLQ {
		t.Errorf("version mismatch: %+v", p)
	}
	wantProblem(t, e.do(redriveReq("/v1/executions/0190c3c4-0000-7000-8000-000000000000", adminToken, `{"reason":"x"}`)), http.StatusNotFound, "execution-not-found")
	wantProblem(t, e.do(redriveReq(sub.StatusURL, adminToken, `{"reason":"x"}`, "X-Tenant-Id", "other")), http.StatusNotFound, "execution-not-found")

	// Success.
	w = e.do(redriveReq(sub.StatusURL, adminToken, `{"reason":"fixed the downstream","expectedVersion":`+jsonInt(doc.Version)+`}`))
	if w.Code != http.StatusAccepted {
		t.Fatalf("redrive: %d %s", w.Code, w.Body)
	}
	re := decode[client.Execution](t, w)
	if re.ExecutionID != sub.ExecutionID || re.Status != store.Queued || re.Attempt != 2 || re.Version != doc.Version+1 || re.Error != nil {
		t.Errorf("after redrive: %+v", re)
	}
	if strings.Contains(w.Body.String(), `"error"`) {
		t.Errorf("redriven document has an error: %s", w.Body)
	}
	// Exactly one more attempt: it fails again, and can be re-driven again.
	e.drive()
	doc = decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL}))
	if doc.Status != store.DLQ || doc.Attempt != 2 {
		t.Errorf("after the extra attempt: %+v", doc)
	}
	if w := e.do(redriveReq(sub.StatusURL, adminToken, `{"reason":"again"}`)); w.Code != http.StatusAccepted {
		t.Errorf("second redrive: %d %s", w.Code, w.Body)
	}
}

// TestRedriveRemoteOutcomeUnknown: a REMOTE_OUTCOME_UNKNOWN execution is
// re-driven only with confirmedNoRemoteEffect.
func TestRedriveRemoteOutcomeUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.mustSubmit("unknown", "k", `{}`)
	e.drive()
	doc := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL}))
	if doc.Status != store.RemoteOutcomeUnknown || !doc.NextDueAt.IsZero() || doc.Error == nil || doc.Error.Code != pipeline.CodeRemoteOutcomeUnknown {
		t.Fatalf("parked: %+v (error %+v)", doc, doc.Error)
	}
	for _, body := range []string{`{"reason":"x"}`, `{"reason":"x","confirmedNoRemoteEffect":false}`} {
		p := wantProblem(t, e.do(redriveReq(sub.StatusURL, adminToken, body)), http.StatusConflict, "execution-not-redrivable")
		if p.ExecutionStatus != store.RemoteOutcomeUnknown || !strings.Contains(p.Detail, `"confirmedNoRemoteEffect": true`) {
			t.Errorf("unconfirmed: %+v", p)
		}
	}
	wantProblem(t, e.do(redriveReq(sub.StatusURL, adminToken, `{"reason":"x","confirmedNoRemoteEffect":"yes"}`)), http.StatusBadRequest, "invalid-request")
	w := e.do(redriveReq(sub.StatusURL, adminToken, `{"reason":"worker confirmed stopped","confirmedNoRemoteEffect":true,"expectedVersion":`+jsonInt(doc.Version)+`}`))
	if w.Code != http.StatusAccepted {
		t.Fatalf("confirmed redrive: %d %s", w.Code, w.Body)
	}
	if re := decode[client.Execution](t, w); re.Status != store.Queued || re.Attempt != 2 || re.Error != nil {
		t.Errorf("after redrive: %+v", re)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/pipelines/echo/executions", "POST"},
		{http.MethodPut, "/v1/pipelines/echo/executions", "POST"},
		{http.MethodPost, "/v1/executions/abc", "GET, HEAD"},
		{http.MethodDelete, "/v1/executions/abc/result", "GET, HEAD"},
		{http.MethodGet, "/v1/executions/abc/redrive", "POST"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
	}
	for _, c := range cases {
		w := e.do(req{method: c.method, path: c.path})
		wantProblem(t, w, http.StatusMethodNotAllowed, "method-not-allowed")
		if got := w.Header().Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestNotFoundRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/", "/nope", "/v1/executions/", "/v1/pipelines/echo/executions/",
		"/v1/pipelines//executions", "/v1/pipelines/./executions", "/v1/x/../healthz", "//healthz", "/healthz/"} {
		w := e.do(req{method: http.MethodGet, path: path})
		t.Run(path, func(t *testing.T) { wantProblem(t, w, http.StatusNotFound, "not-found") })
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.do(req{method: http.MethodGet, path: "/healthz"})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || strings.TrimSpace(w.Body.String()) != `{"status":"ok"}` {
		t.Errorf("healthz: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	if w := e.do(req{method: http.MethodHead, path: "/healthz"}); w.Code != http.StatusOK {
		t.Errorf("HEAD healthz: %d", w.Code)
	}
}

func TestBasePath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.BasePath = "/prod/" }))
	sub := e.mustSubmit("echo", "k", `{}`)
	if want := "/prod/v1/executions/" + sub.ExecutionID; sub.StatusURL != want || sub.ResultURL != want+"/result" {
		t.Errorf("urls %q %q", sub.StatusURL, sub.ResultURL)
	}
}

func TestFixedTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.TenantFunc = httpapi.FixedTenant("solo") }))
	sub := e.mustSubmit("echo", "k", `{}`, "X-Tenant-Id", "ignored!")
	if _, err := e.rt.Status(context.Background(), store.Key{TenantID: "solo", ExecutionID: sub.ExecutionID}); err != nil {
		t.Errorf("execution not in tenant solo: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("FixedTenant accepted an invalid tenant")
		}
	}()
	httpapi.FixedTenant("not valid")
}

func TestTenantFromHeader(t *testing.T) {
	t.Parallel()
	cases := []struct {
		values []string
		want   string
		ok     bool
	}{
		{nil, "default", true},
		{[]string{"acme-1.prod_x"}, "acme-1.prod_x", true},
		{[]string{strings.Repeat("a", 128)}, strings.Repeat("a", 128), true},
		{[]string{strings.Repeat("a", 129)}, "", false},
		{[]string{""}, "", false},
		{[]string{"a/b"}, "", false},
		{[]string{"a", "b"}, "", false},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, v := range c.values {
			r.Header.Add("X-Tenant-Id", v)
		}
		got, err := httpapi.TenantFromHeader(r)
		if got != c.want || (err == nil) != c.ok || (err != nil && !errors.Is(err, httpapi.ErrInvalidTenant)) {
			t.Errorf("%q: %q, %v", c.values, got, err)
		}
	}
}

// failingStore fails reads with an internal error or a deadline.
type failingStore struct {
	store.Store
	err error
}

func (s failingStore) Get(context.Context, store.Key) (store.Execution, error) {
	return store.Execution{}, s.err
}

func TestInternalErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
		kind   string
	}{
		{errors.New("dynamodb: table qasync-secret-internal unreachable"), http.StatusInternalServerError, "internal"},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable"},
	} {
		e := newEnv(t, func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
			d.Store = failingStore{Store: d.Store, err: c.err}
		})
		w := e.do(req{method: http.MethodGet, path: "/v1/executions/abc"})
		wantProblem(t, w, c.status, c.kind)
		if strings.Contains(w.Body.String(), "secret") {
			t.Errorf("internal error echoed: %s", w.Body)
		}
		if !strings.Contains(e.logs.String(), c.err.Error()) {
			t.Errorf("error not logged: %s", e.logs)
		}
	}
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const marker = "TOP-SECRET-PAYLOAD-MARKER"
	sub := e.mustSubmit("echo", "k", `{"secret":"`+marker+`"}`, "X-Tenant-Id", "acme")
	e.do(req{method: http.MethodGet, path: sub.ResultURL, headers: map[string]string{"X-Tenant-Id": "acme"}})
	e.submit("echo", "k2", `{"secret":"`+marker+`"`, "X-Tenant-Id", "acme") // invalid JSON
	e.submit("echo", "k3", marker, "Content-Type", "text/plain")
	e.drive()
	e.do(req{method: http.MethodGet, path: sub.ResultURL, headers: map[string]string{"X-Tenant-Id": "acme"}})
	e.do(req{method: http.MethodGet, path: "/nope"})

	logs := e.logs.String()
	if strings.Contains(logs, marker) {
		t.Errorf("a body reached the log:\n%s", logs)
	}
	var requests []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["event"] == "http_request" {
			requests = append(requests, m)
		}
	}
	if len(requests) != 6 {
		t.Fatalf("%d http_request events, want 6:\n%s", len(requests), logs)
	}
	first := requests[0]
	if first["method"] != "POST" || first["route"] != "POST /v1/pipelines/{pipelineId}/executions" ||
		first["status"] != float64(202) || first["tenant"] != "acme" {
		t.Errorf("submit log event %v", first)
	}
	if _, ok := first["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms missing: %v", first)
	}
	if r := requests[1]; r["route"] != "GET /v1/executions/{executionId}/result" || r["status"] != float64(409) {
		t.Errorf("result log event %v", r)
	}
	if r := requests[5]; r["route"] != "" || r["status"] != float64(404) {
		t.Errorf("not-found log event %v", r)
	}
}

func TestThroughServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.MaxBodyBytes = 1 << 10 }))
	srv := httptest.NewServer(e.h)
	defer srv.Close()

	post := func(key, contentType string, body io.Reader) *http.Response {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/pipelines/echo/executions", body)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Content-Type", contentType)
		res, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	// A chunked body over the limit.
	res := post("big", "application/octet-stream", io.MultiReader(strings.NewReader(strings.Repeat("x", 4<<10))))
	if res.StatusCode != http.StatusRequestEntityTooLarge || res.Header.Get("Content-Type") != httpapi.ContentTypeProblem {
		t.Errorf("oversized: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	res = post("big", "application/octet-stream", strings.NewReader("small"))
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("after 413: %d", res.StatusCode)
	}
	var sub client.Submission
	if err := json.NewDecoder(res.Body).Decode(&sub); err != nil {
		t.Fatal(err)
	}
	e.drive()
	res, err := srv.Client().Get(srv.URL + sub.ResultURL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(b) != "small" || res.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("result: %d %q %q", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	head, err := srv.Client().Head(srv.URL + sub.StatusURL)
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	if head.StatusCode != http.StatusOK || head.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD status: %d %q", head.StatusCode, head.Header.Get("Content-Type"))
	}
}

// TestRedriveAuthorizedUpstream: behind API Gateway the re-drive route has
// its own IAM permission; a SigV4-signed request carries no bearer token
// (its Authorization header is the signature) and is served.
func TestRedriveAuthorizedUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.AdminToken, o.RedriveAuthorizedUpstream = "", true }))
	sub := e.mustSubmit("fail", "k", `{}`)
	e.drive()
	w := e.do(req{method: http.MethodPost, path: sub.StatusURL + "/redrive", body: `{"reason":"fixed upstream"}`,
		headers: map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=AKIA.../execute-api/aws4_request, Signature=abc"}})
	if w.Code != http.StatusAccepted {
		t.Fatalf("redrive behind the gateway: %d %s", w.Code, w.Body)
	}
	doc := decode[client.Execution](t, w)
	if doc.Status != store.Queued {
		t.Fatalf("redriven execution: %+v", doc)
	}
}

// TestConsoleServedUnderItsPrefix: with Options.Console the handler hands
// ConsolePrefix and the paths under it to the console (unlogged: the
// console logs its own) and everything else to its routes.
func TestConsoleServedUnderItsPrefix(t *testing.T) {
	var got []string
	con := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, r.URL.Path) })
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.Console = con }))
	codes := map[string]int{}
	for _, p := range []string{"/console", "/console/executions/x", "/consoles", "/healthz"} {
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		codes[p] = rec.Code
	}
	if want := []string{"/console", "/console/executions/x"}; !slices.Equal(got, want) {
		t.Errorf("the console got %q, want %q", got, want)
	}
	if codes["/consoles"] != http.StatusNotFound || codes["/healthz"] != http.StatusOK {
		t.Errorf("the API answered %v, want /consoles 404 and /healthz 200", codes)
	}
	if n := strings.Count(e.logs.String(), `"event":"http_request"`); n != 2 {
		t.Errorf("%d http_request events, want 2 (the API's requests only)", n)
	}
}
