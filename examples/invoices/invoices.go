// Package invoices is an example service built on qasync, outside the
// library: one pipeline, invoices.issue, that takes an invoice request to
// a rendered invoice in four steps, each committed on its own:
//
//	validate -> price -> issue -> render
//
// The steps:
//
//   - validate checks the request and refuses a malformed one at once
//     (non-retryable code invalid_invoice: the execution is dead-lettered,
//     not retried).
//   - price computes each line's total, the subtotal, the tax and the
//     total, in integer cents.
//   - issue is a command step (package command): it asks the issuing
//     system (an Issuer) for the invoice number. Its command id is the
//     client's request id, so an invoice request is issued once per
//     tenant, however often the step runs (a retry, a takeover after a
//     crash, the same request submitted again as a new execution): a
//     re-run returns the recorded number, and a run that died between
//     issuing and recording asks the Issuer (Reconcile) instead of issuing
//     again.
//   - render writes the invoice document.
//
// Every step's output depends on its input and tenant alone, so a replayed step
// yields the same output. The service's mains are one line each: the five
// Lambda functions (functions/*) over lambdafn.Main, the local server
// (cmd/local) over server.Main; infra/ deploys it with qasync's CDK stack.
package invoices

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/pipeline"
)

// ID is the pipeline id: submit to POST /v1/pipelines/invoices.issue/executions.
const ID = "invoices.issue"

// Step names, in order.
const (
	StepValidate = "validate"
	StepPrice    = "price"
	StepIssue    = "issue"
	StepRender   = "render"
)

// CodeInvalidInvoice is the non-retryable error code of a request that
// fails validation.
const CodeInvalidInvoice = "invalid_invoice"

// Limits of a request. They keep the issue step's recorded output (the
// priced invoice) far below the effect log's 64 KiB and the totals far
// below int64's range.
const (
	MaxLines          = 50
	MaxDescription    = 120
	MaxQuantity       = 10_000
	MaxUnitPriceCents = 100_000_000
	MaxTaxBasisPoints = 10_000
)

// Request is the pipeline's input: an invoice request.
type Request struct {
	// RequestID is the client's id of the request: one invoice per
	// request id and tenant (the issue step's command id).
	RequestID  string `json:"requestId"`
	CustomerID string `json:"customerId"`
	// Currency is an ISO 4217 code, e.g. EUR.
	Currency string `json:"currency"`
	// IssueDate is the invoice date, YYYY-MM-DD.
	IssueDate string `json:"issueDate"`
	// TaxRateBasisPoints is the tax rate in hundredths of a percent
	// (2000 = 20 %).
	TaxRateBasisPoints int64  `json:"taxRateBasisPoints"`
	Lines              []Line `json:"lines"`
}

// Line is one line of a request.
type Line struct {
	Description    string `json:"description"`
	Quantity       int64  `json:"quantity"`
	UnitPriceCents int64  `json:"unitPriceCents"`
}

// PricedLine is a line with its total.
type PricedLine struct {
	Line
	TotalCents int64 `json:"totalCents"`
}

// Priced is the price step's output: the request with its amounts.
type Priced struct {
	RequestID          string       `json:"requestId"`
	CustomerID         string       `json:"customerId"`
	Currency           string       `json:"currency"`
	IssueDate          string       `json:"issueDate"`
	TaxRateBasisPoints int64        `json:"taxRateBasisPoints"`
	Lines              []PricedLine `json:"lines"`
	SubtotalCents      int64        `json:"subtotalCents"`
	TaxCents           int64        `json:"taxCents"`
	TotalCents         int64        `json:"totalCents"`
}

// Issued is the issue step's output, recorded in the effect log: the
// priced invoice with its number.
type Issued struct {
	Number string `json:"number"`
	Priced
}

// Invoice is the pipeline's result: the issued invoice and its document.
type Invoice struct {
	Issued
	// Document is the invoice as plain text.
	Document string `json:"document"`
}

// Issuer is the system of record that issues invoice numbers (a billing
// or ERP system). Issuing is the side effect of the issue step. An error
// is retried with the runtime's retry policy unless it is
// pipeline.NonRetryable.
type Issuer interface {
	// Issue issues the invoice of p for tenant and returns its number.
	// key is stable across every attempt of the step
	// (pipeline.StepInfo.IdempotencyKey): a real system is given it so
	// that it refuses a repeat on its own.
	Issue(ctx context.Context, tenant string, p Priced, key string) (number string, err error)
	// Find returns the number issued for tenant's request id, or
	// found=false when none was: what the issue step asks when a run died
	// after Issue and before recording its outcome.
	Find(ctx context.Context, tenant, requestID string) (number string, found bool, err error)
}

// Registry returns the registry the service's mains serve: the
// invoices.issue pipeline on a LocalIssuer. The definition is fixed, so
// building it cannot fail (a test checks it); it panics if it ever does.
func Registry() *pipeline.Registry {
	return pipeline.MustRegistry(New(NewLocalIssuer()))
}

// New returns the invoices.issue pipeline issuing with issuer.
func New(issuer Issuer) pipeline.Pipeline {
	issue := func(ctx context.Context, info pipeline.StepInfo, p Priced) (Issued, error) {
		number, err := issuer.Issue(ctx, info.TenantID, p, info.IdempotencyKey)
		if err != nil {
			return Issued{}, err
		}
		logger(info).LogAttrs(ctx, slog.LevelInfo, "invoice_issued", slog.String("event", "invoice_issued"),
			slog.String("request_id", p.RequestID), slog.String("invoice_number", number))
		return Issued{Number: number, Priced: p}, nil
	}

	reconcile := func(ctx context.Context, info pipeline.StepInfo, p Priced) (Issued, bool, error) {
		number, found, err := issuer.Find(ctx, info.TenantID, p.RequestID)
		if err != nil {
			return Issued{}, false, err
		}
		if found {
			logger(info).LogAttrs(ctx, slog.LevelWarn, "invoice_reconciled", slog.String("event", "invoice_reconciled"),
				slog.String("request_id", p.RequestID), slog.String("invoice_number", number))
		}
		return Issued{Number: number, Priced: p}, found, nil
	}
	return pipeline.Pipeline{ID: ID, Steps: []pipeline.Step{
		pipeline.NewStep(StepValidate, validate),
		pipeline.NewStep(StepPrice, price),
		command.Step(StepIssue, command.Spec[Priced, Issued]{
			ID:        func(p Priced) string { return p.RequestID },
			Reconcile: reconcile,
		}, issue),
		pipeline.NewStep(StepRender, render),
	}}
}

var (
	idPattern       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
)

func validate(ctx context.Context, info pipeline.StepInfo, r Request) (Request, error) {
	if err := ctx.Err(); err != nil {
		return Request{}, context.Cause(ctx)
	}
	// Messages name the offending field; they never quote the payload.
	invalid := func(format string, args ...any) (Request, error) {
		return Request{}, pipeline.NonRetryable(CodeInvalidInvoice, fmt.Errorf(format, args...))
	}
	switch {
	case !idPattern.MatchString(r.RequestID):
		return invalid("requestId must be 1-64 letters, digits, '.', '_' or '-'")
	case !idPattern.MatchString(r.CustomerID):
		return invalid("customerId must be 1-64 letters, digits, '.', '_' or '-'")
	case !currencyPattern.MatchString(r.Currency):
		return invalid("currency must be an ISO 4217 code such as EUR")
	case r.TaxRateBasisPoints < 0 || r.TaxRateBasisPoints > MaxTaxBasisPoints:
		return invalid("taxRateBasisPoints must be between 0 and %d", MaxTaxBasisPoints)
	case len(r.Lines) == 0 || len(r.Lines) > MaxLines:
		return invalid("lines must hold 1 to %d lines", MaxLines)
	}
	if _, err := time.Parse(time.DateOnly, r.IssueDate); err != nil {
		return invalid("issueDate must be a date YYYY-MM-DD")
	}
	for i, l := range r.Lines {
		switch {
		case strings.TrimSpace(l.Description) == "" || len(l.Description) > MaxDescription:
			return invalid("lines[%d].description must be 1 to %d bytes", i, MaxDescription)
		case l.Quantity < 1 || l.Quantity > MaxQuantity:
			return invalid("lines[%d].quantity must be between 1 and %d", i, MaxQuantity)
		case l.UnitPriceCents < 0 || l.UnitPriceCents > MaxUnitPriceCents:
			return invalid("lines[%d].unitPriceCents must be between 0 and %d", i, MaxUnitPriceCents)
		}
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "invoice_validated", slog.String("event", "invoice_validated"),
		slog.String("request_id", r.RequestID), slog.Int("lines", len(r.Lines)))
	return r, nil
}

func price(ctx context.Context, info pipeline.StepInfo, r Request) (Priced, error) {
	if err := ctx.Err(); err != nil {
		return Priced{}, context.Cause(ctx)
	}
	p := Priced{RequestID: r.RequestID, CustomerID: r.CustomerID, Currency: r.Currency, IssueDate: r.IssueDate,
		TaxRateBasisPoints: r.TaxRateBasisPoints, Lines: make([]PricedLine, len(r.Lines))}
	for i, l := range r.Lines {
		p.Lines[i] = PricedLine{Line: l, TotalCents: l.Quantity * l.UnitPriceCents}
		p.SubtotalCents += p.Lines[i].TotalCents
	}
	// Tax rounded half up to the cent: at most 5e13 * 1e4, within int64.
	p.TaxCents = (p.SubtotalCents*p.TaxRateBasisPoints + 5_000) / 10_000
	p.TotalCents = p.SubtotalCents + p.TaxCents
	logger(info).LogAttrs(ctx, slog.LevelInfo, "invoice_priced", slog.String("event", "invoice_priced"),
		slog.String("request_id", p.RequestID), slog.Int64("total_cents", p.TotalCents))
	return p, nil
}

func render(ctx context.Context, info pipeline.StepInfo, in Issued) (Invoice, error) {
	if err := ctx.Err(); err != nil {
		return Invoice{}, context.Cause(ctx)
	}
	if in.Number == "" {
		return Invoice{}, pipeline.NonRetryable(CodeInvalidInvoice, errors.New("no invoice number: the invoice is not issued"))
	}
	var b strings.Builder
	money := func(cents int64) string { return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, in.Currency) }
	fmt.Fprintf(&b, "INVOICE %s\nDate: %s\nCustomer: %s\nRequest: %s\n\n", in.Number, in.IssueDate, in.CustomerID, in.RequestID)
	for _, l := range in.Lines {
		fmt.Fprintf(&b, "%6d x %-40s %16s %16s\n", l.Quantity, l.Description, money(l.UnitPriceCents), money(l.TotalCents))
	}
	fmt.Fprintf(&b, "\n%-49s %33s\n", "Subtotal", money(in.SubtotalCents))
	fmt.Fprintf(&b, "%-49s %33s\n", fmt.Sprintf("Tax %d.%02d %%", in.TaxRateBasisPoints/100, in.TaxRateBasisPoints%100), money(in.TaxCents))
	fmt.Fprintf(&b, "%-49s %33s\n", "Total", money(in.TotalCents))
	logger(info).LogAttrs(ctx, slog.LevelInfo, "invoice_rendered", slog.String("event", "invoice_rendered"),
		slog.String("request_id", in.RequestID), slog.String("invoice_number", in.Number))
	return Invoice{Issued: in, Document: b.String()}, nil
}

// LocalIssuer is a stand-in Issuer for local runs, tests and a trial
// deployment: an invoice's number derives from its tenant and request id
// (NumberFor), so every process, and every Lambda instance, issues the
// same number for the same request; it remembers what it issued in
// memory, for Find. A real service issues from its system of record.
type LocalIssuer struct {
	mu     sync.Mutex
	issued map[[2]string]string // tenant, request id -> number
	calls  int
}

// NewLocalIssuer returns an empty LocalIssuer.
func NewLocalIssuer() *LocalIssuer { return &LocalIssuer{issued: map[[2]string]string{}} }

// NumberFor is the number LocalIssuer issues for tenant's request id
// dated issueDate: INV-<year>-<8 hex digits of a SHA-256 over tenant and
// request id>.
func NumberFor(tenant, requestID, issueDate string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d:%s:%s", len(tenant), tenant, requestID)))
	year := issueDate
	if len(year) >= 4 {
		year = year[:4]
	}
	return "INV-" + year + "-" + strings.ToUpper(hex.EncodeToString(sum[:4]))
}

// Issue implements Issuer.
func (l *LocalIssuer) Issue(ctx context.Context, tenant string, p Priced, _ string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	n := NumberFor(tenant, p.RequestID, p.IssueDate)
	l.issued[[2]string{tenant, p.RequestID}] = n
	return n, nil
}

// Find implements Issuer.
func (l *LocalIssuer) Find(ctx context.Context, tenant, requestID string) (string, bool, error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.issued[[2]string{tenant, requestID}]
	return n, ok, nil
}

// Calls reports how often Issue was called.
func (l *LocalIssuer) Calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// logger is the step's logger, or a discarding one.
func logger(info pipeline.StepInfo) *slog.Logger {
	if info.Logger != nil {
		return info.Logger
	}
	return slog.New(slog.DiscardHandler)
}
