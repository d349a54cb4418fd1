package checkout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Payments is the payment provider capture-payment charges.
type Payments interface {
	// Charge captures amountCents for the order and returns the payment id.
	// idempotencyKey is stable across retries of the step.
	Charge(ctx context.Context, orderID string, amountCents int64, idempotencyKey string) (paymentID string, err error)
	// Find returns the payment of an earlier charge of the order, if any:
	// how a command step reconciles a charge whose outcome it did not
	// record.
	Find(ctx context.Context, orderID string) (paymentID string, found bool, err error)
}

// FakePayments is the default payment provider: in-process and
// deterministic (an order's payment id derives from its id alone). It
// counts charges per order.
type FakePayments struct {
	mu      sync.Mutex
	charges map[string]int
}

// NewFakePayments returns a provider that has charged nothing.
func NewFakePayments() *FakePayments { return &FakePayments{charges: map[string]int{}} }

// Charge implements Payments.
func (f *FakePayments) Charge(ctx context.Context, orderID string, _ int64, _ string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", context.Cause(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charges[orderID]++
	return derive("pay-", "payment", orderID), nil
}

// Find implements Payments: charges made by this process only.
func (f *FakePayments) Find(_ context.Context, orderID string) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.charges[orderID] == 0 {
		return "", false, nil
	}
	return derive("pay-", "payment", orderID), true, nil
}

// Charges reports how often the order was charged.
func (f *FakePayments) Charges(orderID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.charges[orderID]
}

// Charge is one line of a payment ledger.
type Charge struct {
	OrderID        string    `json:"orderId"`
	PaymentID      string    `json:"paymentId"`
	AmountCents    int64     `json:"amountCents"`
	IdempotencyKey string    `json:"idempotencyKey"`
	PID            int       `json:"pid"`
	At             time.Time `json:"at"`
}

// LedgerPayments is a test payment provider whose charges outlive the
// process: each charge is appended (and synced) as a JSON line to a file,
// so that a test can count an order's charges across killed and restarted
// processes. The first charge of an order gets the same id as
// FakePayments; a second one gets another id (pay-...#2 derived), so a
// double charge is visible in the result too. After each charge it waits
// Pause (or until the step's context ends) before returning: the window in
// which a test kills the process. Enabled in qasync serve by the test-only
// key diag.payment-ledger (and diag.payment-pause).
type LedgerPayments struct {
	Path  string
	Pause time.Duration

	mu sync.Mutex
}

// Charge implements Payments.
func (l *LedgerPayments) Charge(ctx context.Context, orderID string, amountCents int64, idempotencyKey string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", context.Cause(ctx)
	}
	l.mu.Lock()
	prior, err := ReadLedger(l.Path)
	if err != nil {
		l.mu.Unlock()
		return "", err
	}
	n := 1
	for _, c := range prior {
		if c.OrderID == orderID {
			n++
		}
	}
	id := derive("pay-", "payment", orderID)
	if n > 1 {
		id = derive("pay-", "payment", orderID+"#"+strconv.Itoa(n))
	}
	err = l.append(Charge{OrderID: orderID, PaymentID: id, AmountCents: amountCents, IdempotencyKey: idempotencyKey, PID: os.Getpid(), At: time.Now().UTC()})
	l.mu.Unlock()
	if err != nil {
		return "", err
	}
	if l.Pause > 0 {
		t := time.NewTimer(l.Pause)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return id, nil
}

func (l *LedgerPayments) append(c Charge) error {
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(l.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("checkout: payment ledger: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("checkout: payment ledger: %w", err)
	}
	return f.Sync()
}

// Find implements Payments: the first charge of the order in the ledger.
func (l *LedgerPayments) Find(_ context.Context, orderID string) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	charges, err := ReadLedger(l.Path)
	if err != nil {
		return "", false, err
	}
	for _, c := range charges {
		if c.OrderID == orderID {
			return c.PaymentID, true, nil
		}
	}
	return "", false, nil
}

// ReadLedger reads every charge of a payment ledger (none when the file
// does not exist); a torn last line (a process killed mid-write) is
// skipped.
func ReadLedger(path string) ([]Charge, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkout: payment ledger: %w", err)
	}
	var out []Charge
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var c Charge
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// payments is the provider Pipeline uses; see UsePayments.
var payments atomic.Pointer[paymentsBox]

type paymentsBox struct{ p Payments }

var defaultPayments = NewFakePayments()

// UsePayments makes p the provider of pipelines built by Pipeline (nil
// restores the in-process FakePayments). qasync serve calls it with a
// LedgerPayments when diag.payment-ledger is set.
func UsePayments(p Payments) {
	if p == nil {
		payments.Store(nil)
		return
	}
	payments.Store(&paymentsBox{p})
}

func currentPayments() Payments {
	if b := payments.Load(); b != nil {
		return b.p
	}
	return defaultPayments
}
