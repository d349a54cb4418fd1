package payments_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/examples/payments"
	"github.com/qasync/qasync/examples/payments/provider"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// testConfig is a valid configuration against providerURL.
func testConfig(providerURL string) payments.Config {
	return payments.Config{ProviderURL: providerURL, ReportTo: "file:///reports/{executionId}.json",
		MaxInFlight: 10, ToleratedFailurePercent: 5, AwaitTimeout: 30 * time.Second}
}

// The registry holds both pipelines with their steps in order.
func TestRegistry(t *testing.T) {
	reg := payments.New(testConfig("http://127.0.0.1:1")).Registry()
	for id, steps := range map[string][]string{
		payments.FileID: {payments.StepParse, payments.StepPayments, payments.StepReport},
		payments.ItemID: {payments.StepValidate, payments.StepSubmit, payments.StepAwait, payments.StepStatus},
	} {
		p, ok := reg.Get(id)
		if !ok {
			t.Fatalf("pipeline %s is not registered", id)
		}
		var got []string
		for _, s := range p.Steps {
			got = append(got, s.Name)
		}
		if strings.Join(got, ",") != strings.Join(steps, ",") {
			t.Errorf("%s: steps %v, want %v", id, got, steps)
		}
	}
	if p, _ := reg.Get(payments.FileID); p.Output == nil || !p.Steps[1].IsMap() || p.Steps[1].Map.Pipeline != payments.ItemID {
		t.Errorf("payments.file: want a map over payments.item and an Output")
	}
	if p, _ := reg.Get(payments.ItemID); p.Steps[2].AwaitTimeout <= 0 || p.Steps[2].Retry == nil || p.Steps[2].Retry.MaxRetries != 0 {
		t.Errorf("payments.item: the await step must have a timeout and no retry")
	}
}

// FromEnv reads the PAYMENTS_* variables and refuses malformed ones.
func TestFromEnv(t *testing.T) {
	t.Setenv(payments.EnvProviderURL, "http://127.0.0.1:9")
	t.Setenv(payments.EnvMaxInFlight, "42")
	t.Setenv(payments.EnvAwaitTimeout, "90s")
	t.Setenv(payments.EnvReportTo, "")
	cfg, err := payments.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxInFlight != 42 || cfg.AwaitTimeout.Seconds() != 90 || !strings.HasPrefix(cfg.ReportTo, "file:///") ||
		!strings.HasSuffix(cfg.ReportTo, "/payments-reports/{executionId}.json") {
		t.Errorf("config %+v", cfg)
	}
	t.Setenv(payments.EnvAwaitTimeout, "soon")
	if _, err := payments.FromEnv(); err == nil {
		t.Error("an await timeout of \"soon\" was accepted")
	}
}

// ParseCSV emits every data row with its line, marks CSV syntax errors
// and repeated payment ids, skips empty lines and refuses a wrong header.
func TestParseCSV(t *testing.T) {
	rows, err := payments.ParseCSV([]byte("Payment_ID, payee ,amount,currency\n" +
		"p1,Ann,10.00,EUR\n" +
		"\n" +
		"p2,Bo\"b,5,EUR\n" +
		"p1,Cy,1,EUR\n" +
		"p3,Dee\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line    int
		problem string
		fields  int
	}{{2, "", 4}, {4, "bare", -1}, {5, "repeats the row on line 2", 4}, {6, "", 2}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows %+v, want %d", len(rows), rows, len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.Line != w.line || (w.problem == "") != (r.Problem == "") || !strings.Contains(r.Problem, w.problem) ||
			(w.fields >= 0 && len(r.Fields) != w.fields) {
			t.Errorf("row %d: %+v, want line %d, problem %q, %d fields", i, r, w.line, w.problem, w.fields)
		}
	}
	for _, bad := range []string{"", "id,payee,amount,currency\n", "payment_id,payee,amount\n"} {
		if _, err := payments.ParseCSV([]byte(bad)); err == nil {
			t.Errorf("header %q accepted", bad)
		}
	}
}

// A row becomes a payment only when every field is well-formed.
func TestParseRow(t *testing.T) {
	ok := func(f ...string) payments.Row { return payments.Row{Line: 7, Fields: f} }
	p, why := payments.ParseRow(ok(" p-1 ", "Ann", "12.5", "EUR"))
	if why != "" || p.PaymentID != "p-1" || p.AmountCents != 1250 || p.Line != 7 {
		t.Errorf("ParseRow: %+v %q", p, why)
	}
	for _, r := range []payments.Row{
		ok("p-1", "Ann", "12.5"), ok("", "Ann", "1", "EUR"), ok("p 1", "Ann", "1", "EUR"), ok("p-1", "", "1", "EUR"),
		ok("p-1", "Ann", "1", "eur"), ok("p-1", "Ann", "0", "EUR"), {Line: 3, Fields: []string{"p", "a", "1", "EUR"}, Problem: "bare quote"},
	} {
		if _, why := payments.ParseRow(r); why == "" {
			t.Errorf("row %+v accepted", r)
		}
	}
}

func TestParseCents(t *testing.T) {
	for in, want := range map[string]int64{"1": 100, "0.01": 1, "12.5": 1250, "12.50": 1250, "007.10": 710, "10000000": 1_000_000_000} {
		if got, err := payments.ParseCents(in); err != nil || got != want {
			t.Errorf("ParseCents(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0.00", "-1", "+1", "1.", ".5", "1.234", "1e3", "1,50", "10000000.01", "99999999999999"} {
		if got, err := payments.ParseCents(in); err == nil {
			t.Errorf("ParseCents(%q) = %d, want an error", in, got)
		}
	}
}

// The idempotency key is stable for a tenant's payment and differs for
// every other tenant or payment.
func TestIdempotencyKey(t *testing.T) {
	k := payments.IdempotencyKey("acme", "p-1")
	if k != payments.IdempotencyKey("acme", "p-1") || k == payments.IdempotencyKey("acme", "p-2") ||
		k == payments.IdempotencyKey("acme2", "p-1") || payments.IdempotencyKey("a", "cme:p-1") == payments.IdempotencyKey("acme", ":p-1") {
		t.Errorf("keys collide or vary")
	}
}

// The submit step pays once: its first create is charged but its answer
// lost (a retryable failure), the retry under the same key gets the same
// payment, and another execution of the same payment (the file submitted
// again) replays the recorded outcome without calling the provider.
func TestSubmitPaysOnce(t *testing.T) {
	prov := provider.NewServer(provider.Options{Faults: provider.Faults{FailFirstCreate: func(string) bool { return true }}})
	srv := httptest.NewServer(prov)
	defer srv.Close()
	defer prov.Close()
	item := payments.New(testConfig(srv.URL)).Item()
	in, _ := payload.JSON(payments.Payment{Line: 2, PaymentID: "p-1", Payee: "Ann", AmountCents: 1250, Currency: "EUR"})
	effects := pipelinetest.Effects()
	run := func(exec string, attempt int) (payments.Submitted, error) {
		info := pipelinetest.Info(item, 1, pipelinetest.Options{TenantID: "acme", ExecutionID: exec, Effects: effects,
			Attempts: map[int]int{1: attempt}})
		out, err := item.Steps[1].Run(context.Background(), info, in)
		var s payments.Submitted
		if err == nil {
			err = json.Unmarshal(out.Data, &s)
		}
		return s, err
	}
	if _, err := run("exec-1", 1); err == nil {
		t.Fatal("the first create's lost answer did not fail the step")
	} else if code, _, retryable := pipeline.Classify(err); code != payments.CodeProviderUnavailable || !retryable {
		t.Fatalf("first attempt: %v, want retryable %s", err, payments.CodeProviderUnavailable)
	}
	first, err := run("exec-1", 2)
	if err != nil || first.ProviderPaymentID == "" {
		t.Fatalf("retry: %+v %v", first, err)
	}
	again, err := run("exec-2", 1)
	if err != nil || again.ProviderPaymentID != first.ProviderPaymentID {
		t.Fatalf("another execution of p-1: %+v %v, want provider payment %s", again, err, first.ProviderPaymentID)
	}
	if st := prov.Stats(); prov.Charges("p-1") != 1 || st.Creates != 2 {
		t.Errorf("provider: %d charges of p-1, %+v; want 1 charge from 2 creates", prov.Charges("p-1"), st)
	}
}

// validate rejects a malformed row: the Item Reject Sink gets it, and
// the step's error ends the child as a rejected item.
func TestValidateRejects(t *testing.T) {
	item := payments.New(testConfig("http://127.0.0.1:1")).Item()
	in, _ := payload.JSON(payments.Row{Line: 9, Fields: []string{"p-9", "Ann", "1.234", "EUR"}})
	sink := &recordingSink{}
	info := pipelinetest.Info(item, 0, pipelinetest.Options{})
	info.Rejects = sink
	_, err := item.Steps[0].Run(context.Background(), info, in)
	if _, ok := pipeline.AsRejected(err); !ok || len(sink.causes) != 1 || !strings.Contains(sink.causes[0], "line 9: amount") {
		t.Errorf("validate: %v, sink %v; want a rejection naming line 9's amount", err, sink.causes)
	}
}

// recordingSink is a pipeline.RejectSink that keeps the causes.
type recordingSink struct{ causes []string }

func (s *recordingSink) RejectItem(_ context.Context, _ pipeline.StepInfo, _ []byte, cause error) error {
	s.causes = append(s.causes, cause.Error())
	return nil
}

func (s *recordingSink) RejectStream(_ context.Context, _ pipeline.StepInfo, _ int, cause error) error {
	s.causes = append(s.causes, cause.Error())
	return nil
}

// parse stages the rows for report, which joins them with the map's
// outcomes in input order.
func TestParseAndReport(t *testing.T) {
	svc := payments.New(testConfig("http://127.0.0.1:1"))
	file := svc.File()
	objs := &pipelinetest.Objects{}
	ctx := context.Background()
	_ = objs.Put(ctx, "file:///in/payments.csv", []byte("payment_id,payee,amount,currency\np1,Ann,1.00,EUR\np2,Bob,x,EUR\np3,Cy,2.00,USD\n"), "text/csv")
	opts := pipelinetest.Options{ExecutionID: "exec-9", Objects: objs}
	in, _ := payload.JSON(payments.FileRequest{File: "file:///in/payments.csv"})
	out, err := file.Steps[0].Run(ctx, pipelinetest.Info(file, 0, opts), in)
	if err != nil {
		t.Fatal(err)
	}
	var rows []payments.Row
	if err := json.Unmarshal(out.Data, &rows); err != nil || len(rows) != 3 {
		t.Fatalf("parse: %s %v", out.Data, err)
	}
	if _, err := objs.Get(ctx, "file:///reports/exec-9.rows.json"); err != nil {
		t.Fatalf("staged rows: %v", err)
	}

	settled, _ := payload.JSON(payments.Record{PaymentID: "p1", ProviderPaymentID: "pp_1", Status: provider.StatusSettled, AmountCents: 100, Currency: "EUR"})
	ref, err := payload.Write(ctx, nil, settled, "result", payload.DefaultInlineBudget, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	m := pipeline.MapResult{Total: 3, Succeeded: 1, Failed: 1, Rejected: 1, Elements: []pipeline.MapElement{
		{Index: 0, ExecutionID: "c0", Status: "SUCCEEDED", Output: &ref},
		{Index: 1, ExecutionID: "c1", Status: "FAILED", ErrorCode: pipeline.CodeItemRejected, Rejected: true},
		{Index: 2, ExecutionID: "c2", Status: "DLQ", ErrorCode: pipeline.CodeAwaitTimeout},
	}}
	mapOut, _ := payload.JSON(m)
	out, err = file.Steps[2].Run(ctx, pipelinetest.Info(file, 2, opts), mapOut)
	if err != nil {
		t.Fatal(err)
	}
	var rep payments.Report
	if err := json.Unmarshal(out.Data, &rep); err != nil {
		t.Fatal(err)
	}
	want := []payments.Outcome{
		{Line: 2, PaymentID: "p1", Outcome: payments.OutcomeSettled, ExecutionID: "c0", ProviderPaymentID: "pp_1", AmountCents: 100, Currency: "EUR"},
		{Line: 3, PaymentID: "p2", Outcome: payments.OutcomeRejected, ExecutionID: "c1", ErrorCode: pipeline.CodeItemRejected},
		{Line: 4, PaymentID: "p3", Outcome: payments.OutcomeFailed, ExecutionID: "c2", ErrorCode: pipeline.CodeAwaitTimeout},
	}
	if rep.Total != 3 || rep.Settled != 1 || rep.Rejected != 1 || rep.Failed != 1 || rep.SettledCents["EUR"] != 100 || len(rep.Payments) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for i, w := range want {
		if rep.Payments[i] != w {
			t.Errorf("outcome %d: %+v, want %+v", i, rep.Payments[i], w)
		}
	}
}
