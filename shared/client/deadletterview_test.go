package client_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// TestDeadLettersTellTheCurrentStatus: each record says what its
// execution is now and whether it is outstanding; OutstandingOnly keeps
// those; DeadLetterCounts counts by code. An execution re-driven into a
// second dead letter has its older record settled, its newer one
// outstanding.
func TestDeadLettersTellTheCurrentStatus(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	c := newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	ctx := ctxOf(t)
	a := settle(t, c, clitest.PipelineFail, store.DLQ)
	b := settle(t, c, clitest.PipelineFail, store.DLQ)
	if _, err := c.Redrive(ctx, b.ExecutionID, client.RedriveRequest{Reason: "once more"}); err != nil {
		t.Fatal(err)
	}
	q := client.DeadLetterQuery{PipelineID: clitest.PipelineFail}
	var all client.DeadLetterPage
	for {
		var err error
		if all, err = c.DeadLetters(ctx, q); err != nil {
			t.Fatal(err)
		}
		// Three records, each execution marked DLQ (the mark follows
		// the record's publication).
		if len(all.DeadLetters) == 3 && !slices.ContainsFunc(all.DeadLetters, func(d client.DeadLetter) bool { return d.CurrentStatus != store.DLQ }) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the re-driven execution's second dead letter never came (or never marked DLQ): %+v", all.DeadLetters)
		case <-time.After(10 * time.Millisecond):
		}
	}
	outstanding := map[string]bool{}
	for _, d := range all.DeadLetters {
		if d.CurrentStatus != store.DLQ || d.CurrentVersion == 0 {
			t.Fatalf("record %+v: want its execution's current DLQ row", d)
		}
		outstanding[d.TransitionKey] = d.Outstanding
	}
	want := map[string]bool{a.ExecutionID + ":0:1": true, b.ExecutionID + ":0:1": false, b.ExecutionID + ":0:2": true}
	if len(outstanding) != 3 || outstanding[a.ExecutionID+":0:1"] != true || outstanding[b.ExecutionID+":0:1"] != false || outstanding[b.ExecutionID+":0:2"] != true {
		t.Fatalf("outstanding by transition %v, want %v", outstanding, want)
	}
	q.OutstandingOnly = true
	only, err := c.DeadLetters(ctx, q)
	if err != nil || len(only.DeadLetters) != 2 || !only.DeadLetters[0].Outstanding || !only.DeadLetters[1].Outstanding {
		t.Fatalf("outstanding only: %+v, %v", only.DeadLetters, err)
	}
	n, err := c.DeadLetterCounts(ctx, clitest.PipelineFail)
	if err != nil || n.ByCode[clitest.ErrorCodeFail] != 3 || n.OutstandingByCode[clitest.ErrorCodeFail] != 2 || n.Scanned != 3 || !n.Complete {
		t.Fatalf("counts %+v, %v", n, err)
	}
	if n, err := c.DeadLetterCounts(ctx, clitest.PipelineOK); err != nil || len(n.ByCode) != 0 || n.Scanned != 0 {
		t.Fatalf("counts of a pipeline without dead letters %+v, %v", n, err)
	}
}

// TestInputAgainstTheServer: an operator reads an execution's input, its
// bytes and the type it was submitted with; without the admin token it is
// refused.
func TestInputAgainstTheServer(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, c := newClient(t, tg), newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	ctx := ctxOf(t)
	body := []byte(`{"order":"A-17"}`)
	sub, err := anon.Submit(ctx, client.SubmitRequest{PipelineID: clitest.PipelineOK, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Input(ctx, sub.ExecutionID)
	if err != nil || string(in.Data) != string(body) || in.ContentType != "application/json" {
		t.Fatalf("Input = %q (%s), %v", in.Data, in.ContentType, err)
	}
	if _, err := anon.Input(ctx, sub.ExecutionID); !client.IsUnauthorized(err) {
		t.Fatalf("input without the admin token: %v", err)
	}
	if _, err := c.Input(ctx, "no-such-execution"); !client.IsNotFound(err) {
		t.Fatalf("input of an unknown execution: %v", err)
	}
	if _, err := c.Input(ctx, ""); !errors.Is(err, client.ErrMissingArgument) {
		t.Fatalf("input without an id: %v", err)
	}
}
