package httpapi

// The pipeline catalog: GET /v1/pipelines and GET /v1/pipelines/{id},
// and the look-up of an execution by its idempotency key.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"

	"github.com/invopop/jsonschema"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// pipelines handles GET /v1/pipelines. Pipelines are the server's, not a
// tenant's, but the route asks for the caller's identity as status does.
func (a *api) pipelines(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.tenant(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, client.PipelineList{Pipelines: a.catalog()})
}

// pipeline handles GET /v1/pipelines/{pipelineId}.
func (a *api) pipeline(w http.ResponseWriter, r *http.Request) {
	pid, ok := pipelinePath(w, r)
	if !ok {
		return
	}
	if _, ok := a.tenant(w, r); !ok {
		return
	}
	for _, p := range a.catalog() {
		if p.PipelineID == pid {
			writeJSON(w, http.StatusOK, p)
			return
		}
	}
	writeProblem(w, pipelineNotFound(pid))
}

// catalog describes every pipeline of reg, sorted by id (the registry is
// read-only: New builds this once, on first use).
func catalog(reg *pipeline.Registry, log *slog.Logger) []client.Pipeline {
	out := []client.Pipeline{}
	for _, id := range reg.IDs() {
		cur, _ := reg.Get(id)
		doc := client.Pipeline{PipelineID: id, CurrentVersion: cur.VersionID()}
		for _, v := range reg.Versions(id) {
			p, _ := reg.Version(id, v)
			ver := client.PipelineVersion{Version: v, Label: p.Version, Draining: p.Draining, Steps: make([]client.PipelineStep, len(p.Steps)),
				Priority: pipeline.PriorityOf(p, 0)}
			for i := range p.Steps {
				ver.Steps[i] = client.PipelineStep{Name: p.Steps[i].Name, Kind: p.Steps[i].Kind()}
			}
			if c := p.Concurrency; c != nil {
				ver.Concurrency = &client.PipelineConcurrency{Name: c.Name, Limit: c.Limit}
			}
			if l := p.RateLimit; l != nil {
				ver.RateLimit = &client.PipelineRateLimit{Name: l.Name, Rate: l.N, Per: l.Per.String(), Burst: l.Burst,
					Keyed: l.Key != nil, Steps: l.Steps}
			}
			if t := p.Steps[0].InputType(); t != nil {
				s, err := inputSchema(t)
				if err != nil {
					log.LogAttrs(context.Background(), slog.LevelWarn, "pipeline_schema_failed", slog.String("event", "pipeline_schema_failed"),
						slog.String("pipeline", id), slog.String("pipeline_version", v), slog.String("error", err.Error()))
				}
				ver.InputSchema = s
			}
			doc.Versions = append(doc.Versions, ver)
		}
		out = append(out, doc)
	}
	return out
}

// inputSchema is the JSON Schema of a step input type t, as the step's
// JSON decoder (encoding/json) reads it: members it does not know are
// ignored (additionalProperties allowed), and none is required but those
// tagged `jsonschema:"required"`. Named types are $defs of the schema,
// the type itself is inline; the schema has no $id.
func inputSchema(t reflect.Type) (b json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil { // a type the reflector cannot describe
			b, err = nil, fmt.Errorf("httpapi: input schema of %s: %v", t, v)
		}
	}()
	r := jsonschema.Reflector{Anonymous: true, ExpandedStruct: true, AllowAdditionalProperties: true, RequiredFromJSONSchemaTags: true}
	return json.Marshal(r.ReflectFromType(t))
}

// executionByKey answers GET /v1/executions?idempotencyKey=K: the live
// execution tenant submitted under K, as a page of one (or none). The
// execution's slot derives from the tenant and the key
// (engine.ExecutionSlot) and an id without an incarnation names its
// slot, so this is one read and no index. Any other filter, or a cursor,
// is refused: the key names at most one execution.
func (a *api) executionByKey(w http.ResponseWriter, r *http.Request, tenant string, q url.Values) {
	for _, other := range []string{"pipelineId", "status", "cursor"} {
		if q.Has(other) {
			writeProblem(w, kindInvalidRequest.problem(fmt.Sprintf("idempotencyKey cannot be combined with %s: it names at most one execution.", other)))
			return
		}
	}
	if _, _, ok := listParams(w, q, store.MaxListLimit); !ok {
		return
	}
	key := q.Get("idempotencyKey")
	detail := checkKey(key, "idempotencyKey")
	if len(q["idempotencyKey"]) > 1 {
		detail = "idempotencyKey must be given once."
	}
	if detail != "" {
		writeProblem(w, kindInvalidKey.problem(detail))
		return
	}
	page := client.ExecutionPage{Executions: []client.Execution{}}
	e, err := a.rt.Status(r.Context(), store.Key{TenantID: tenant, ExecutionID: engine.ExecutionSlot(tenant, key)})
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		a.fail(w, r, err)
		return
	case e.IdempotencyKey == key: // not a slot the server derived (SERVER_KEY_ONLY) from another key
		page.Executions = append(page.Executions, statusDocument(&e))
	}
	writeJSON(w, http.StatusOK, page)
}
