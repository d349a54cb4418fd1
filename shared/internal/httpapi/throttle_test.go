package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/logtest"
)

// progress is a request to an operator route (a bulk re-drive's
// progress: it changes nothing) from addr with token.
func progress(addr, token string) req {
	r := req{method: http.MethodGet, path: "/v1/redrives/job-1", remoteAddr: addr, headers: map[string]string{}}
	if token != "" {
		r.headers["Authorization"] = "Bearer " + token
	}
	return r
}

// TestWrongOperatorTokensAreThrottled: the limiter's defaults let a
// client make 10 wrong guesses (401, each logged WARN
// operator_auth_failed with its address and never the token); the 11th
// request is 429 too-many-attempts with Retry-After, even with the right
// token, which is not looked at (operator_auth_throttled). Another
// address is not affected and its success resets nothing; a second later
// the client may try once more.
func TestWrongOperatorTokensAreThrottled(t *testing.T) {
	t.Parallel()
	var clk *clock.Fake
	e := newEnv(t, withOperator(&clk, nil, nil))
	const attacker, operator = "203.0.113.9:40000", "198.51.100.4:5555"
	for i := range authlimit.DefaultBurst {
		w := e.do(progress(attacker, "guess-"+strings.Repeat("x", i)))
		wantProblem(t, w, http.StatusUnauthorized, "unauthorized")
	}
	w := e.do(progress(attacker, adminToken))
	wantProblem(t, w, http.StatusTooManyRequests, "too-many-attempts")
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	// Another client, with the right token: served, and its success
	// leaves the attacker's count alone.
	if w := e.do(progress(operator, adminToken)); w.Code != http.StatusNotFound {
		t.Fatalf("the operator's request: %d %s, want 404 redrive-not-found", w.Code, w.Body)
	}
	wantProblem(t, e.do(progress(attacker, adminToken)), http.StatusTooManyRequests, "too-many-attempts")
	// A second later: one more try, then refused again.
	clk.Advance(time.Second)
	wantProblem(t, e.do(progress(attacker, "guess-again")), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, e.do(progress(attacker, adminToken)), http.StatusTooManyRequests, "too-many-attempts")
	// After the window, the right token works for the attacker's address too.
	clk.Advance(authlimit.DefaultBurst * time.Second)
	if w := e.do(progress(attacker, adminToken)); w.Code != http.StatusNotFound {
		t.Fatalf("after the window: %d %s", w.Code, w.Body)
	}

	type event struct {
		Level, Surface, Route string
		ClientAddr            string `json:"client_addr"`
	}
	failed, err := logtest.Events[event](e.logs, "operator_auth_failed")
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != authlimit.DefaultBurst+1 {
		t.Errorf("%d operator_auth_failed events, want %d", len(failed), authlimit.DefaultBurst+1)
	}
	for _, ev := range failed {
		if ev.Level != "WARN" || ev.ClientAddr != "203.0.113.9" || ev.Surface != "api" || ev.Route != "GET /v1/redrives/{redriveId}" {
			t.Errorf("operator_auth_failed %+v", ev)
		}
	}
	throttled, _ := logtest.Events[event](e.logs, "operator_auth_throttled")
	if len(throttled) != 3 || throttled[0].Level != "WARN" || throttled[0].ClientAddr != "203.0.113.9" {
		t.Errorf("operator_auth_throttled events %+v, want 3 WARN of the attacker", throttled)
	}
	if logs := e.logs.String(); strings.Contains(logs, "guess-") || strings.Contains(logs, adminToken) {
		t.Errorf("a token is in the log:\n%s", logs)
	}
}

// TestMissingTokenIsNotAGuess: requests without a token (a client not
// configured yet) are 401 and never throttled or logged as failures.
func TestMissingTokenIsNotAGuess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 3 * authlimit.DefaultBurst {
		wantProblem(t, e.do(progress("203.0.113.9:1", "")), http.StatusUnauthorized, "unauthorized")
	}
	if strings.Contains(e.logs.String(), "operator_auth_") {
		t.Errorf("a request without a token was logged as an attempt:\n%s", e.logs)
	}
}

// TestAuthLimiterOption: a limiter passed in Options is the one used (the
// console's sign-in shares it), with its own settings.
func TestAuthLimiterOption(t *testing.T) {
	t.Parallel()
	l := authlimit.New(authlimit.Config{Burst: 1})
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.AuthLimiter = l }))
	wantProblem(t, e.do(progress("203.0.113.9:1", "wrong")), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, e.do(progress("203.0.113.9:1", "wrong")), http.StatusTooManyRequests, "too-many-attempts")
	if l.Len() != 1 {
		t.Errorf("the given limiter tracks %d clients, want 1", l.Len())
	}
}
