// Package pipelines registers the pipelines this repository ships: what
// `qasync serve` and the worker Lambda serve.
package pipelines

import (
	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/pipelines/diag"
	"github.com/qasync/qasync/shared/pipeline"
)

// Options choose the pipelines Registry holds beyond the ones every
// deployment serves.
type Options struct {
	// Diag adds the diag.drill fault drill (config key
	// pipeline.orchestrator.diag.enabled). It is for local and dev use:
	// any caller allowed to submit can make it sleep and return a large
	// result, so production stages leave it off, and a submit of diag.drill
	// there is answered 404 like any unknown pipeline.
	Diag bool
}

// Registry returns a registry holding the pipelines of this repository:
// checkout.ID always, diag.ID when o.Diag is set.
func Registry(o Options) (*pipeline.Registry, error) {
	ps := []pipeline.Pipeline{checkout.Pipeline()}
	if o.Diag {
		ps = append(ps, diag.Pipeline())
	}
	return pipeline.NewRegistry(ps...)
}
