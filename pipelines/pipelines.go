// Package pipelines registers the pipelines this repository ships: what
// `qasync serve` and the worker Lambda serve.
package pipelines

import (
	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/pipelines/diag"
	"github.com/qasync/qasync/shared/pipeline"
)

// Registry returns a registry holding every pipeline in this repository:
// checkout.ID and diag.ID.
func Registry() (*pipeline.Registry, error) {
	return pipeline.NewRegistry(checkout.Pipeline(), diag.Pipeline())
}
