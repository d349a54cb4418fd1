package client_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// TestPipelinesAgainstTheServer: Pipelines lists the server's pipelines
// sorted by id; Pipeline returns one, its current version the one
// executions are bound to, its steps named and kinded and its typed
// first step's input schema; an unknown id is IsNotFound
// (pipeline-not-found), an empty one refused before any request.
func TestPipelinesAgainstTheServer(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	ps, err := c.Pipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.PipelineID)
	}
	for _, id := range []string{clitest.PipelineOK, clitest.PipelineFail, clitest.PipelineWait, clitest.PipelineRetry, clitest.PipelineMap} {
		if !slices.Contains(ids, id) {
			t.Errorf("Pipelines lacks %s: %q", id, ids)
		}
	}
	if !slices.IsSorted(ids) {
		t.Errorf("Pipelines not sorted by id: %q", ids)
	}
	ok, err := c.Pipeline(ctx, clitest.PipelineOK)
	if err != nil {
		t.Fatal(err)
	}
	done := settle(t, c, clitest.PipelineOK, store.Succeeded)
	if ok.CurrentVersion != done.PipelineVersion || len(ok.Versions) != 1 || ok.Versions[0].Version != done.PipelineVersion {
		t.Errorf("pipeline %+v; an execution is bound to %s", ok, done.PipelineVersion)
	}
	v := ok.Versions[0]
	if !slices.Equal(v.Steps, []client.PipelineStep{{Name: "prepare", Kind: "step"}, {Name: "finish", Kind: "step"}}) || len(v.InputSchema) == 0 {
		t.Errorf("version %+v (input schema %s)", v, v.InputSchema)
	}
	fan, err := c.Pipeline(ctx, clitest.PipelineMap)
	if err != nil || fan.Versions[0].Steps[0].Kind != "map" || fan.Versions[0].InputSchema != nil {
		t.Errorf("the map pipeline: %+v, %v", fan, err)
	}
	_, err = c.Pipeline(ctx, "no.such.pipeline")
	if !client.IsNotFound(err) || problemOf(t, err).Problem.Kind() != "pipeline-not-found" {
		t.Errorf("an unknown pipeline: %v", err)
	}
	if _, err := c.Pipeline(ctx, ""); !errors.Is(err, client.ErrMissingArgument) {
		t.Errorf("an empty id: %v", err)
	}
}

// TestListByIdempotencyKey: the status document shows the key an
// execution was submitted under; List with IdempotencyKey finds that
// execution for its tenant and nothing for another; the key with another
// filter is IsBadRequest.
func TestListByIdempotencyKey(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	c := newClient(t, tg)
	ctx := ctxOf(t)
	// A key with characters a query string must escape.
	sub, err := c.Submit(ctx, client.SubmitRequest{PipelineID: clitest.PipelineOK, IdempotencyKey: "order 1001/a?&b=c#d", Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, sub.ExecutionID)
	if err != nil || st.IdempotencyKey != "order 1001/a?&b=c#d" {
		t.Fatalf("status %+v, %v: not the idempotency key", st, err)
	}
	page, err := c.List(ctx, client.ListQuery{IdempotencyKey: st.IdempotencyKey})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].ExecutionID != sub.ExecutionID {
		t.Fatalf("by key: %+v, %v", page, err)
	}
	other, err := client.New(tg.URL, client.WithTenant(tenantOf(t)+"-other"))
	if err != nil {
		t.Fatal(err)
	}
	if page, err := other.List(ctx, client.ListQuery{IdempotencyKey: st.IdempotencyKey}); err != nil || len(page.Executions) != 0 {
		t.Errorf("another tenant by key: %+v, %v", page, err)
	}
	if _, err := c.List(ctx, client.ListQuery{IdempotencyKey: st.IdempotencyKey, PipelineID: clitest.PipelineOK}); !client.IsBadRequest(err) {
		t.Errorf("the key with a pipeline filter: %v, want 400", err)
	}
}
