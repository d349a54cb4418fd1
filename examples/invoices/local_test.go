package invoices_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/examples/internal/servetest"
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// The HTTP API's documents, as far as this test reads them.
type (
	submitted struct {
		ExecutionID string `json:"executionId"`
		Status      string `json:"status"`
		Duplicate   bool   `json:"duplicate"`
		StatusURL   string `json:"statusUrl"`
		ResultURL   string `json:"resultUrl"`
	}
	status struct {
		Status   string `json:"status"`
		StepName string `json:"stepName"`
		Error    *struct {
			Code           string `json:"code"`
			TerminalReason string `json:"terminalReason"`
		} `json:"error"`
	}
)

// syncBuffer collects a process's output for the failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startLocal builds the service's local main (cmd/local) and starts
// `serve` on a port the OS picks, with the providers serve defaults to
// (the embedded store, in a fresh working directory); it returns the base URL and the process's output (its
// JSON logs and its stderr). The process is stopped (SIGTERM,
// then SIGKILL) when the test ends, whichever way it ends, and a SIGTERM
// must end it cleanly (exit status 0).
func startLocal(t *testing.T) (string, *syncBuffer) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "invoices-local")
	build := exec.Command("go", "build", "-o", bin, "./cmd/local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/local: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Dir = t.TempDir() // the default embedded store keeps its data in .qasync/ here
	// Only the defaults: no configuration key from this environment.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIPELINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logs := &syncBuffer{}
	line := func(l string) { fmt.Fprintln(logs, l) }
	return servetest.Start(t, cmd, line, logs, 30*time.Second, 30*time.Second), logs
}

// call sends a request and decodes a JSON answer into out (when not nil).
func call(t *testing.T, method, url string, header map[string]string, body []byte, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// submit posts r to the pipeline for tenant acme with an idempotency key.
func submit(t *testing.T, base, key string, r any) (submitted, int) {
	t.Helper()
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var s submitted
	code := call(t, "POST", base+"/v1/pipelines/"+invoices.ID+"/executions",
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": key, "X-Tenant-Id": "acme"}, body, &s)
	return s, code
}

// await polls the execution's status until it is terminal (SUCCEEDED,
// FAILED, DLQ) or 30 s have passed.
func await(t *testing.T, base string, s submitted) status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st status
		if code := call(t, "GET", base+s.StatusURL, map[string]string{"X-Tenant-Id": "acme"}, nil, &st); code != http.StatusOK {
			t.Fatalf("status of %s: HTTP %d", s.ExecutionID, code)
		}
		// FAILED comes before DLQ while the dead letter is published (a
		// loaded machine shows it): wait for the status that stays.
		switch st.Status {
		case "SUCCEEDED", "DLQ":
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s still %s at step %s after 30 s", s.ExecutionID, st.Status, st.StepName)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The service's own local main serves its pipeline end to end over HTTP:
// an invoice request is submitted, runs its four steps to SUCCEEDED, and
// its result is the invoice the steps make in-process; a duplicate submit
// is answered with the same execution; the same request submitted again
// under another idempotency key is a new execution that gets the same
// invoice number from the effect log, without issuing again (the issue
// step's command id is the request id); a malformed request is
// dead-lettered with the pipeline's own error code. The logs never hold
// the request's contents.
func TestLocalMainServesTheInvoicePipeline(t *testing.T) {
	base, logs := startLocal(t)
	req := sampleRequest()

	s, code := submit(t, base, "invoice-req-1001", req)
	if code != http.StatusAccepted || s.ExecutionID == "" || s.Duplicate {
		t.Fatalf("submit: HTTP %d %+v, want 202 and a new execution", code, s)
	}
	if st := await(t, base, s); st.Status != "SUCCEEDED" {
		t.Fatalf("execution %s: %+v, want SUCCEEDED", s.ExecutionID, st)
	}
	var got invoices.Invoice
	if code := call(t, "GET", base+s.ResultURL, map[string]string{"X-Tenant-Id": "acme"}, nil, &got); code != http.StatusOK {
		t.Fatalf("result: HTTP %d", code)
	}
	want, err := run(t, invoices.New(invoices.NewLocalIssuer()), req, pipelinetest.Options{TenantID: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Number != want.Number || got.TotalCents != 28498 || got.Document != want.Document {
		t.Errorf("result: number %s, total %d, document\n%s\nwant number %s, total 28498, document\n%s",
			got.Number, got.TotalCents, got.Document, want.Number, want.Document)
	}

	dup, code := submit(t, base, "invoice-req-1001", req)
	if code != http.StatusOK || !dup.Duplicate || dup.ExecutionID != s.ExecutionID {
		t.Errorf("duplicate submit: HTTP %d %+v, want 200 and execution %s", code, dup, s.ExecutionID)
	}

	again, code := submit(t, base, "invoice-req-1001-resent", req)
	if code != http.StatusAccepted || again.ExecutionID == s.ExecutionID {
		t.Fatalf("resubmit under another key: HTTP %d %+v, want a new execution", code, again)
	}
	if st := await(t, base, again); st.Status != "SUCCEEDED" {
		t.Fatalf("execution %s: %+v, want SUCCEEDED", again.ExecutionID, st)
	}
	var second invoices.Invoice
	call(t, "GET", base+again.ResultURL, map[string]string{"X-Tenant-Id": "acme"}, nil, &second)
	if second.Number != got.Number {
		t.Errorf("the resubmitted request got invoice %s, want the recorded %s", second.Number, got.Number)
	}
	out := logs.String()
	if n, r := strings.Count(out, `"event":"invoice_issued"`), strings.Count(out, `"event":"command_replayed"`); n != 1 || r != 1 {
		t.Errorf("logs: %d invoice_issued and %d command_replayed events, want one each (issued once, replayed once)\n%s", n, r, out)
	}

	bad := sampleRequest()
	bad.Currency = "euro"
	b, code := submit(t, base, "invoice-bad", bad)
	if code != http.StatusAccepted {
		t.Fatalf("submit of a malformed request: HTTP %d", code)
	}
	if st := await(t, base, b); st.Status != "DLQ" || st.Error == nil || st.Error.Code != invoices.CodeInvalidInvoice || st.StepName != invoices.StepValidate {
		t.Errorf("malformed request: %+v, want DLQ at validate with code %s", st, invoices.CodeInvalidInvoice)
	}
	if strings.Contains(logs.String(), "Support hours") {
		t.Errorf("the logs hold a request's contents:\n%s", logs)
	}
}
