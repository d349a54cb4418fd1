package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
)

// PipelineList is the answer of GET /v1/pipelines: every pipeline the
// server has registered.
type PipelineList struct {
	// Pipelines are sorted by id.
	Pipelines []Pipeline `json:"pipelines"`
}

// Pipeline describes a registered pipeline: GET /v1/pipelines/{id}.
// Pipelines are the server's, not a tenant's: every caller sees the same.
type Pipeline struct {
	// PipelineID is the id a submission names.
	PipelineID string `json:"pipelineId"`
	// CurrentVersion is the version new submissions are bound to (a
	// status document's pipelineVersion).
	CurrentVersion string `json:"currentVersion"`
	// Versions are the definitions the server runs, in registration
	// order: the current one and any draining older ones.
	Versions []PipelineVersion `json:"versions"`
}

// PipelineVersion is one definition of a pipeline.
type PipelineVersion struct {
	// Version identifies the definition: its label (when it has one) and
	// a fingerprint of the label and the ordered step names.
	Version string `json:"version"`
	// Label is the definition's own version label ("v2"), "" for none.
	Label string `json:"label,omitempty"`
	// Draining marks an older definition kept only to finish the
	// executions bound to it.
	Draining bool `json:"draining"`
	// Steps are the definition's steps, in order.
	Steps []PipelineStep `json:"steps"`
	// InputSchema is the JSON Schema (draft 2020-12) of the input the
	// first step decodes, reflected from its Go type; absent when the
	// step takes any input (raw bytes, protobuf, untyped JSON) or is a
	// map (a JSON list), a child or a sleep. It describes the JSON shape
	// only: the step's decoder ignores unknown members and requires none
	// but those the type's jsonschema tags mark required.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Concurrency is the definition's concurrency key, nil when it has
	// none.
	Concurrency *PipelineConcurrency `json:"concurrency,omitempty"`
	// RateLimit is the definition's rate limit, nil when it has none.
	RateLimit *PipelineRateLimit `json:"rateLimit,omitempty"`
	// Priority is the priority of the definition's executions submitted
	// without one: 1 (most urgent) to 5, 3 unless the pipeline declares
	// another (pipeline.Pipeline.Priority).
	Priority int `json:"priority"`
}

// PipelineRateLimit is a definition's rate limit: its steps (Steps, or
// every step) start at most Burst at once, then Rate per Per, per key
// (taken from the input), shared by all workers; a step waits for its
// turn (QUEUED, rateLimitedUntil) without counting an attempt.
type PipelineRateLimit struct {
	// Name names the limit (the downstream); the pipelines of a tenant
	// whose limits have the same name share its buckets.
	Name string `json:"name"`
	// Rate starts per Per (a Go duration: "1s").
	Rate int    `json:"rate"`
	Per  string `json:"per"`
	// Burst is how many starts may come at once after a quiet while.
	Burst int `json:"burst"`
	// Keyed says whether each key of the input has its own bucket (false:
	// one bucket for all executions).
	Keyed bool `json:"keyed"`
	// Steps are the limited steps; empty: every step that runs code.
	Steps []string `json:"steps,omitempty"`
}

// PipelineConcurrency is a definition's concurrency key: at most Limit
// executions of one key (taken from the input) hold a slot at once, from
// their first step's claim until they end; the others wait as
// WAITING_KEY and start in rank order (submission order aged by
// priority).
type PipelineConcurrency struct {
	// Name is the key's name ("customerId").
	Name string `json:"name"`
	// Limit is how many executions of one key run at once (1 to 100).
	Limit int `json:"limit"`
}

// PipelineStep is one step of a pipeline definition.
type PipelineStep struct {
	// Name is the step's name (a status document's stepName).
	Name string `json:"name"`
	// Kind is how the runtime runs it: "step" (a function: also await,
	// command and remote steps), "sleep", "map" or "child".
	Kind string `json:"kind"`
}

// Pipelines returns every pipeline the server has registered, sorted by
// id.
func (c *Client) Pipelines(ctx context.Context) ([]Pipeline, error) {
	var l PipelineList
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/pipelines"}, nil, &l)
	return l.Pipelines, err
}

// Pipeline returns one registered pipeline. An unknown id is a 404
// *Error (IsNotFound) of kind pipeline-not-found.
func (c *Client) Pipeline(ctx context.Context, pipelineID string) (Pipeline, error) {
	if pipelineID == "" {
		return Pipeline{}, missing("the pipeline id")
	}
	var p Pipeline
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/pipelines/" + url.PathEscape(pipelineID)}, nil, &p)
	return p, err
}
