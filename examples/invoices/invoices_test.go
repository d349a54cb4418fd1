package invoices_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// sampleRequest is a two-line request at 20 % tax.
func sampleRequest() invoices.Request {
	return invoices.Request{RequestID: "req-1001", CustomerID: "cust-42", Currency: "EUR", IssueDate: "2026-11-30",
		TaxRateBasisPoints: 2000, Lines: []invoices.Line{
			{Description: "Widget", Quantity: 3, UnitPriceCents: 1250},
			{Description: "Support hours", Quantity: 2, UnitPriceCents: 9999},
		}}
}

// run feeds r through every step as one crash-free execution of tenant
// acme does.
func run(t *testing.T, p pipeline.Pipeline, r invoices.Request, opts pipelinetest.Options) (invoices.Invoice, error) {
	t.Helper()
	in, err := payload.JSON(r)
	if err != nil {
		t.Fatal(err)
	}
	if opts.TenantID == "" {
		opts.TenantID = "acme"
	}
	out, err := pipelinetest.RunSteps(context.Background(), p, in, opts)
	if err != nil {
		return invoices.Invoice{}, err
	}
	var inv invoices.Invoice
	if err := json.Unmarshal(out.Data, &inv); err != nil {
		t.Fatalf("result %s: %v", out.Data, err)
	}
	return inv, nil
}

// A request is priced in integer cents, issued one number and rendered.
func TestPipelineIssuesAndRendersAnInvoice(t *testing.T) {
	issuer := invoices.NewLocalIssuer()
	inv, err := run(t, invoices.New(issuer), sampleRequest(), pipelinetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 3 x 12.50 + 2 x 99.99 = 237.48; 20 % tax = 47.496, rounded half up.
	if inv.SubtotalCents != 23748 || inv.TaxCents != 4750 || inv.TotalCents != 28498 {
		t.Errorf("amounts: subtotal %d, tax %d, total %d", inv.SubtotalCents, inv.TaxCents, inv.TotalCents)
	}
	if inv.Lines[0].TotalCents != 3750 || inv.Lines[1].TotalCents != 19998 {
		t.Errorf("line totals %+v", inv.Lines)
	}
	if want := invoices.NumberFor("acme", "req-1001", "2026-11-30"); inv.Number != want || !strings.HasPrefix(want, "INV-2026-") {
		t.Errorf("number %q, want %q", inv.Number, want)
	}
	for _, want := range []string{"INVOICE " + inv.Number, "Customer: cust-42", "Widget", "37.50 EUR", "Tax 20.00 %", "284.98 EUR"} {
		if !strings.Contains(inv.Document, want) {
			t.Errorf("document lacks %q:\n%s", want, inv.Document)
		}
	}
	if issuer.Calls() != 1 {
		t.Errorf("issuer called %d times, want 1", issuer.Calls())
	}
}

// The issue step's command id is the request id: the same request
// submitted again as another execution of the same tenant (a client that
// retried without its idempotency key) gets the recorded number, and the
// issuer is not called again; another tenant's request of the same id is
// an invoice of its own.
func TestIssueOncePerRequestID(t *testing.T) {
	issuer := invoices.NewLocalIssuer()
	p := invoices.New(issuer)
	effects := pipelinetest.Effects()
	first, err := run(t, p, sampleRequest(), pipelinetest.Options{ExecutionID: "exec-1", Effects: effects})
	if err != nil {
		t.Fatal(err)
	}
	again, err := run(t, p, sampleRequest(), pipelinetest.Options{ExecutionID: "exec-2", Effects: effects})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) || issuer.Calls() != 1 {
		t.Errorf("second execution: %+v (issuer calls %d), want the first's invoice and 1 call", again, issuer.Calls())
	}
	other, err := run(t, p, sampleRequest(), pipelinetest.Options{TenantID: "globex", ExecutionID: "exec-3", Effects: effects})
	if err != nil {
		t.Fatal(err)
	}
	if other.Number == first.Number || issuer.Calls() != 2 {
		t.Errorf("other tenant: number %s (first %s), issuer calls %d", other.Number, first.Number, issuer.Calls())
	}
}

// dyingIssuer issues, then "dies" before the step records the outcome:
// it cancels the run's context, as a lost lease or a shutdown does.
type dyingIssuer struct {
	*invoices.LocalIssuer
	cancel context.CancelFunc
}

func (d dyingIssuer) Issue(ctx context.Context, tenant string, p invoices.Priced, key string) (string, error) {
	if _, err := d.LocalIssuer.Issue(ctx, tenant, p, key); err != nil {
		return "", err
	}
	d.cancel()
	return "", context.Canceled
}

// A run that died after issuing leaves the command DISPATCHING; the next
// run asks the issuer (Reconcile) and records the number it finds
// instead of issuing again.
func TestIssueReconcilesADeadRun(t *testing.T) {
	local := invoices.NewLocalIssuer()
	ctx, cancel := context.WithCancel(context.Background())
	p := invoices.New(dyingIssuer{LocalIssuer: local, cancel: cancel})
	issue := 2 // the issue step
	if p.Steps[issue].Name != invoices.StepIssue {
		t.Fatalf("step %d is %s", issue, p.Steps[issue].Name)
	}
	opts := pipelinetest.Options{TenantID: "acme", Effects: pipelinetest.Effects()}
	in, err := payload.JSON(sampleRequest())
	if err != nil {
		t.Fatal(err)
	}
	for i := range issue { // validate and price
		if in, err = p.Steps[i].Run(context.Background(), pipelinetest.Info(p, i, opts), in); err != nil {
			t.Fatal(err)
		}
	}
	info := pipelinetest.Info(p, issue, opts)
	info.FencingToken = 1
	if _, err := p.Steps[issue].Run(ctx, info, in); err == nil {
		t.Fatal("the dying run succeeded")
	}
	opts.Attempts = map[int]int{issue: 2}
	info = pipelinetest.Info(p, issue, opts)
	info.FencingToken = 2 // the takeover's claim
	out, err := p.Steps[issue].Run(context.Background(), info, in)
	if err != nil {
		t.Fatalf("the next run: %v", err)
	}
	var issued invoices.Issued
	if err := json.Unmarshal(out.Data, &issued); err != nil {
		t.Fatal(err)
	}
	if issued.Number != invoices.NumberFor("acme", "req-1001", "2026-11-30") || local.Calls() != 1 {
		t.Errorf("reconciled number %q, issuer calls %d: want the dead run's number and 1 call", issued.Number, local.Calls())
	}
}

// A malformed request fails validate at once, non-retryably, with a
// message naming the field (never its value).
func TestValidateRefusesMalformedRequests(t *testing.T) {
	for name, tc := range map[string]struct {
		edit  func(*invoices.Request)
		field string
	}{
		"no request id":     {func(r *invoices.Request) { r.RequestID = "" }, "requestId"},
		"bad currency":      {func(r *invoices.Request) { r.Currency = "euro" }, "currency"},
		"bad date":          {func(r *invoices.Request) { r.IssueDate = "30/11/2026" }, "issueDate"},
		"no lines":          {func(r *invoices.Request) { r.Lines = nil }, "lines"},
		"zero quantity":     {func(r *invoices.Request) { r.Lines[1].Quantity = 0 }, "lines[1].quantity"},
		"negative price":    {func(r *invoices.Request) { r.Lines[0].UnitPriceCents = -1 }, "lines[0].unitPriceCents"},
		"tax over 100 %":    {func(r *invoices.Request) { r.TaxRateBasisPoints = 10001 }, "taxRateBasisPoints"},
		"empty description": {func(r *invoices.Request) { r.Lines[0].Description = " " }, "lines[0].description"},
	} {
		r := sampleRequest()
		tc.edit(&r)
		issuer := invoices.NewLocalIssuer()
		_, err := run(t, invoices.New(issuer), r, pipelinetest.Options{})
		code, msg, retryable := pipeline.Classify(err)
		if err == nil || code != invoices.CodeInvalidInvoice || retryable || !strings.Contains(msg, tc.field) {
			t.Errorf("%s: %v (code %s, retryable %v), want non-retryable %s naming %s", name, err, code, retryable, invoices.CodeInvalidInvoice, tc.field)
		}
		if issuer.Calls() != 0 {
			t.Errorf("%s: issued an invalid request", name)
		}
	}
}

// The mains' registry serves invoices.issue, its four steps in order.
func TestRegistry(t *testing.T) {
	p, ok := invoices.Registry().Get(invoices.ID)
	if !ok {
		t.Fatalf("registry lacks %s", invoices.ID)
	}
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.Name)
	}
	if want := []string{invoices.StepValidate, invoices.StepPrice, invoices.StepIssue, invoices.StepRender}; !reflect.DeepEqual(names, want) {
		t.Errorf("steps %v, want %v", names, want)
	}
}
