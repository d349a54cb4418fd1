package crashtest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	s := mustSubmit(t, a.Addr, crashtest.CheckoutID, "order-"+orderID, `{"orderId":"`+orderID+`","items":[{"sku":"book","qty":2}],"amountCents":4599}`)

	charges := func() []charge {
		t.Helper()
		return readLedger(t, ledger, orderID)
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
	recID := command.RecordID("default", crashtest.CheckoutID+"/"+crashtest.CheckoutStepCapturePayment, orderID)
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
	var res crashtest.CheckoutResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.PaymentID != got[0].PaymentID || res.Status != crashtest.CheckoutStatusDeliveryScheduled {
		t.Fatalf("result %+v, want the payment of the one charge %s", res, got[0].PaymentID)
	}
	rec, err = effects.Get(ctx, recID)
	if err != nil || rec.State != effect.Succeeded || rec.Dispatches != 1 || rec.Dispatcher.ExecutionID != s.ExecutionID {
		t.Fatalf("effect record after recovery: %+v, %v; want SUCCEEDED, dispatched once by the dead run", rec, err)
	}
	var recorded crashtest.CheckoutResult
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

// charge is one line of the payment ledger (checkout.Charge, the lines
// serve's checkout appends with diag.payment-ledger set).
type charge struct {
	OrderID   string `json:"orderId"`
	PaymentID string `json:"paymentId"`
	PID       int    `json:"pid"`
}

// readLedger returns the ledger's charges of orderID (none while the file
// does not exist); a torn last line (a process killed mid-write) is
// skipped.
func readLedger(t *testing.T, path, orderID string) []charge {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []charge
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var c charge
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.OrderID == orderID {
			out = append(out, c)
		}
	}
	return out
}
