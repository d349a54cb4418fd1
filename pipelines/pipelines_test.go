package pipelines_test

import (
	"slices"
	"testing"

	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/pipelines/diag"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	r, err := pipelines.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.IDs(), []string{checkout.ID, diag.ID}; !slices.Equal(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
	for _, id := range r.IDs() {
		if p, ok := r.Get(id); !ok || len(p.Steps) == 0 {
			t.Errorf("pipeline %s missing or empty", id)
		}
	}
}
