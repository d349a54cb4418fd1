package checkout_test

import (
	"path/filepath"
	"testing"

	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// runWith feeds in through every step of a pipeline charging p, with one
// effect log shared by the runs (as one runtime's).
func runWith(t *testing.T, p checkout.Payments, fx effect.Log, execID string, in payload.Payload) checkout.Result {
	t.Helper()
	pl := checkout.New(p)
	for i, s := range pl.Steps {
		info := stepInfo(i, nil)
		info.ExecutionID, info.Effects = execID, fx
		out, err := s.Run(t.Context(), info, in)
		if err != nil {
			t.Fatalf("step %s: %v", s.Name, err)
		}
		in = out
	}
	var r checkout.Result
	if err := in.DecodeJSON(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCaptureChargesOncePerOrder: two executions of the same order (a
// duplicate submission under another key) charge it once and report the
// same payment.
func TestCaptureChargesOncePerOrder(t *testing.T) {
	t.Parallel()
	pay, fx := checkout.NewFakePayments(), pipelinetest.Effects()
	a := runWith(t, pay, fx, "exec-a", mustJSON(t, order("ord-1")))
	b := runWith(t, pay, fx, "exec-b", mustJSON(t, order("ord-1")))
	if a != b || pay.Charges("ord-1") != 1 {
		t.Fatalf("results %+v / %+v after %d charges", a, b, pay.Charges("ord-1"))
	}
}

func TestLedgerPayments(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l := &checkout.LedgerPayments{Path: path}
	ctx := t.Context()
	if _, found, err := l.Find(ctx, "ord-1"); found || err != nil {
		t.Fatalf("Find before any charge: %v %v", found, err)
	}
	first, err := l.Charge(ctx, "ord-1", 100, "k")
	if err != nil {
		t.Fatal(err)
	}
	if id, found, err := l.Find(ctx, "ord-1"); !found || err != nil || id != first {
		t.Fatalf("Find: %s %v %v, want %s", id, found, err, first)
	}
	second, err := l.Charge(ctx, "ord-1", 100, "k")
	if err != nil || second == first {
		t.Fatalf("a second charge got id %s (first %s), %v", second, first, err)
	}
	// The first charge's id is FakePayments' id: results do not depend on the provider.
	if want := runWith(t, checkout.NewFakePayments(), pipelinetest.Effects(), "e", mustJSON(t, order("ord-1"))).PaymentID; first != want {
		t.Fatalf("ledger id %s, fake id %s", first, want)
	}
	charges, err := checkout.ReadLedger(path)
	if err != nil || len(charges) != 2 || charges[0].OrderID != "ord-1" || charges[1].PaymentID != second {
		t.Fatalf("ledger %+v, %v", charges, err)
	}
}
