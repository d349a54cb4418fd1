package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// orderInput is a typed first step's input: its schema is served.
type orderInput struct {
	OrderID string   `json:"orderId" jsonschema:"required"`
	Items   []line   `json:"items,omitempty"`
	Express bool     `json:"express"`
	Tags    []string `json:"tags,omitempty"`
}

type line struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// withCatalog registers, beside the test pipelines, a pipeline with two
// definitions (the older draining) whose first step takes an orderInput,
// and one of every step kind.
func withCatalog(t *testing.T) envOption {
	return func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		typed := pipeline.NewStep("validate", func(_ context.Context, _ pipeline.StepInfo, in orderInput) (orderInput, error) { return in, nil })
		v1 := pipeline.NewStep("charge", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
			return in, nil
		})
		kinds := []pipeline.Step{
			pipeline.Sleep("wait", time.Minute),
			pipeline.Map("each", "echo", pipeline.MapOptions{}),
			pipeline.Child("one", "echo"),
			v1,
		}
		reg, err := pipeline.NewRegistry(append(testPipelines(),
			pipeline.Pipeline{ID: "orders", Version: "v1", Draining: true, Steps: []pipeline.Step{v1}},
			pipeline.Pipeline{ID: "orders", Version: "v2", Steps: []pipeline.Step{typed, v1}},
			pipeline.Pipeline{ID: "kinds", Steps: kinds},
		)...)
		if err != nil {
			t.Fatal(err)
		}
		d.Registry = reg
	}
}

// TestPipelinesRoutes: GET /v1/pipelines lists every registered pipeline
// sorted by id, each version in registration order with its steps'
// names and kinds and, for a typed first step, the JSON Schema of its
// input; GET /v1/pipelines/{id} is one of them; an unknown id is 404
// pipeline-not-found naming it (as submit says it), a malformed one 400;
// any caller with an identity may read them, one without is 401.
func TestPipelinesRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withCatalog(t))
	list := decode[client.PipelineList](t, get(e, "/v1/pipelines"))
	var ids []string
	for _, p := range list.Pipelines {
		ids = append(ids, p.PipelineID)
	}
	if want := []string{"echo", "echo-2", "fail", "fan", "greet", "kinds", "orders", "unknown"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("pipelines %q, want %q", ids, want)
	}
	orders := decode[client.Pipeline](t, get(e, "/v1/pipelines/orders"))
	reg := e.rt.Registry()
	cur, _ := reg.Get("orders")
	if orders.CurrentVersion != cur.VersionID() || len(orders.Versions) != 2 {
		t.Fatalf("orders: %+v", orders)
	}
	old, now := orders.Versions[0], orders.Versions[1]
	if old.Label != "v1" || !old.Draining || now.Label != "v2" || now.Draining || now.Version != cur.VersionID() || !strings.HasPrefix(old.Version, "v1-") {
		t.Errorf("versions %+v", orders.Versions)
	}
	if want := []client.PipelineStep{{Name: "validate", Kind: "step"}, {Name: "charge", Kind: "step"}}; !reflect.DeepEqual(now.Steps, want) {
		t.Errorf("v2 steps %+v, want %+v", now.Steps, want)
	}
	if old.InputSchema != nil {
		t.Errorf("v1 takes any input, yet has a schema %s", old.InputSchema)
	}
	var schema struct {
		Schema     string                     `json:"$schema"`
		ID         string                     `json:"$id"`
		Type       string                     `json:"type"`
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       map[string]json.RawMessage `json:"$defs"`
		Additional *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(now.InputSchema, &schema); err != nil {
		t.Fatalf("the schema %s: %v", now.InputSchema, err)
	}
	if schema.Type != "object" || !reflect.DeepEqual(schema.Required, []string{"orderId"}) || len(schema.Properties) != 4 ||
		schema.Properties["orderId"] == nil || schema.Defs["line"] == nil || schema.Additional != nil || schema.ID != "" ||
		!strings.Contains(schema.Schema, "2020-12") {
		t.Errorf("the input schema of orders: %s", now.InputSchema)
	}
	if got := decode[client.Pipeline](t, get(e, "/v1/pipelines/kinds")).Versions[0].Steps; !reflect.DeepEqual(got, []client.PipelineStep{
		{Name: "wait", Kind: "sleep"}, {Name: "each", Kind: "map"}, {Name: "one", Kind: "child"}, {Name: "charge", Kind: "step"}}) {
		t.Errorf("kinds: %+v", got)
	}
	greet := decode[client.Pipeline](t, get(e, "/v1/pipelines/greet"))
	if !strings.Contains(string(greet.Versions[0].InputSchema), `"name"`) {
		t.Errorf("greet's schema %s lacks its member", greet.Versions[0].InputSchema)
	}
	// Every tenant sees the same pipelines.
	if other := decode[client.PipelineList](t, get(e, "/v1/pipelines", "X-Tenant-Id", "other")); !reflect.DeepEqual(other, list) {
		t.Error("another tenant sees other pipelines")
	}

	p := wantProblem(t, get(e, "/v1/pipelines/nope"), http.StatusNotFound, "pipeline-not-found")
	sub := wantProblem(t, e.submit("nope", "", `{}`), http.StatusNotFound, "pipeline-not-found")
	if p.Detail != sub.Detail || !strings.Contains(p.Detail, `"nope"`) {
		t.Errorf("404 detail %q; submit says %q", p.Detail, sub.Detail)
	}
	wantProblem(t, get(e, "/v1/pipelines/-bad"), http.StatusBadRequest, "invalid-pipeline-id")
	wantProblem(t, get(e, "/v1/pipelines", "X-Tenant-Id", "bad tenant!"), http.StatusBadRequest, "invalid-tenant")
	wantProblem(t, e.do(req{method: http.MethodPost, path: "/v1/pipelines"}), http.StatusMethodNotAllowed, "method-not-allowed")
	anonymous := newEnv(t, withHTTP(func(o *httpapi.Options) {
		o.TenantFunc = func(*http.Request) (string, error) { return "", httpapi.ErrUnauthenticated }
	}))
	wantProblem(t, get(anonymous, "/v1/pipelines"), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, get(anonymous, "/v1/pipelines/echo"), http.StatusUnauthorized, "unauthorized")
}

// TestStatusShowsTheIdempotencyKey: the status document carries the key
// an execution was submitted under, and leaves it out for one submitted
// without.
func TestStatusShowsTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyed := e.mustSubmit("echo", "order-1001", `{}`)
	if doc := decode[client.Execution](t, get(e, keyed.StatusURL)); doc.IdempotencyKey != "order-1001" {
		t.Errorf("keyed status %+v", doc)
	}
	bare := e.mustSubmit("echo", "", `{}`)
	if w := get(e, bare.StatusURL); strings.Contains(w.Body.String(), "idempotencyKey") {
		t.Errorf("an execution without a key shows one: %s", w.Body)
	}
}

// TestListByIdempotencyKey: GET /v1/executions?idempotencyKey=K answers
// the caller's tenant's live execution of K as a page of one; another
// tenant (or an unused key) finds nothing; combining the key with a
// filter or a cursor, or a malformed key, is 400.
func TestListByIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mine := e.mustSubmit("echo", "order 1001/a", `{}`)
	e.mustSubmit("echo", "order-1002", `{}`)
	theirs := e.mustSubmit("echo", "order 1001/a", `{}`, "X-Tenant-Id", "other")
	e.drive()
	byKey := func(key string, headers ...string) client.ExecutionPage {
		t.Helper()
		return decode[client.ExecutionPage](t, get(e, "/v1/executions?idempotencyKey="+url.QueryEscape(key), headers...))
	}
	page := byKey("order 1001/a")
	if len(page.Executions) != 1 || page.Executions[0].ExecutionID != mine.ExecutionID || page.Executions[0].Status != store.Succeeded ||
		page.Executions[0].IdempotencyKey != "order 1001/a" || page.NextCursor != "" {
		t.Fatalf("by key: %+v", page)
	}
	if p := byKey("order 1001/a", "X-Tenant-Id", "other"); len(p.Executions) != 1 || p.Executions[0].ExecutionID != theirs.ExecutionID {
		t.Errorf("the other tenant's own: %+v", p)
	}
	if p := byKey("order 1001/a", "X-Tenant-Id", "third"); len(p.Executions) != 0 {
		t.Errorf("a tenant that never used the key finds %+v", p)
	}
	w := get(e, "/v1/executions?idempotencyKey=never-used&limit=5")
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"executions":[]}` {
		t.Errorf("an unused key: %d %s", w.Code, w.Body)
	}
	for q, kind := range map[string]string{
		"idempotencyKey=k&pipelineId=echo":                                      "invalid-request",
		"idempotencyKey=k&status=SUCCEEDED":                                     "invalid-request",
		"idempotencyKey=k&cursor=abc":                                           "invalid-request",
		"idempotencyKey=k&limit=0":                                              "invalid-request",
		"idempotencyKey=":                                                       "invalid-idempotency-key",
		"idempotencyKey=a&idempotencyKey=b":                                     "invalid-idempotency-key",
		"idempotencyKey=" + strings.Repeat("k", httpapi.MaxIdempotencyKeyLen+1): "invalid-idempotency-key",
		"idempotencyKey=%01":                                                    "invalid-idempotency-key",
	} {
		wantProblem(t, get(e, "/v1/executions?"+q), http.StatusBadRequest, kind)
	}
}

// TestListByKeyNeedsTheKeyItself: a row whose slot is the key's but
// that was not submitted under it (the slot of a key the server derived
// under SERVER_KEY_ONLY, which no status shows) is not the key's
// execution.
func TestListByKeyNeedsTheKeyItself(t *testing.T) {
	t.Parallel()
	var st store.Store
	e := newEnv(t, func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) { st = d.Store })
	row := store.Execution{TenantID: "default", ExecutionID: engine.ExecutionSlot("default", "K") + ".x1", PipelineID: "echo",
		Status: store.Queued, Version: 1, StepName: "echo", Attempt: 1, IdempotencyKey: "", CreateToken: "x1",
		CreatedAt: epoch, UpdatedAt: epoch, NextDueAt: epoch, ExpiresAt: epoch.Add(time.Hour)}
	if _, _, err := st.CreateOrGet(context.Background(), store.CreateRequest{Execution: row}); err != nil {
		t.Fatal(err)
	}
	if doc := decode[client.Execution](t, get(e, "/v1/executions/"+row.ExecutionID)); doc.ExecutionID != row.ExecutionID {
		t.Fatalf("the row is not there: %+v", doc)
	}
	if p := decode[client.ExecutionPage](t, get(e, "/v1/executions?idempotencyKey=K")); len(p.Executions) != 0 {
		t.Errorf("a row of the key's slot without the key was found: %+v", p)
	}
}
