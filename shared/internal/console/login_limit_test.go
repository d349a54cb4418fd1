package console_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/logtest"
)

// TestSignInIsThrottledAfterWrongTokens: ten wrong tokens from one
// address are each a 401 logged WARN operator_auth_failed (with the
// address, never the token); the next sign-in, even with the right
// token, is a 429 page with Retry-After that sets no session
// (operator_auth_throttled); a second later the right token signs in.
func TestSignInIsThrottledAfterWrongTokens(t *testing.T) {
	t.Parallel()
	now := epoch
	e := newEnv(t, func(o *console.Options) { o.Now = func() time.Time { return now } })
	for i := range authlimit.DefaultBurst {
		if w := e.post("/console/login", url.Values{"token": {"guess-" + strings.Repeat("g", i)}}); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	w := e.post("/console/login", url.Values{"token": {operatorToken}, "next": {"/console"}})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "Too many sign-in attempts") {
		t.Fatalf("the 11th sign-in: %d, Retry-After %q; body:\n%s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if _, ok := e.jar[console.SessionCookie]; ok {
		t.Fatal("a throttled sign-in set a session")
	}
	now = now.Add(time.Second)
	e.signIn()

	type event struct {
		Level, Surface string
		ClientAddr     string `json:"client_addr"`
	}
	failed, err := logtest.Events[event](e.logs, authlimit.EventFailed)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != authlimit.DefaultBurst || failed[0] != (event{Level: "WARN", Surface: "console", ClientAddr: "192.0.2.1"}) {
		t.Errorf("operator_auth_failed events: %+v", failed)
	}
	if throttled, _ := logtest.Events[event](e.logs, authlimit.EventThrottled); len(throttled) != 1 || throttled[0].Level != "WARN" {
		t.Errorf("operator_auth_throttled events: %+v", throttled)
	}
	if strings.Contains(e.logs.String(), "guess-") {
		t.Errorf("a guessed token is in the log:\n%s", e.logs)
	}
}

// TestSiteSharesTheLimitBetweenAPIAndConsole: the handler Site builds
// counts wrong tokens tried at the API's operator routes and at the
// console's sign-in against one allowance per address.
func TestSiteSharesTheLimitBetweenAPIAndConsole(t *testing.T) {
	t.Parallel()
	rt, _ := newRuntime(t)
	cfg := config.Default()
	cfg.AdminToken = operatorToken
	h := console.Site(rt, cfg, slog.New(slog.DiscardHandler))
	do := func(r *http.Request) *httptest.ResponseRecorder {
		r.RemoteAddr = "203.0.113.5:999"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range authlimit.DefaultBurst / 2 {
		r := httptest.NewRequest(http.MethodGet, "/v1/redrives/job-1", nil)
		r.Header.Set("Authorization", "Bearer wrong")
		if w := do(r); w.Code != http.StatusUnauthorized {
			t.Fatalf("API, wrong token: %d", w.Code)
		}
	}
	page := do(httptest.NewRequest(http.MethodGet, "/console", nil))
	var csrf *http.Cookie
	for _, c := range page.Result().Cookies() {
		if c.Name == console.CSRFCookie {
			csrf = c
		}
	}
	if csrf == nil {
		t.Fatalf("no CSRF cookie from /console: %d", page.Code)
	}
	login := func(token string) int {
		r := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {token}, "csrf": {csrf.Value}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(csrf)
		return do(r).Code
	}
	for range authlimit.DefaultBurst / 2 {
		if code := login("wrong"); code != http.StatusUnauthorized {
			t.Fatalf("console, wrong token: %d", code)
		}
	}
	if code := login(operatorToken); code != http.StatusTooManyRequests {
		t.Errorf("after ten wrong tokens over both doors, sign-in: %d, want 429", code)
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/redrives/job-1", nil)
	r.Header.Set("Authorization", "Bearer "+operatorToken)
	if w := do(r); w.Code != http.StatusTooManyRequests {
		t.Errorf("and the API: %d, want 429", w.Code)
	}
}
