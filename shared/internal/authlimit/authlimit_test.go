package authlimit_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/logtest"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fail makes n failed attempts of key at now, each of which must be
// let through.
func fail(t *testing.T, l *authlimit.Limiter, key string, now time.Time, n int) {
	t.Helper()
	for i := range n {
		if wait, ok := l.Begin(key, now); !ok {
			t.Fatalf("%s: attempt %d refused (retry after %v), want it let through", key, i+1, wait)
		}
	}
}

// TestBurstThenOnePerInterval: the defaults let 10 failures through at
// once, refuse the 11th with a wait of one second, let one more through
// a second later, and give the whole allowance back after ten quiet
// seconds.
func TestBurstThenOnePerInterval(t *testing.T) {
	l := authlimit.New(authlimit.Config{})
	fail(t, l, "198.51.100.7", t0, authlimit.DefaultBurst)
	wait, ok := l.Begin("198.51.100.7", t0)
	if ok || wait != time.Second {
		t.Fatalf("attempt 11 at once: ok %v, wait %v; want refused for 1s", ok, wait)
	}
	if wait, ok := l.Begin("198.51.100.7", t0.Add(400*time.Millisecond)); ok || wait != 600*time.Millisecond {
		t.Fatalf("0.4 s later: ok %v, wait %v; want refused for 0.6s", ok, wait)
	}
	fail(t, l, "198.51.100.7", t0.Add(time.Second), 1)
	if _, ok := l.Begin("198.51.100.7", t0.Add(time.Second)); ok {
		t.Fatal("a second attempt in the same second was let through")
	}
	// Ten quiet seconds after the debt's end: the whole burst again.
	back := t0.Add(11 * time.Second)
	fail(t, l, "198.51.100.7", back, authlimit.DefaultBurst)
	if _, ok := l.Begin("198.51.100.7", back); ok {
		t.Fatal("attempt 11 after recovery was let through")
	}
}

// TestSucceededGivesBackOnlyItsOwnAttempt: a success is not a failure
// (many successes in a row are never refused), does not forgive the
// client's earlier failures, and leaves other clients' counts alone.
func TestSucceededGivesBackOnlyItsOwnAttempt(t *testing.T) {
	l := authlimit.New(authlimit.Config{Burst: 3})
	for range 50 {
		fail(t, l, "operator", t0, 1)
		l.Succeeded("operator", t0)
	}
	if l.Len() != 0 {
		t.Errorf("%d clients tracked after successes only, want 0", l.Len())
	}
	fail(t, l, "attacker", t0, 2)
	fail(t, l, "attacker", t0, 1)
	l.Succeeded("attacker", t0) // the third was right
	fail(t, l, "attacker", t0, 1)
	if _, ok := l.Begin("attacker", t0); ok {
		t.Fatal("a success reset the client's earlier failures")
	}
	fail(t, l, "operator", t0, 1)
	l.Succeeded("operator", t0)
	if _, ok := l.Begin("attacker", t0); ok {
		t.Fatal("another client's success reset the attacker's failures")
	}
}

// TestClientsAreIndependent: one client's refusal does not touch another.
func TestClientsAreIndependent(t *testing.T) {
	l := authlimit.New(authlimit.Config{})
	fail(t, l, "a", t0, authlimit.DefaultBurst)
	if _, ok := l.Begin("a", t0); ok {
		t.Fatal("a over its limit was let through")
	}
	fail(t, l, "b", t0, authlimit.DefaultBurst)
}

// TestMemoryIsBounded: at most MaxClients are tracked; the client whose
// debt grew longest ago is evicted first, the newest are kept.
func TestMemoryIsBounded(t *testing.T) {
	l := authlimit.New(authlimit.Config{Burst: 2, MaxClients: 100})
	for i := range 1000 {
		fail(t, l, fmt.Sprintf("c%d", i), t0, 2)
		if n := l.Len(); n > 100 {
			t.Fatalf("%d clients tracked, want at most 100", n)
		}
	}
	if _, ok := l.Begin("c999", t0); ok {
		t.Error("the newest client was forgotten")
	}
	fail(t, l, "c0", t0, 2) // evicted long ago: a fresh allowance
	if l.Len() != 100 {
		t.Errorf("%d clients tracked, want 100", l.Len())
	}
}

// TestConcurrentGuessesCannotPassTheLimit: attempts are reserved before
// the token is checked, so a burst of parallel guesses (none of which has
// failed yet) is held to the limit too.
func TestConcurrentGuessesCannotPassTheLimit(t *testing.T) {
	l := authlimit.New(authlimit.Config{})
	let := 0
	for range 100 { // 100 guesses in flight, none finished
		if _, ok := l.Begin("x", t0); ok {
			let++
		}
	}
	if let != authlimit.DefaultBurst {
		t.Errorf("%d of 100 parallel guesses let through, want %d", let, authlimit.DefaultBurst)
	}
}

func TestClientKey(t *testing.T) {
	for addr, want := range map[string]string{
		"198.51.100.7:4711":                "198.51.100.7",
		"198.51.100.7":                     "198.51.100.7", // API Gateway's source IP has no port
		"[2001:db8:1:2:3:4:5:6]:443":       "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443":       "2001:db8:1:2::/64",
		"[::ffff:198.51.100.7]:80":         "198.51.100.7",
		"pipe":                             "pipe",
		"2001:db8:1:2:3:4:5:6":             "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":                "fe80::/64",
		"[2001:db8:aaaa:bbbb::9]:1":        "2001:db8:aaaa:bbbb::/64",
		"[2001:db8:aaaa:bbbc::9]:1":        "2001:db8:aaaa:bbbc::/64",
		"[::1]:9000":                       "::/64",
		"203.0.113.250:65535":              "203.0.113.250",
		"[2001:db8::]:1":                   "2001:db8::/64",
		"[2001:db8:0:0:1:0:0:1]:1":         "2001:db8::/64",
		"[2001:0db8:0000:0000:0000::1]:22": "2001:db8::/64",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		if got := authlimit.ClientKey(r); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 9 * time.Second: "9", 0: "1",
	} {
		if got := authlimit.RetryAfter(d); got != want {
			t.Errorf("RetryAfter(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestCheckAndDoneLog: a failure is logged as operator_auth_failed and a
// refusal as operator_auth_throttled, both WARN with the client's
// address and never the token; a success logs nothing.
func TestCheckAndDoneLog(t *testing.T) {
	logs, log := logtest.New()
	l := authlimit.New(authlimit.Config{Burst: 1})
	r := httptest.NewRequest("POST", "/v1/redrives", nil)
	r.RemoteAddr = "192.0.2.9:5555"
	r.Header.Set("Authorization", "Bearer guess-123")
	ctx := context.Background()
	if _, ok := l.Check(ctx, log, r, "api", t0); !ok {
		t.Fatal("the first attempt was refused")
	}
	l.Done(ctx, log, r, "api", t0, true)
	retry, ok := l.Check(ctx, log, r, "api", t0)
	if ok || retry != "1" {
		t.Fatalf("the second attempt: ok %v, Retry-After %q; want refused, 1", ok, retry)
	}
	out := logs.String()
	for _, want := range []string{`"level":"WARN","msg":"operator_auth_failed","event":"operator_auth_failed","surface":"api"`,
		`"level":"WARN","msg":"operator_auth_throttled","event":"operator_auth_throttled","surface":"api"`,
		`"client_addr":"192.0.2.9"`, `"retry_after_s":"1"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "guess-123") {
		t.Errorf("the log holds the token:\n%s", out)
	}
	logs2, log2 := logtest.New()
	l2 := authlimit.New(authlimit.Config{})
	if _, ok := l2.Check(ctx, log2, r, "api", t0); !ok {
		t.Fatal("refused")
	}
	l2.Done(ctx, log2, r, "api", t0, false)
	if logs2.String() != "" || l2.Len() != 0 {
		t.Errorf("a success logged %q and left %d clients tracked", logs2.String(), l2.Len())
	}
}
