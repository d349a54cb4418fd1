// Package pipelines registers the pipelines this repository ships: what
// `qasync serve` and the worker Lambda serve.
package pipelines

import (
	"os"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/pipelines/diag"
	"github.com/qasync/qasync/shared/config"
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
	// DrillVersions names the definitions of diag.drill to serve (config key
	// diag.drill-versions, test only: rolling deploys): "1" (the default
	// when empty), "2", or both, the last listed taking new submissions.
	DrillVersions string
}

// Registry returns a registry holding the pipelines of this repository:
// checkout.ID always, diag.ID when o.Diag is set.
func Registry(o Options) (*pipeline.Registry, error) {
	ps := []pipeline.Pipeline{checkout.Pipeline()}
	if o.Diag {
		versions := o.DrillVersions
		if versions == "" {
			versions = "1"
		}
		drills, err := diag.Versions(versions)
		if err != nil {
			return nil, err
		}
		ps = append(ps, drills...)
	}
	return pipeline.NewRegistry(ps...)
}

// FromConfig is the registry the process's test-only diag.* keys ask for
// (testkeys.Load, from the environment: diag.enabled,
// diag.drill-versions), with the examples' test knobs applied:
// diag.allow-crash lets diag.drill's crashAttempts exit the process, and
// diag.payment-ledger makes checkout charge a ledger file that outlives
// the process (pausing diag.payment-pause after each charge). The mains
// of this repository (cmd/qasync, functions/*) serve it; its signature is
// what server.WithPipelines and lambdafn.WithPipelines take.
func FromConfig(config.Config) (*pipeline.Registry, error) {
	keys, err := testkeys.Load(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	d := keys.Diag
	diag.AllowCrash(d.AllowCrash)
	if d.PaymentLedger != "" {
		checkout.UsePayments(&checkout.LedgerPayments{Path: d.PaymentLedger, Pause: d.PaymentPause})
	}
	return Registry(Options{Diag: d.Enabled, DrillVersions: d.DrillVersions})
}
