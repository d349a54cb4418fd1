package crashtest_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/internal/dynamo"
)

// TestGateCommandStepChargesOnce is the double-charge test: the worker
// running checkout's capture-payment command step is SIGKILLed after the
// payment provider charged the order and before the outcome was recorded
// or the step committed (the test provider, a ledger file, pauses after
// charging). A second process takes the execution over, finds the effect
// record DISPATCHING by the dead run, reconciles with the provider
// instead of charging again, and the execution succeeds with the payment
// of the one charge.
func TestGateCommandStepChargesOnce(t *testing.T) {
	t.Parallel()
	st := crashtest.NewStack(t)
	ledger := filepath.Join(t.TempDir(), "payments.jsonl")
	ctx := t.Context()
	a := crashtest.Start(t, st.Env(crashtest.GateTimings, crashtest.Settings{"diag.payment-ledger": ledger, "diag.payment-pause": "5m"}), "a")
	const orderID = "cmd-order-1"
	s := mustSubmit(t, a.Addr, checkout.ID, "order-"+orderID, `{"orderId":"`+orderID+`","items":[{"sku":"book","qty":2}],"amountCents":4599}`)

	charges := func() []checkout.Charge {
		t.Helper()
		all, err := checkout.ReadLedger(ledger)
		if err != nil {
			t.Fatal(err)
		}
		var mine []checkout.Charge
		for _, c := range all {
			if c.OrderID == orderID {
				mine = append(mine, c)
			}
		}
		return mine
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(charges()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the order was not charged within 30 s\n%s", a.Tail(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Charged, paused before returning: nothing recorded, nothing committed.
	effects := dynamo.NewEffects(st.Clients.DynamoDB, st.Names.EffectTable, nil)
	recID := command.RecordID("default", checkout.ID+"/"+checkout.StepCapturePayment, orderID)
	rec, err := effects.Get(ctx, recID)
	if err != nil || rec.State != effect.Dispatching {
		t.Fatalf("effect record before the kill: %+v, %v; want DISPATCHING", rec, err)
	}
	if row, err := st.Row(ctx, s.ExecutionID); err != nil || row.StepIndex != 2 || row.Status != "RUNNING" {
		t.Fatalf("row before the kill: %+v, %v; want RUNNING at capture-payment", row, err)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}

	// Another worker, without the pause: it takes the lease over.
	b := crashtest.Start(t, st.Env(crashtest.GateTimings, crashtest.Settings{"diag.payment-ledger": ledger}), "b")
	final := awaitStatus(t, b.Addr, s.ExecutionID, 60*time.Second)
	if final.Status != "SUCCEEDED" {
		t.Fatalf("execution ended %+v, want SUCCEEDED\n%s", final, b.Tail(40))
	}
	got := charges()
	if len(got) != 1 {
		t.Fatalf("order charged %d times, want once: %+v", len(got), got)
	}
	code, body, err := crashtest.GetResult(b.Addr, s.ExecutionID)
	if err != nil || code != http.StatusOK {
		t.Fatalf("result: %d %s %v", code, body, err)
	}
	var res checkout.Result
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.PaymentID != got[0].PaymentID || res.Status != checkout.StatusDeliveryScheduled {
		t.Fatalf("result %+v, want the payment of the one charge %s", res, got[0].PaymentID)
	}
	rec, err = effects.Get(ctx, recID)
	if err != nil || rec.State != effect.Succeeded || rec.Dispatches != 1 || rec.Dispatcher.ExecutionID != s.ExecutionID {
		t.Fatalf("effect record after recovery: %+v, %v; want SUCCEEDED, dispatched once by the dead run", rec, err)
	}
	var recorded checkout.Result
	if err := json.Unmarshal(rec.Output.Data, &recorded); err != nil || recorded.PaymentID != got[0].PaymentID {
		t.Fatalf("recorded output %s (%v), want paymentId %s", rec.Output.Data, err, got[0].PaymentID)
	}
	evs := events(t, b)
	if n := len(crashtest.Filter(evs, "command_reconciled", s.ExecutionID)); n != 1 {
		t.Errorf("%d command_reconciled events on the second worker, want 1", n)
	}
	if n := len(crashtest.Filter(evs, "command_dispatched", s.ExecutionID)); n != 0 {
		t.Errorf("the second worker dispatched the command %d times, want 0", n)
	}
}
