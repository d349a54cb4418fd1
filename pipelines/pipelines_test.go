package pipelines_test

import (
	"slices"
	"testing"

	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/pipelines/diag"
)

// TestRegistryServesDiagOnlyWhenEnabled: checkout is always registered;
// diag.drill only with Options.Diag (config key diag.enabled), so that a
// deployment that leaves it off answers its submits 404.
func TestRegistryServesDiagOnlyWhenEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts pipelines.Options
		want []string
	}{
		{pipelines.Options{}, []string{checkout.ID}},
		{pipelines.Options{Diag: true}, []string{checkout.ID, diag.ID}},
	} {
		r, err := pipelines.Registry(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.IDs(); !slices.Equal(got, tc.want) {
			t.Fatalf("%+v: ids %v, want %v", tc.opts, got, tc.want)
		}
		for _, id := range r.IDs() {
			if p, ok := r.Get(id); !ok || len(p.Steps) == 0 {
				t.Errorf("pipeline %s missing or empty", id)
			}
		}
	}
}
