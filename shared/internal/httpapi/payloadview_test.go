package httpapi_test

// The dead-letter list as it is now (each record's current status and
// whether it is outstanding, the outstanding filter, the counts by code)
// and an operator's view of an execution's input, audit-logged.

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// recordedDeadLetters records each dead letter in *dl (made on the
// env's clock), as the dead-letter consumer does, and lists them.
func recordedDeadLetters(dl **memory.DeadLetters) envOption {
	return func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		*dl = memory.NewDeadLetters(d.Clock)
		d.DeadLetter = recordingPublisher{dl: *dl, clk: d.Clock}
		d.DeadLetters = *dl
	}
}

type recordingPublisher struct {
	dl  *memory.DeadLetters
	clk clock.Clock
}

func (p recordingPublisher) Publish(ctx context.Context, env deadletter.Envelope) error {
	_, err := p.dl.Put(ctx, deadletter.ExecutionRecord(env, p.clk.Now()))
	return err
}

// TestDeadLettersRouteTellsTheCurrentStatus: each record carries its
// execution's status and version now (none once the row is gone) and
// whether it is outstanding; outstanding=true keeps those; the counts
// count by code.
func TestDeadLettersRouteTellsTheCurrentStatus(t *testing.T) {
	t.Parallel()
	var clk *clock.Fake
	var dl *memory.DeadLetters
	e := newEnv(t, withOperator(&clk, nil, nil), recordedDeadLetters(&dl))
	gone := deadletter.Envelope{TenantID: "default", ExecutionID: "gone", PipelineID: "fail", TransitionKey: "gone:0:1",
		TerminalReason: "non_retryable", ErrorCode: "expired_code", FailedAt: clk.Now()}
	if _, err := dl.Put(context.Background(), deadletter.ExecutionRecord(gone, clk.Now())); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	x := e.mustSubmit("fail", "x", `{}`)
	e.drive()
	clk.Advance(time.Second)
	y := e.mustSubmit("fail", "y", `{}`)
	e.drive()
	clk.Advance(time.Second)
	if w := post(e, y.StatusURL+"/redrive", `{"reason":"once more"}`); w.Code != http.StatusAccepted {
		t.Fatalf("redrive: %d %s", w.Code, w.Body)
	}
	e.drive() // fails again: a second record
	yNow := decode[client.Execution](t, get(e, y.StatusURL))
	xNow := decode[client.Execution](t, get(e, x.StatusURL))

	w := get(e, "/v1/dead-letters")
	page := decode[client.DeadLetterPage](t, w)
	var got []string
	for _, d := range page.DeadLetters {
		got = append(got, d.TransitionKey+" "+string(d.CurrentStatus)+" "+strconv.FormatInt(d.CurrentVersion, 10)+" "+strconv.FormatBool(d.Outstanding))
	}
	v := strconv.FormatInt(yNow.Version, 10)
	want := []string{y.ExecutionID + ":0:2 DLQ " + v + " true", y.ExecutionID + ":0:1 DLQ " + v + " false",
		x.ExecutionID + ":0:1 DLQ " + strconv.FormatInt(xNow.Version, 10) + " true", "gone:0:1  0 false"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("dead letters:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var raw struct {
		DeadLetters []map[string]any `json:"deadLetters"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if last := raw.DeadLetters[3]; last["currentStatus"] != nil || last["currentVersion"] != nil || last["outstanding"] != false {
		t.Fatalf("the record of a gone execution: %v; want no currentStatus or currentVersion, outstanding false", last)
	}

	only := decode[client.DeadLetterPage](t, get(e, "/v1/dead-letters?outstanding=true"))
	if len(only.DeadLetters) != 2 || only.DeadLetters[0].TransitionKey != y.ExecutionID+":0:2" || only.DeadLetters[1].ExecutionID != x.ExecutionID {
		t.Fatalf("outstanding only: %+v", only.DeadLetters)
	}
	if all := decode[client.DeadLetterPage](t, get(e, "/v1/dead-letters?outstanding=false")); len(all.DeadLetters) != 4 {
		t.Fatalf("outstanding=false: %d records, want all 4", len(all.DeadLetters))
	}
	for _, bad := range []string{"?outstanding=yes", "?outstanding=1", "?outstanding=true&outstanding=true", "?outstanding="} {
		wantProblem(t, get(e, "/v1/dead-letters"+bad), http.StatusBadRequest, "invalid-request")
	}

	counts := decode[client.DeadLetterCounts](t, get(e, "/v1/dead-letters/counts"))
	if counts.ByCode["boom"] != 3 || counts.ByCode["expired_code"] != 1 || len(counts.ByCode) != 2 ||
		counts.OutstandingByCode["boom"] != 2 || len(counts.OutstandingByCode) != 1 || counts.Scanned != 4 || !counts.Complete {
		t.Fatalf("counts %+v", counts)
	}
	if c := decode[client.DeadLetterCounts](t, get(e, "/v1/dead-letters/counts?pipelineId=echo")); len(c.ByCode) != 0 || c.Scanned != 0 || !c.Complete {
		t.Fatalf("another pipeline's counts %+v", c)
	}
	if c := decode[client.DeadLetterCounts](t, get(e, "/v1/dead-letters/counts", "X-Tenant-Id", "other")); c.ByCode == nil || len(c.ByCode) != 0 {
		t.Fatalf("another tenant's counts %+v; want an empty object", c)
	}
	wantProblem(t, get(e, "/v1/dead-letters/counts?pipelineId=-bad"), http.StatusBadRequest, "invalid-pipeline-id")
	wantProblem(t, get(newEnv(t), "/v1/dead-letters/counts"), http.StatusServiceUnavailable, "dead-letters-unavailable")
}

// payloadView is a payload_viewed log line.
type payloadView struct {
	Level         string `json:"level"`
	Tenant        string `json:"tenant"`
	ExecutionID   string `json:"execution_id"`
	Which         string `json:"which"`
	Bytes         int    `json:"bytes"`
	ClientAddress string `json:"client_address"`
}

func views(t *testing.T, logs *logtest.Buffer) []payloadView {
	t.Helper()
	v, err := logtest.Events[payloadView](logs, "payload_viewed")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestInputRoute: the operator reads an execution's input as a download
// of JSON or octets (never its own media type), each view logged without
// its bytes; a caller without the admin token is refused, another
// tenant's execution is not found, an input over the cap is a 413 naming
// its size.
func TestInputRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const marker = "PERSONAL-DATA-MARKER"
	body := `{"name":"` + marker + `"}`
	sub := e.mustSubmit("fail", "k", body, "X-Tenant-Id", "acme")
	e.drive()
	path := "/v1/inputs/" + sub.ExecutionID
	admin := []string{"Authorization", "Bearer " + adminToken, "X-Tenant-Id", "acme"}

	wantProblem(t, get(e, path, "X-Tenant-Id", "acme"), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, get(e, path, "X-Tenant-Id", "acme", "Authorization", "Bearer wrong"), http.StatusUnauthorized, "unauthorized")
	if v := views(t, e.logs); len(v) != 0 {
		t.Fatalf("refused calls logged views: %+v", v)
	}

	w := get(e, path, admin...)
	if w.Code != http.StatusOK || w.Body.String() != body {
		t.Fatalf("input: %d %q", w.Code, w.Body)
	}
	h := w.Header()
	if h.Get("Content-Type") != "application/json" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" ||
		h.Get("Content-Disposition") != `attachment; filename="`+sub.ExecutionID+`-input.json"` || h.Get(client.InputContentTypeHeader) != "application/json" {
		t.Fatalf("input headers %v", h)
	}
	v := views(t, e.logs)
	if len(v) != 1 || v[0] != (payloadView{Level: "INFO", Tenant: "acme", ExecutionID: sub.ExecutionID, Which: "input", Bytes: len(body), ClientAddress: "192.0.2.1"}) {
		t.Fatalf("payload_viewed %+v", v)
	}
	if strings.Contains(e.logs.String(), marker) {
		t.Fatalf("the input's bytes reached the log:\n%s", e.logs)
	}

	// Raw bytes of a browser-renderable type: octets, as an attachment.
	html := e.mustSubmit("echo", "h", `<script>alert(1)</script>`, "Content-Type", "text/html", "X-Tenant-Id", "acme")
	w = get(e, "/v1/inputs/"+html.ExecutionID, admin...)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != payload.ContentTypeOctet || w.Header().Get(client.InputContentTypeHeader) != "text/html" ||
		!strings.HasSuffix(w.Header().Get("Content-Disposition"), `-input.bin"`) {
		t.Fatalf("raw input: %d %v", w.Code, w.Header())
	}

	wantProblem(t, get(e, path, "Authorization", "Bearer "+adminToken, "X-Tenant-Id", "other"), http.StatusNotFound, "execution-not-found")

	// Over the cap: not served, its size named; no view logged.
	in, err := payload.JSON(map[string]string{"pad": strings.Repeat("p", httpapi.MaxInputViewBytes)})
	if err != nil {
		t.Fatal(err)
	}
	large, err := e.rt.Submit(context.Background(), engine.SubmitRequest{TenantID: "acme", PipelineID: "echo", IdempotencyKey: "large", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	p := wantProblem(t, get(e, "/v1/inputs/"+large.Execution.ExecutionID, admin...), http.StatusRequestEntityTooLarge, "input-too-large")
	if !strings.Contains(p.Detail, strconv.Itoa(len(in.Data))+" bytes") || !strings.Contains(p.Detail, strconv.Itoa(httpapi.MaxInputViewBytes)) ||
		p.ExecutionStatus != store.Queued {
		t.Fatalf("413 problem %+v", p)
	}
	if v := views(t, e.logs); len(v) != 2 {
		t.Fatalf("%d views logged, want 2 (the two inputs served)", len(v))
	}

	// Without an admin token the route says what to configure.
	off := newEnv(t, withHTTP(func(o *httpapi.Options) { o.AdminToken = "" }))
	wantProblem(t, get(off, "/v1/inputs/x", "Authorization", "Bearer "+adminToken), http.StatusForbidden, "operator-routes-disabled")
}

// TestResultReadByAnOperatorIsLogged: a result read with the admin token
// is an operator's view (payload_viewed, which=result); the submitter's
// own read is not.
func TestResultReadByAnOperatorIsLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.mustSubmit("greet", "k", `{"name":"ada"}`)
	e.drive()
	if w := get(e, sub.ResultURL); w.Code != http.StatusOK {
		t.Fatalf("result: %d", w.Code)
	}
	if v := views(t, e.logs); len(v) != 0 {
		t.Fatalf("a submitter's read logged as a view: %+v", v)
	}
	w := get(e, sub.ResultURL, "Authorization", "Bearer "+adminToken)
	if w.Code != http.StatusOK {
		t.Fatalf("result with the admin token: %d", w.Code)
	}
	v := views(t, e.logs)
	if len(v) != 1 || v[0].Which != "result" || v[0].ExecutionID != sub.ExecutionID || v[0].Bytes != w.Body.Len() || v[0].Tenant != "default" {
		t.Fatalf("payload_viewed %+v", v)
	}
	if strings.Contains(e.logs.String(), "hello ada") {
		t.Fatalf("the result's bytes reached the log")
	}
}
