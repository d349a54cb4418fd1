package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qasync/qasync/examples/payments/provider"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
)

// Limits of a payment.
const (
	// MaxAmountCents is the largest payment: 10,000,000.00.
	MaxAmountCents = 1_000_000_000
	// MaxPayee is the longest payee, in bytes.
	MaxPayee = 120
)

// Payment is a validated row: validate's output.
type Payment struct {
	Line        int    `json:"line"`
	PaymentID   string `json:"paymentId"`
	Payee       string `json:"payee"`
	AmountCents int64  `json:"amountCents"`
	Currency    string `json:"currency"`
}

// Submitted is submit's output, recorded in the effect log: the payment
// with the provider's id for it.
type Submitted struct {
	Payment
	ProviderPaymentID string `json:"providerPaymentId"`
}

// Record is a payment's final record: payments.item's result. It stays
// far below the runtime's inline payload budget (256 bytes), so the
// report reads it from the map's result without a payload read.
type Record struct {
	PaymentID         string `json:"paymentId"`
	ProviderPaymentID string `json:"providerPaymentId"`
	Status            string `json:"status"`
	AmountCents       int64  `json:"amountCents"`
	Currency          string `json:"currency"`
}

var (
	paymentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	currencyPattern  = regexp.MustCompile(`^[A-Z]{3}$`)
)

// validate turns a row into a Payment or rejects it.
func validate(ctx context.Context, info pipeline.StepInfo, r Row) (Payment, error) {
	if err := ctx.Err(); err != nil {
		return Payment{}, context.Cause(ctx)
	}
	p, why := ParseRow(r)
	if why != "" {
		// Messages name the row and the rule, never the row's contents.
		err := reject.Reject(ctx, info, r, pipeline.NonRetryable(CodeInvalidPayment, fmt.Errorf("line %d: %s", r.Line, why)))
		if _, rejected := pipeline.AsRejected(err); rejected {
			logger(info).LogAttrs(ctx, slog.LevelInfo, "payment_rejected", slog.String("event", "payment_rejected"),
				slog.Int("line", r.Line))
		}
		return Payment{}, err
	}
	return p, nil
}

// ParseRow checks a row and returns its Payment, or why it is malformed.
func ParseRow(r Row) (Payment, string) {
	if r.Problem != "" {
		return Payment{}, r.Problem
	}
	if len(r.Fields) != len(Header) {
		return Payment{}, fmt.Sprintf("%d fields, want %d (%s)", len(r.Fields), len(Header), strings.Join(Header, ","))
	}
	p := Payment{Line: r.Line, PaymentID: strings.TrimSpace(r.Fields[0]), Payee: strings.TrimSpace(r.Fields[1]),
		Currency: strings.TrimSpace(r.Fields[3])}
	switch {
	case !paymentIDPattern.MatchString(p.PaymentID):
		return Payment{}, "payment_id must be 1-64 letters, digits, '.', '_' or '-'"
	case p.Payee == "" || len(p.Payee) > MaxPayee || !utf8.ValidString(p.Payee):
		return Payment{}, fmt.Sprintf("payee must be 1 to %d bytes of UTF-8", MaxPayee)
	case !currencyPattern.MatchString(p.Currency):
		return Payment{}, "currency must be an ISO 4217 code such as EUR"
	}
	cents, err := ParseCents(strings.TrimSpace(r.Fields[2]))
	if err != nil {
		return Payment{}, "amount " + err.Error()
	}
	p.AmountCents = cents
	return p, ""
}

// ParseCents reads a positive decimal amount with at most two decimal
// places ("12", "12.5", "12.50") as cents, at most MaxAmountCents.
func ParseCents(s string) (int64, error) {
	units, frac, dot := strings.Cut(s, ".")
	if units == "" || len(frac) > 2 || (dot && frac == "") || strings.Trim(units+frac, "0123456789") != "" {
		return 0, errors.New("must be a decimal number with at most 2 decimal places")
	}
	if len(units) > 12 {
		return 0, fmt.Errorf("must be at most %d.%02d", MaxAmountCents/100, MaxAmountCents%100)
	}
	u, err := strconv.ParseInt(units, 10, 64)
	if err != nil {
		return 0, errors.New("must be a decimal number with at most 2 decimal places")
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac, 10, 64)
		if len(frac) == 1 {
			f *= 10
		}
	}
	cents := u*100 + f
	switch {
	case cents <= 0:
		return 0, errors.New("must be positive")
	case cents > MaxAmountCents:
		return 0, fmt.Errorf("must be at most %d.%02d", MaxAmountCents/100, MaxAmountCents%100)
	}
	return cents, nil
}

// status turns the provider's settlement (the await's completion) into
// the payment's final record.
func status(ctx context.Context, info pipeline.StepInfo, st provider.Settlement) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, context.Cause(ctx)
	}
	switch st.Status {
	case provider.StatusSettled:
	case provider.StatusDeclined:
		return Record{}, pipeline.NonRetryable(CodePaymentDeclined, fmt.Errorf("payments: provider payment %s was declined", st.PaymentID))
	default:
		return Record{}, pipeline.NonRetryable(CodeInvalidSettlement, fmt.Errorf("payments: provider payment %s: unknown status %q", st.PaymentID, st.Status))
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "payment_settled", slog.String("event", "payment_settled"),
		slog.String("payment_id", st.Reference), slog.String("provider_payment_id", st.PaymentID))
	return Record{PaymentID: st.Reference, ProviderPaymentID: st.PaymentID, Status: st.Status,
		AmountCents: st.AmountCents, Currency: st.Currency}, nil
}
