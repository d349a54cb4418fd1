package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// TestExecutionPageShowsTheIdempotencyKey checks the summary's key (and
// says so when there is none).
func TestExecutionPageShowsTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantContains(t, e.get("/console/executions/"+succeededID, http.StatusOK),
		`<dt>Idempotency key</dt><dd><code id="idempotency-key">order-A-1027 (retry 2)</code></dd>`)
	wantContains(t, e.get("/console/executions/"+dlqID, http.StatusOK), `id="idempotency-key">none (submitted without one)</span>`)
}

// TestInputAndResultAreShownToAnOperatorOnly checks the execution page's
// payloads: signed out, asking for them shows how to see them and no
// bytes; signed in, the page has show and download links, and shows the
// payloads asked for, as indented JSON, each view logged once as
// payload_viewed (never its bytes).
func TestInputAndResultAreShownToAnOperatorOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	page := "/console/executions/" + succeededID
	signedOut := e.get(page+"?show=input,result", http.StatusOK)
	wantContains(t, signedOut, `id="payloads-hint"`)
	if strings.Contains(signedOut, "input-marker") || strings.Contains(signedOut, "do-not-render") || strings.Contains(signedOut, `id="show-input"`) {
		t.Error("signed out, the page shows a payload or its links")
	}
	if evs, _ := logtest.Events[payloadViewed](e.logs, "payload_viewed"); len(evs) != 0 {
		t.Errorf("signed out: payload_viewed %+v", evs)
	}

	e.signIn()
	plain := e.get(page, http.StatusOK)
	wantContains(t, plain, `href="/console/executions/`+succeededID+`?show=input#payloads" id="show-input"`,
		`href="/console/executions/`+succeededID+`/input" id="download-input" rel="nofollow" download`,
		`href="/console/executions/`+succeededID+`?show=result#payloads" id="show-result"`,
		`href="/console/executions/`+succeededID+`/result" id="download-result"`)
	if strings.Contains(plain, "input-marker") || strings.Contains(plain, "do-not-render") {
		t.Error("the page shows a payload it was not asked for")
	}

	body := e.get(page+"?show=input", http.StatusOK)
	wantContains(t, body, `<pre class="payload" id="input-view"><code>{
  &#34;order&#34;: &#34;A-1027&#34;,
  &#34;lines&#34;: [
    {
      &#34;sku&#34;: &#34;input-marker-41c9&#34;,`, strconv.Itoa(len(inputBytes))+` bytes, <code>application/json</code>.`,
		// The result's link now shows both.
		`?show=input,result#payloads" id="show-result"`)
	if strings.Contains(body, "do-not-render") {
		t.Error("the page shows the result it was not asked for")
	}
	both := e.get(page+"?show=result&show=input", http.StatusOK)
	if i, j := strings.Index(both, `id="input-view"`), strings.Index(both, `id="result-view"`); i < 0 || j < i {
		t.Errorf("show=result&show=input: input at %d, result at %d: want both, the input first", i, j)
	}

	evs, err := logtest.Events[payloadViewed](e.logs, "payload_viewed")
	if err != nil || len(evs) != 3 {
		t.Fatalf("payload_viewed %+v (%v), want 3 (input; result and input)", evs, err)
	}
	if v := evs[0]; v.Tenant != tenantAcme || v.ExecutionID != succeededID || v.Which != "input" || v.Via != "page" ||
		v.Bytes != len(inputBytes) || v.ClientAddress != "192.0.2.1:1234" {
		t.Errorf("payload_viewed %+v", v)
	}
	if strings.Contains(e.logs.String(), "input-marker") || strings.Contains(e.logs.String(), "do-not-render") {
		t.Error("a payload's bytes are logged")
	}

	// A result that is not ready, a bad show value.
	wantContains(t, e.get("/console/executions/"+dlqID+"?show=result", http.StatusOK), `id="result-notice">The execution is DLQ`)
	e.get(page+"?show=secrets", http.StatusBadRequest)
}

// TestPayloadsThatAreNotJSONOrTooLargeAreDownloadedNotShown checks what
// the page does with a payload it cannot show whole: bytes that are not
// JSON get a note and the download link, never the bytes; JSON larger
// than 64 KiB shows its first 64 KiB and links the rest.
func TestPayloadsThatAreNotJSONOrTooLargeAreDownloadedNotShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := store.Key{TenantID: tenantAcme, ExecutionID: succeededID}
	big := `{"rows":[` + strings.Repeat(`"abcdefghij",`, 10_000) + `"end-marker"]}`
	e.f.mu.Lock()
	e.f.inputs[key] = payload.Payload{ContentType: "text/html", Data: []byte(`<b>bold-marker</b>`)}
	e.f.results[key] = payload.Payload{ContentType: "application/json; charset=utf-8", Data: []byte(big)}
	e.f.mu.Unlock()
	e.signIn()
	body := e.get("/console/executions/"+succeededID+"?show=input,result", http.StatusOK)
	wantContains(t, body, `18 bytes, <code>text/html</code>. It is not JSON, so the page does not show it: <a href="/console/executions/`+succeededID+`/input" rel="nofollow" download>download it</a>.`,
		`the first 64 KiB are shown: <a href="/console/executions/`+succeededID+`/result" rel="nofollow" download>download the whole</a>`)
	if strings.Contains(body, "bold-marker") || strings.Contains(body, "end-marker") {
		t.Error("the page shows the non-JSON input, or the large result whole")
	}
	view := regexp.MustCompile(`(?s)<pre class="payload" id="result-view"><code>(.*?)</code></pre>`).FindStringSubmatch(body)
	if view == nil || len(unescape(view[1])) > 64<<10 || len(unescape(view[1])) < 60<<10 {
		t.Errorf("the result view %d: want about 64 KiB", len(view))
	}
}

// TestInputOfAnExecutionTheEngineCannotReadIsSaid checks that a payload
// the backend cannot read does not fail the page.
func TestInputOfAnExecutionTheEngineCannotReadIsSaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, log := logtest.New()
	e.h = console.New(noInput{e.f}, console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: log})
	e.signIn()
	wantContains(t, e.get("/console/executions/"+succeededID+"?show=input", http.StatusOK),
		`id="input-notice">Reading the input is not available on this deployment.`)
	e.get("/console/executions/"+succeededID+"/input", http.StatusNotImplemented)
}

// noInput is a backend that cannot read inputs.
type noInput struct{ *fakeBackend }

func (noInput) Input(context.Context, store.Key) (store.Execution, payload.Payload, error) {
	return store.Execution{}, payload.Payload{}, console.ErrNotSupported
}
