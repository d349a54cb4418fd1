package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

const operatorToken = "op-token-Zq81-never-logged"

// env is a console over the fake backend.
type env struct {
	t    *testing.T
	f    *fakeBackend
	h    http.Handler
	logs *logtest.Buffer
	// cookies the browser holds (name -> value).
	jar map[string]string
}

type envOption func(*console.Options)

func withoutToken(o *console.Options) { o.AdminToken = "" }

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	logs, log := logtest.New()
	f := newFakeBackend()
	o := console.Options{
		AdminToken: operatorToken, TenantCookie: true, Pipelines: fixturePipelines, Logger: log,
		Now: func() time.Time { return epoch },
	}
	for _, opt := range opts {
		opt(&o)
	}
	// The fixtures' main tenant, chosen in the tenant field.
	e := &env{t: t, f: f, h: console.New(f, o), logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}
	t.Cleanup(func() {
		if strings.Contains(logs.String(), operatorToken) {
			t.Errorf("the operator token appears in the logs:\n%s", logs)
		}
	})
	return e
}

// do sends a request with the jar's cookies and keeps the cookies the
// response sets.
func (e *env) do(method, target string, form url.Values, headers ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	for k, v := range e.jar {
		r.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	for _, c := range w.Result().Cookies() {
		if c.MaxAge < 0 {
			delete(e.jar, c.Name)
		} else {
			e.jar[c.Name] = c.Value
		}
	}
	return w
}

// get fetches a page and checks its status.
func (e *env) get(target string, status int, headers ...string) string {
	e.t.Helper()
	w := e.do(http.MethodGet, target, nil, headers...)
	if w.Code != status {
		e.t.Fatalf("GET %s: status %d, want %d; body:\n%s", target, w.Code, status, w.Body)
	}
	return w.Body.String()
}

// csrf returns the CSRF token (loading a page first if the jar has none).
func (e *env) csrf() string {
	e.t.Helper()
	if _, ok := e.jar[console.CSRFCookie]; !ok {
		e.get("/console", http.StatusOK)
	}
	return e.jar[console.CSRFCookie]
}

// post sends a form with the CSRF token.
func (e *env) post(target string, form url.Values, headers ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", e.csrf())
	}
	return e.do(http.MethodPost, target, form, headers...)
}

// signIn signs in with the operator token.
func (e *env) signIn() {
	e.t.Helper()
	w := e.post("/console/login", url.Values{"token": {operatorToken}, "next": {"/console"}})
	if w.Code != http.StatusSeeOther {
		e.t.Fatalf("sign-in: status %d, want 303; body:\n%s", w.Code, w.Body)
	}
}

// rows returns the data-status of each row of the executions table, and
// the execution ids in order.
var (
	rowStatus = regexp.MustCompile(`<tr data-status="([A-Z_]+)">`)
	rowID     = regexp.MustCompile(`<td class="id"><a href="/console/executions/([^"]+)">`)
	nextLink  = regexp.MustCompile(`<a href="([^"]+)" id="next-page"`)
	firstLink = regexp.MustCompile(`<a href="([^"]+)" id="first-page"`)
)

func matches(re *regexp.Regexp, body string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func unescape(s string) string {
	return strings.NewReplacer("&amp;", "&", "&#43;", "+", "&#34;", `"`, "&#39;", "'").Replace(s)
}

func wantContains(t *testing.T, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(body, p) {
			t.Errorf("page lacks %q", p)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", body)
	}
}

func TestListShowsTheTenantsExecutionsNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console", http.StatusOK)
	ids := matches(rowID, body)
	if len(ids) != store.DefaultListLimit {
		t.Fatalf("%d rows, want a page of %d", len(ids), store.DefaultListLimit)
	}
	if ids[0] != queuedID || ids[1] != runningID {
		t.Errorf("first rows %v, want the newest (%s, %s)", ids[:2], queuedID, runningID)
	}
	if q := e.f.lastList(); q.TenantID != tenantAcme {
		t.Errorf("listed tenant %q", q.TenantID)
	}
	wantContains(t, body, `<span class="badge s-queued">QUEUED</span>`, "checkout.deliver-order", `id="next-page"`,
		`<time datetime="2026-03-04T15:29:55Z">2026-03-04 15:29:55.000Z</time>`)
}

func TestListFiltersByPipelineAndStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console?pipeline=checkout.deliver-order&status=DLQ&status=failed,WAIT_RETRY&limit=200", http.StatusOK)
	q := e.f.lastList()
	want := []store.Status{store.DLQ, store.Failed, store.WaitRetry}
	if q.TenantID != tenantAcme || q.PipelineID != "checkout.deliver-order" || !slices.Equal(q.Statuses, want) || q.Limit != 200 {
		t.Fatalf("list query %+v, want tenant acme, the pipeline, statuses %v, limit 200", q, want)
	}
	got := matches(rowStatus, body)
	if n := e.f.count(tenantAcme, "checkout.deliver-order", want...); len(got) != n || n == 0 {
		t.Fatalf("%d rows, want the %d matching executions", len(got), n)
	}
	for _, s := range got {
		if !slices.Contains(want, store.Status(s)) {
			t.Errorf("row in status %s", s)
		}
	}
	if strings.Contains(body, "invoices.render</td>") {
		t.Error("another pipeline's execution is listed")
	}
	// The filter form shows the filters it applied.
	wantContains(t, body, `value="checkout.deliver-order"`, `value="DLQ" checked`, `value="FAILED" checked`,
		`value="WAIT_RETRY" checked`, `<option value="200" selected>`, `id="clear-filters"`)
}

func TestListPagesThroughEveryExecutionOnceKeepingTheFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seen := map[string]bool{}
	target := "/console?pipeline=invoices.render&limit=20"
	pages := 0
	for target != "" {
		body := e.get(target, http.StatusOK)
		pages++
		for _, id := range matches(rowID, body) {
			if seen[id] {
				t.Fatalf("execution %s listed twice", id)
			}
			seen[id] = true
		}
		if pages > 1 {
			first := matches(firstLink, body)
			if len(first) != 1 || unescape(first[0]) != "/console?limit=20&pipeline=invoices.render" {
				t.Errorf("page %d: first-page link %v", pages, first)
			}
			wantContains(t, body, "page "+string(rune('0'+pages)))
		}
		next := matches(nextLink, body)
		target = ""
		if len(next) == 1 {
			target = unescape(next[0])
			u, _ := url.Parse(target)
			if u.Query().Get("pipeline") != "invoices.render" || u.Query().Get("limit") != "20" || u.Query().Get("cursor") == "" {
				t.Fatalf("next link %q loses the filters or the cursor", target)
			}
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if want := e.f.count(tenantAcme, "invoices.render"); len(seen) != want || pages != (want+19)/20 {
		t.Errorf("%d executions over %d pages, want %d over %d", len(seen), pages, want, (want+19)/20)
	}
}

func TestListRefusesUnknownStatusBadLimitAndForeignCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantContains(t, e.get("/console?status=DONE", http.StatusBadRequest), "&#34;DONE&#34; is not a status")
	wantContains(t, e.get("/console?limit=501", http.StatusBadRequest), "from 1 to 500")
	wantContains(t, e.get("/console?limit=x", http.StatusBadRequest), "from 1 to 500")
	// A cursor of another query (here: another pipeline's).
	body := e.get("/console?pipeline=diag.drill&limit=10", http.StatusOK)
	next := unescape(matches(nextLink, body)[0])
	u, _ := url.Parse(next)
	wantContains(t, e.get("/console?pipeline=invoices.render&limit=10&cursor="+url.QueryEscape(u.Query().Get("cursor")), http.StatusBadRequest),
		"does not belong to this list")
}

func TestTenantComesFromTheTenantFunctionHeaderOrCookie(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	delete(e.jar, console.TenantCookieName)
	// No header, no cookie: the tenant function's default.
	e.get("/console", http.StatusOK)
	if q := e.f.lastList(); q.TenantID != httpapi.DefaultTenant {
		t.Errorf("tenant %q, want %q", q.TenantID, httpapi.DefaultTenant)
	}
	// The tenant field sets the cookie.
	w := e.post("/console/tenant", url.Values{"tenant": {tenantOther}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console" {
		t.Fatalf("tenant form: %d %q", w.Code, w.Header().Get("Location"))
	}
	ck := findCookie(t, w, console.TenantCookieName)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console" {
		t.Errorf("tenant cookie %+v: want HttpOnly, SameSite=Strict, Path=/console", ck)
	}
	body := e.get("/console", http.StatusOK)
	if ids := matches(rowID, body); len(ids) != 4 || e.f.lastList().TenantID != tenantOther {
		t.Errorf("tenant %q, %d rows; want globex's 4", e.f.lastList().TenantID, len(ids))
	}
	wantContains(t, body, `id="tenant" name="tenant" value="globex"`)
	// Another tenant's execution is not found.
	e.get("/console/executions/"+showcaseID, http.StatusNotFound)
	// A header the request carries wins, and the field is not offered.
	body = e.get("/console", http.StatusOK, httpapi.TenantHeader, tenantAcme)
	if e.f.lastList().TenantID != tenantAcme {
		t.Errorf("with the header: tenant %q, want acme", e.f.lastList().TenantID)
	}
	if strings.Contains(body, `id="tenant-form"`) || !strings.Contains(body, `<strong id="tenant-name">acme</strong>`) {
		t.Error("with the header the tenant field is offered, or the tenant is not shown")
	}
	// An invalid tenant id is refused; a blank one clears the cookie.
	e.post("/console/tenant", url.Values{"tenant": {"a b"}})
	if e.jar[console.TenantCookieName] != tenantOther {
		t.Error("an invalid tenant replaced the cookie")
	}
	e.post("/console/tenant", url.Values{"tenant": {""}})
	if _, ok := e.jar[console.TenantCookieName]; ok {
		t.Error("a blank tenant did not clear the cookie")
	}
}

func TestTenantCookieIgnoredUnlessTheTenantSourceIsTheHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *console.Options) { o.TenantCookie = false; o.TenantFunc = httpapi.FixedTenant(tenantAcme) })
	e.jar[console.TenantCookieName] = tenantOther
	body := e.get("/console", http.StatusOK)
	if e.f.lastList().TenantID != tenantAcme || strings.Contains(body, `id="tenant-form"`) {
		t.Errorf("tenant %q (want acme from the tenant function), tenant form offered: %v", e.f.lastList().TenantID, strings.Contains(body, `id="tenant-form"`))
	}
	if w := e.post("/console/tenant", url.Values{"tenant": {tenantOther}}); w.Code != http.StatusNotFound {
		t.Errorf("tenant form: %d, want 404", w.Code)
	}
}

func TestTenantFunctionErrorsAreShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *console.Options) {
		o.TenantFunc = func(*http.Request) (string, error) { return "", httpapi.ErrUnauthenticated }
	})
	wantContains(t, e.get("/console", http.StatusUnauthorized), "no caller identity")
}

func findCookie(t *testing.T, w *httptest.ResponseRecorder, name string) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s cookie set; headers %v", name, w.Header())
	return nil
}

func TestTimelineShowsStepsAttemptsDurationsErrorsAwaitsAndRedrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/executions/"+showcaseID, http.StatusOK)
	wantContains(t, body,
		// Summary.
		`id="exec-status">SUCCEEDED</span>`, "3 · ship, attempt 2 of 5", "Duration</dt><dd>6m 41s</dd>",
		"<dt>Re-drives</dt><dd>1; last reason: carrier fixed the label API</dd>", `<code>manager-approval</code> COMPLETED`,
		// Steps: attempts, running time, awaited time, failures.
		`<tr><td>1 · charge</td><td class="num">3</td><td class="num">11.5 s</td>`,
		`<tr><td>2 · await-approval</td><td class="num">1</td><td class="num">100 ms</td>`+"\n"+`      <td class="num">1m 16s</td>`,
		`<tr><td>3 · ship</td><td class="num">2</td>`,
		// Events: durations, errors, retry times, workers, the re-drive's reason.
		`data-type="STEP_FAILED"`, "took 5.00 s", `<code>gateway_timeout</code> payment gateway did not answer within 5s`,
		"(after 2.00 s)", `(after 4.00 s)`, `worker <code>worker-b2</code>`, `data-type="AWAITING"`, `data-type="AWAIT_COMPLETED"`,
		"took 1m 16s", `data-type="LEASE_TAKEN_OVER"`, "took 30.0 s", `data-type="DEAD_LETTERED"`, `data-type="REDRIVEN"`,
		"reason: carrier fixed the label API", "<code>label_rejected</code>", "+6m 41s",
		// The chart: a run per attempt, the await, the back-offs.
		`<th scope="row">charge #2</th>`, `<th scope="row">await-approval await</th>`, `<th scope="row">charge back-off</th>`,
		`<th scope="row">ship #1</th>`,
		// Its result only to an operator, who is not signed in.
		`id="payloads-hint">Sign in with the operator token (top right) to see the input and the result.`)
	if got := strings.Count(body, "<tr class=\"e-"); got != 20 {
		t.Errorf("%d event rows, want 20", got)
	}
	if strings.Contains(body, "do-not-render") {
		t.Error("the page shows the result's bytes")
	}
}

func TestRunningExecutionShowsOpenSpansAndAutoRefresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/executions/"+runningID, http.StatusOK)
	wantContains(t, body, `id="auto-refresh"`, "Running for</dt><dd>9.00 s</dd>", `<span class="outcome o-running">running</span>`,
		`<code>worker-7f2c</code>`)
}

// TestPayloadDownloadsAreAttachmentsNeverRunByTheBrowser reproduces the
// issue's "the result route can serve a step's bytes as text/javascript
// from the console's own origin" (its own content type; a page of the
// console's origin could load it as a script, which the console's CSP
// 'self' allows): now a payload is an attachment, application/json only
// when it is JSON and application/octet-stream otherwise, nosniff, with
// a sandbox CSP, and only to an operator.
func TestPayloadDownloadsAreAttachmentsNeverRunByTheBrowser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const js = `alert(document.cookie)`
	e.f.mu.Lock()
	e.f.results[store.Key{TenantID: tenantAcme, ExecutionID: succeededID}] = payload.Payload{ContentType: "text/javascript", Data: []byte(js)}
	e.f.mu.Unlock()
	result, input := "/console/executions/"+succeededID+"/result", "/console/executions/"+succeededID+"/input"
	for _, p := range []string{result, input} {
		if w := e.do(http.MethodGet, p, nil); w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "alert(document") ||
			strings.Contains(w.Body.String(), "input-marker") {
			t.Errorf("%s without a session: %d, want 401 and no bytes", p, w.Code)
		}
	}
	e.signIn()
	check := func(p, body, ct, file string) {
		t.Helper()
		w := e.do(http.MethodGet, p, nil)
		h := w.Header()
		if w.Code != http.StatusOK || w.Body.String() != body {
			t.Fatalf("%s: %d %q", p, w.Code, w.Body)
		}
		if got := h.Get("Content-Type"); got != ct {
			t.Errorf("%s: Content-Type %q, want %q", p, got, ct)
		}
		if got := h.Get("Content-Disposition"); got != `attachment; filename="`+file+`"` {
			t.Errorf("%s: Content-Disposition %q, want an attachment named %s", p, got, file)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "sandbox") ||
			strings.Contains(h.Get("Content-Security-Policy"), "'self'") {
			t.Errorf("%s: nosniff %q, CSP %q: want nosniff and a sandbox CSP that trusts no origin", p, h.Get("X-Content-Type-Options"), h.Get("Content-Security-Policy"))
		}
	}
	check(result, js, "application/octet-stream", succeededID+"-result.bin")
	check(input, inputBytes, "application/json", succeededID+"-input.json")
	// JSON content type, bytes that are not JSON: octet-stream.
	e.f.mu.Lock()
	e.f.results[store.Key{TenantID: tenantAcme, ExecutionID: succeededID}] = payload.Payload{ContentType: "application/json", Data: []byte(`<html>`)}
	e.f.mu.Unlock()
	check(result, `<html>`, "application/octet-stream", succeededID+"-result.bin")
	wantContains(t, e.get("/console/executions/"+dlqID+"/result", http.StatusConflict), "The execution is DLQ")
	// Every download is logged, without its bytes.
	evs, err := logtest.Events[payloadViewed](e.logs, "payload_viewed")
	if err != nil || len(evs) != 3 {
		t.Fatalf("payload_viewed events %+v (%v), want 3", evs, err)
	}
	if v := evs[1]; v.Tenant != tenantAcme || v.ExecutionID != succeededID || v.Which != "input" || v.Via != "download" ||
		v.Bytes != len(inputBytes) || v.ClientAddress == "" {
		t.Errorf("payload_viewed %+v", v)
	}
	if strings.Contains(e.logs.String(), "input-marker") || strings.Contains(e.logs.String(), "alert(") {
		t.Error("a payload's bytes are logged")
	}
}

// payloadViewed is a payload_viewed event.
type payloadViewed struct {
	Tenant        string `json:"tenant"`
	ExecutionID   string `json:"execution_id"`
	Which         string `json:"which"`
	Via           string `json:"via"`
	Bytes         int    `json:"bytes"`
	ClientAddress string `json:"client_address"`
}

func TestPayloadsAreNotServedWithoutAToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withoutToken)
	for _, p := range []string{"/console/executions/" + succeededID + "/result", "/console/executions/" + succeededID + "/input"} {
		e.get(p, http.StatusNotFound)
	}
	body := e.get("/console/executions/"+succeededID+"?show=input,result", http.StatusOK)
	wantContains(t, body, `id="payloads-hint"`, "no operator token")
	if strings.Contains(body, "input-marker") || strings.Contains(body, "do-not-render") {
		t.Error("without a token the page shows a payload")
	}
}

func TestActionsHiddenAndRefusedWithoutAToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withoutToken)
	body := e.get("/console/executions/"+queuedID, http.StatusOK)
	for _, s := range []string{`id="login-form"`, `id="cancel-form"`, `id="redrive-form"`} {
		if strings.Contains(body, s) {
			t.Errorf("without a token the page has %s", s)
		}
	}
	wantContains(t, body, "no operator token (admin.token)")
	for _, p := range []string{"/console/login", "/console/executions/" + queuedID + "/cancel", "/console/executions/" + dlqID + "/redrive"} {
		if w := e.post(p, url.Values{"reason": {"r"}, "token": {"anything"}}); w.Code != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", p, w.Code)
		}
	}
	if c, r := e.f.calls(); len(c)+len(r) != 0 {
		t.Errorf("backend called: %v %v", c, r)
	}
}

func TestActionsNeedAnOperatorSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/executions/"+queuedID, http.StatusOK)
	if strings.Contains(body, `id="cancel-form"`) || !strings.Contains(body, `id="sign-in-hint"`) || !strings.Contains(body, `id="login-form"`) {
		t.Error("signed out: want the sign-in form and hint, no cancel form")
	}
	cancel := "/console/executions/" + queuedID + "/cancel"
	if w := e.post(cancel, url.Values{"reason": {"r"}}); w.Code != http.StatusUnauthorized {
		t.Errorf("cancel without a session: %d, want 401", w.Code)
	}
	// Forged and expired sessions.
	for _, v := range []string{"v1.9999999999.AAAA", operatorToken, "v1." + "1772638200" + ".x"} {
		e.jar[console.SessionCookie] = v
		if w := e.post(cancel, url.Values{"reason": {"r"}}); w.Code != http.StatusUnauthorized {
			t.Errorf("cancel with session %q: %d, want 401", v, w.Code)
		}
	}
	delete(e.jar, console.SessionCookie)
	// A wrong token does not sign in.
	w := e.post("/console/login", url.Values{"token": {"wrong"}})
	if w.Code != http.StatusUnauthorized || e.jar[console.SessionCookie] != "" {
		t.Errorf("wrong token: %d, session %q", w.Code, e.jar[console.SessionCookie])
	}
	if c, _ := e.f.calls(); len(c) != 0 {
		t.Errorf("backend called: %v", c)
	}
}

func TestSignInSetsAStrictHttpOnlySessionThatIsNotTheToken(t *testing.T) {
	t.Parallel()
	now := epoch
	e := newEnv(t, func(o *console.Options) { o.Now = func() time.Time { return now } })
	w := e.post("/console/login", url.Values{"token": {operatorToken}, "next": {"/console/executions/" + queuedID}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/executions/"+queuedID {
		t.Fatalf("sign-in: %d to %q", w.Code, w.Header().Get("Location"))
	}
	ck := findCookie(t, w, console.SessionCookie)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console" || ck.MaxAge != int(console.SessionTTL/time.Second) {
		t.Errorf("session cookie %+v", ck)
	}
	if strings.Contains(ck.Value, operatorToken) {
		t.Error("the session cookie holds the token")
	}
	wantContains(t, e.get("/console/executions/"+queuedID, http.StatusOK), `id="operator-badge"`, `id="cancel-form"`)
	// The session ends after SessionTTL.
	now = epoch.Add(console.SessionTTL + time.Second)
	if strings.Contains(e.get("/console/executions/"+queuedID, http.StatusOK), `id="cancel-form"`) {
		t.Error("an expired session still shows the actions")
	}
	// Sign-in never redirects off the console.
	now = epoch
	for _, next := range []string{"https://evil.example/", "//evil.example/console", "/v1/executions", "/console/../v1", "/console\\x"} {
		w := e.post("/console/login", url.Values{"token": {operatorToken}, "next": {next}})
		if loc := w.Header().Get("Location"); loc != "/console" {
			t.Errorf("next %q: redirected to %q, want /console", next, loc)
		}
	}
	// Sign-out deletes the session.
	e.post("/console/logout", url.Values{"next": {"/console"}})
	if _, ok := e.jar[console.SessionCookie]; ok {
		t.Error("sign-out kept the session")
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"event":"console_login"`) {
		t.Errorf("no console_login event:\n%s", logs)
	}
}

func TestStateChangingPostsRefuseCrossSiteAndTokenlessForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	cancel := "/console/executions/" + queuedID + "/cancel"
	cases := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no csrf field", url.Values{"reason": {"r"}, "csrf": {""}}, nil},
		{"wrong csrf field", url.Values{"reason": {"r"}, "csrf": {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}, nil},
		{"cross-site fetch", url.Values{"reason": {"r"}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"foreign origin", url.Values{"reason": {"r"}}, []string{"Origin", "https://evil.example"}},
	}
	for _, c := range cases {
		if w := e.post(cancel, c.form, c.headers...); w.Code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, w.Code)
		}
	}
	// Without the CSRF cookie, a form field alone is refused too.
	tok := e.jar[console.CSRFCookie]
	delete(e.jar, console.CSRFCookie)
	if w := e.do(http.MethodPost, cancel, url.Values{"reason": {"r"}, "csrf": {tok}}); w.Code != http.StatusForbidden {
		t.Errorf("no csrf cookie: %d, want 403", w.Code)
	}
	if c, _ := e.f.calls(); len(c) != 0 {
		t.Errorf("backend called: %v", c)
	}
	if !strings.Contains(e.logs.String(), `"event":"console_csrf_refused"`) {
		t.Error("no console_csrf_refused event")
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	cancel := func(id, reason string) *httptest.ResponseRecorder {
		return e.post("/console/executions/"+id+"/cancel", url.Values{"reason": {reason}})
	}
	// QUEUED: cancelled at once.
	w := cancel(queuedID, "  duplicate order  ")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/executions/"+queuedID+"?done=cancelled" {
		t.Fatalf("cancel queued: %d to %q", w.Code, w.Header().Get("Location"))
	}
	body := e.get(w.Header().Get("Location"), http.StatusOK)
	wantContains(t, body, `id="exec-status">CANCELLED</span>`, `id="flash">The execution is cancelled.`, "duplicate order",
		`data-type="CANCEL_REQUESTED"`, `data-type="CANCELLED"`)
	if strings.Contains(body, `id="cancel-form"`) {
		t.Error("a cancelled execution still offers cancel")
	}
	// Again: already cancelled.
	if w := cancel(queuedID, "again"); !strings.HasSuffix(w.Header().Get("Location"), "?done=already-cancelled") {
		t.Errorf("second cancel: %q", w.Header().Get("Location"))
	}
	// RUNNING: requested.
	if w := cancel(runningID, "stuck"); !strings.HasSuffix(w.Header().Get("Location"), "?done=cancel-requested") {
		t.Errorf("cancel running: %q", w.Header().Get("Location"))
	}
	// SUCCEEDED: refused, with the status.
	w = cancel(succeededID, "too late")
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "The execution is SUCCEEDED") {
		t.Errorf("cancel succeeded: %d\n%s", w.Code, w.Body)
	}
	// No reason; another tenant's execution.
	if w := cancel(dlqID, "   "); w.Code != http.StatusBadRequest {
		t.Errorf("blank reason: %d, want 400", w.Code)
	}
	if w := cancel("0195a1c2-aaaa-8000-8000-000000000000", "x"); w.Code != http.StatusNotFound {
		t.Errorf("globex's execution from acme: %d, want 404", w.Code)
	}
	got, _ := e.f.calls()
	want := []string{"acme/" + queuedID + ": duplicate order", "acme/" + queuedID + ": again", "acme/" + runningID + ": stuck",
		"acme/" + succeededID + ": too late", "acme/0195a1c2-aaaa-8000-8000-000000000000: x"}
	if !slices.Equal(got, want) {
		t.Errorf("cancels %q, want %q", got, want)
	}
	if !strings.Contains(e.logs.String(), `"event":"console_cancel"`) {
		t.Error("no console_cancel event")
	}
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	body := e.get("/console/executions/"+dlqID, http.StatusOK)
	wantContains(t, body, `id="redrive-form"`, `name="version" value="3"`, `<code>card_declined</code> the card issuer declined the charge`)
	redrive := func(id string, form url.Values) *httptest.ResponseRecorder {
		return e.post("/console/executions/"+id+"/redrive", form)
	}
	// A stale version is refused.
	if w := redrive(dlqID, url.Values{"reason": {"fixed"}, "version": {"2"}}); w.Code != http.StatusConflict {
		t.Errorf("stale version: %d, want 409", w.Code)
	}
	w := redrive(dlqID, url.Values{"reason": {"card limit raised"}, "version": {"3"}})
	if w.Code != http.StatusSeeOther || !strings.HasSuffix(w.Header().Get("Location"), "?done=redriven") {
		t.Fatalf("redrive: %d %q\n%s", w.Code, w.Header().Get("Location"), w.Body)
	}
	wantContains(t, e.get(w.Header().Get("Location"), http.StatusOK), `id="exec-status">QUEUED</span>`, "card limit raised")
	// REMOTE_OUTCOME_UNKNOWN needs the confirmation.
	wantContains(t, e.get("/console/executions/"+unknownID, http.StatusOK), `name="confirmNoRemoteEffect" value="yes" required`)
	if w := redrive(unknownID, url.Values{"reason": {"checked"}}); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "Confirm") {
		t.Errorf("unconfirmed: %d", w.Code)
	}
	if w := redrive(unknownID, url.Values{"reason": {"checked"}, "confirmNoRemoteEffect": {"yes"}}); w.Code != http.StatusSeeOther {
		t.Errorf("confirmed: %d", w.Code)
	}
	// A SUCCEEDED execution is not re-drivable.
	if w := redrive(succeededID, url.Values{"reason": {"x"}}); w.Code != http.StatusConflict {
		t.Errorf("succeeded: %d, want 409", w.Code)
	}
	_, got := e.f.calls()
	if len(got) != 5 || got[1].Reason != "card limit raised" || *got[1].ExpectedVersion != 3 || !got[3].ConfirmedNoRemoteEffect || got[2].ConfirmedNoRemoteEffect {
		t.Errorf("redrives %+v", got)
	}
}

func TestHostileStringsAreEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.jar[console.TenantCookieName] = tenantHostile
	e.signIn()
	pages := []string{
		e.get("/console", http.StatusOK),
		e.get("/console/executions/"+hostileID, http.StatusOK),
		e.get("/console/dead-letters", http.StatusOK),
		e.get("/console?pipeline="+url.QueryEscape(hostileScript), http.StatusBadRequest),
		e.get("/console?status="+url.QueryEscape(hostileImg), http.StatusBadRequest),
	}
	for i, body := range pages {
		for _, bad := range []string{"<script>alert", "<img src=x", `"><img`} {
			if strings.Contains(body, bad) {
				t.Errorf("page %d contains %q unescaped", i, bad)
			}
		}
	}
	wantContains(t, pages[1], "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;", "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;")
}

func TestDeadLettersPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/dead-letters?limit=5", http.StatusOK)
	wantContains(t, body, `<a href="/console/executions/`+dlqID+`">`, "<code>card_declined</code> the card issuer declined the charge",
		"retry_exhausted", `<td class="num">5</td>`, `id="next-page"`)
	next := unescape(matches(nextLink, body)[0])
	wantContains(t, e.get(next, http.StatusOK), "page 2", `id="first-page"`)
	if strings.Contains(e.get("/console/dead-letters?pipeline=invoices.render", http.StatusOK), dlqID) {
		t.Error("the pipeline filter kept another pipeline's dead letter")
	}
}

func TestPagesCarrySecurityHeadersAndEmbeddedAssets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.do(http.MethodGet, "/console", nil)
	h := w.Header()
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("headers %v", h)
	}
	// Every asset the page links is served from the console itself.
	refs := regexp.MustCompile(`(?:href|src)="([^"]+)"`).FindAllStringSubmatch(w.Body.String(), -1)
	for _, m := range refs {
		ref := unescape(m[1])
		if !strings.HasPrefix(ref, "/console") && !strings.HasPrefix(ref, "#") {
			t.Errorf("the page references %q outside the console", ref)
		}
		if strings.HasPrefix(ref, "/console/assets/") {
			a := e.do(http.MethodGet, ref, nil)
			if a.Code != http.StatusOK || a.Body.Len() == 0 {
				t.Errorf("asset %s: %d", ref, a.Code)
			}
			// An SVG's namespace is a name, not a fetch.
			b := strings.ReplaceAll(a.Body.String(), `xmlns="http://www.w3.org/2000/svg"`, "")
			if strings.Contains(b, "http://") || strings.Contains(b, "https://") {
				t.Errorf("asset %s names an outside URL", ref)
			}
		}
	}
	e.get("/console/assets/nope.js", http.StatusNotFound)
	e.get("/console/nowhere", http.StatusNotFound)
}

func TestUnsupportedBackendOperationsSaySo(t *testing.T) {
	t.Parallel()
	_, log := logtest.New()
	h := console.New(unsupported{newFakeBackend()}, console.Options{Logger: log})
	for _, p := range []string{"/console", "/console/dead-letters"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, nil))
		if w.Code != http.StatusNotImplemented || !strings.Contains(w.Body.String(), "not available on this deployment") {
			t.Errorf("%s: %d\n%s", p, w.Code, w.Body)
		}
	}
}

// unsupported is a backend whose deployment cannot list.
type unsupported struct{ *fakeBackend }

func (unsupported) List(context.Context, store.ListQuery) (store.ListPage, error) {
	return store.ListPage{}, console.ErrNotSupported
}

func (unsupported) DeadLetterViews(context.Context, engine.DeadLetterViewQuery) (engine.DeadLetterViewPage, error) {
	return engine.DeadLetterViewPage{}, console.ErrNotSupported
}

func TestEachRequestIsLoggedOnceWithoutItsQueryOrForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	delete(e.jar, console.TenantCookieName)
	e.get("/console?pipeline=secret-pipeline-filter", http.StatusOK)
	type reqEvent struct {
		Route  string `json:"route"`
		Status int    `json:"status"`
		Tenant string `json:"tenant"`
	}
	evs, err := logtest.Events[reqEvent](e.logs, "console_request")
	if err != nil || len(evs) != 1 || evs[0].Route != "GET /console" || evs[0].Status != 200 || evs[0].Tenant != httpapi.DefaultTenant {
		t.Fatalf("console_request events %+v (%v)", evs, err)
	}
	if strings.Contains(e.logs.String(), "secret-pipeline-filter") {
		t.Error("the query is logged")
	}
}
