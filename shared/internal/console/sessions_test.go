package console_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// instances are two console instances over the one fake backend that
// share revocations (as two Lambda instances share the state store), each
// with its own cookie jar.
func instances(t *testing.T, rev console.Revocations, now func() time.Time) (a, b *env) {
	t.Helper()
	f := newFakeBackend()
	mk := func() *env {
		logs, log := logtest.New()
		h := console.New(f, console.Options{AdminToken: operatorToken, TenantCookie: true, Pipelines: fixturePipelines, Logger: log,
			Now: now, Revocations: rev})
		return &env{t: t, f: f, h: h, logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}
	}
	return mk(), mk()
}

// isOperator reports whether the jar's cookies make the page an
// operator's (the cancel form of a QUEUED execution).
func (e *env) isOperator() bool {
	e.t.Helper()
	return strings.Contains(e.get("/console/executions/"+queuedID, http.StatusOK), `id="cancel-form"`)
}

// TestSignOutRevokesTheSessionOnEveryInstance reproduces the issue's
// "sessions stay valid after sign-out for 8 h": a cookie copied before
// the sign-out was still an operator's, on every instance. Now the
// sign-out revokes its session in the shared store: the old cookie is
// refused by the instance that signed out and by another one, for cancel
// as for the pages; a new sign-in works.
func TestSignOutRevokesTheSessionOnEveryInstance(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	a, b := instances(t, console.StoreRevocations(memory.NewStateStore(clk), clk.Now), clk.Now)
	a.signIn()
	old := a.jar[console.SessionCookie]
	if strings.Count(old, ".") != 3 || !strings.HasPrefix(old, "v2.") {
		t.Fatalf("session cookie %q: want v2.<expiry>.<id>.<mac>", old)
	}
	b.jar[console.SessionCookie] = old
	if !a.isOperator() || !b.isOperator() {
		t.Fatal("before the sign-out the session is not an operator's on both instances")
	}
	b.jar[console.CSRFCookie] = a.jar[console.CSRFCookie]

	w := a.post("/console/logout", url.Values{"next": {"/console"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d\n%s", w.Code, w.Body)
	}
	if _, ok := a.jar[console.SessionCookie]; ok {
		t.Error("sign-out kept the cookie")
	}
	// The old cookie, replayed.
	a.jar[console.SessionCookie] = old
	for name, e := range map[string]*env{"the instance that signed out": a, "another instance": b} {
		if e.isOperator() {
			t.Errorf("%s: the signed-out session still shows the actions", name)
		}
		if w := e.post("/console/executions/"+queuedID+"/cancel", url.Values{"reason": {"after sign-out"}}); w.Code != http.StatusUnauthorized {
			t.Errorf("%s: cancel with the signed-out session: %d, want 401", name, w.Code)
		}
	}
	if c, _ := a.f.calls(); len(c) != 0 {
		t.Errorf("the backend was called: %v", c)
	}
	// A new sign-in is a new session.
	b.signIn()
	if b.jar[console.SessionCookie] == old || !b.isOperator() {
		t.Error("a new sign-in after the sign-out is not an operator's")
	}
	if !strings.Contains(a.logs.String(), `"event":"console_logout"`) {
		t.Error("no console_logout event")
	}
}

// TestSignOutWithoutASharedStoreHoldsInItsProcess checks the default
// (LocalRevocations): the console that signed out refuses the cookie.
func TestSignOutWithoutASharedStoreHoldsInItsProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	old := e.jar[console.SessionCookie]
	e.post("/console/logout", url.Values{"next": {"/console"}})
	e.jar[console.SessionCookie] = old
	if e.isOperator() {
		t.Error("the signed-out session is still an operator's")
	}
}

// TestRevocationLastsUntilTheSessionsExpiry checks that a revocation is
// kept as long as its session could be used, and no longer: the store
// drops it a minute after the session's expiry.
func TestRevocationLastsUntilTheSessionsExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	js := memory.NewStateStore(clk)
	rev := console.StoreRevocations(js, clk.Now)
	ctx := context.Background()
	until := epoch.Add(console.SessionTTL)
	if err := rev.Revoke(ctx, "sid-1", until); err != nil {
		t.Fatal(err)
	}
	if err := rev.Revoke(ctx, "sid-1", until); err != nil {
		t.Errorf("a second revocation: %v", err)
	}
	for _, c := range []struct {
		at   time.Time
		want bool
	}{{epoch, true}, {until.Add(-time.Second), true}, {until.Add(59 * time.Second), true}, {until.Add(61 * time.Second), false}} {
		clk.Set(c.at)
		if got, err := rev.Revoked(ctx, "sid-1"); err != nil || got != c.want {
			t.Errorf("at %v: revoked %v (%v), want %v", c.at.Sub(epoch), got, err, c.want)
		}
	}
	if got, err := rev.Revoked(ctx, "sid-2"); err != nil || got {
		t.Errorf("a session never revoked: %v (%v)", got, err)
	}
	// The record is no job: never active, so no driver sees it.
	if jobs, err := js.ActiveJobs(ctx); err != nil || len(jobs) != 0 {
		t.Errorf("active jobs %v (%v), want none", jobs, err)
	}
}

// failingRevocations fail every call.
type failingRevocations struct{}

func (failingRevocations) Revoke(context.Context, string, time.Time) error {
	return store.ErrUnavailable
}
func (failingRevocations) Revoked(context.Context, string) (bool, error) {
	return false, store.ErrUnavailable
}

// TestSignOutThatCannotBeRecordedKeepsTheSession checks that a sign-out
// whose revocation fails says so (503) and keeps the cookie, and that a
// session whose revocation cannot be read is refused, and logged.
func TestSignOutThatCannotBeRecordedKeepsTheSession(t *testing.T) {
	t.Parallel()
	flaky := &switchable{Revocations: console.LocalRevocations(nil)}
	e := newEnv(t, func(o *console.Options) { o.Revocations = flaky })
	e.signIn()
	flaky.fail = true
	w := e.post("/console/logout", url.Values{"next": {"/console"}})
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "still valid") {
		t.Errorf("sign-out with the store down: %d\n%s", w.Code, w.Body)
	}
	if e.jar[console.SessionCookie] == "" {
		t.Error("the cookie was deleted though the session was not revoked")
	}
	if e.isOperator() {
		t.Error("a session whose revocation cannot be read is an operator's")
	}
	for _, ev := range []string{`"event":"console_logout_failed"`, `"event":"console_session_check_failed"`} {
		if !strings.Contains(e.logs.String(), ev) {
			t.Errorf("no %s", ev)
		}
	}
	flaky.fail = false
	if !e.isOperator() {
		t.Error("once the store answers, the session (never revoked) is an operator's again")
	}
}

// switchable fails while fail is set.
type switchable struct {
	console.Revocations
	fail bool
}

func (s *switchable) Revoke(ctx context.Context, id string, until time.Time) error {
	if s.fail {
		return errors.New("revocations down")
	}
	return s.Revocations.Revoke(ctx, id, until)
}

func (s *switchable) Revoked(ctx context.Context, id string) (bool, error) {
	if s.fail {
		return false, errors.New("revocations down")
	}
	return s.Revocations.Revoked(ctx, id)
}

// TestSignOutHoldsAcrossInstancesOnTheEmbeddedStore runs the revocation
// on the embedded store (qasync serve's default): two consoles, one data
// directory.
func TestSignOutHoldsAcrossInstancesOnTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	db, err := embedded.Open(t.TempDir(), embedded.Options{Clock: clk, NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	a, b := instances(t, console.StoreRevocations(db.State(nil), clk.Now), clk.Now)
	signOutRefusedElsewhere(t, a, b)
}

// signOutRefusedElsewhere signs in on a, out on a, and checks that b
// refuses the old cookie.
func signOutRefusedElsewhere(t *testing.T, a, b *env) {
	t.Helper()
	a.signIn()
	old := a.jar[console.SessionCookie]
	b.jar[console.SessionCookie] = old
	if !b.isOperator() {
		t.Fatal("the other instance does not accept the session")
	}
	if w := a.post("/console/logout", url.Values{"next": {"/console"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d\n%s", w.Code, w.Body)
	}
	if b.isOperator() {
		t.Error("the other instance accepts the signed-out session")
	}
}

// TestSignOutOnDynamoDBCostsOneReadPerRequest runs the revocation on
// DynamoDB (the local stack): the other instance refuses a signed-out
// session, and what docs/console.md states holds: a request with a
// session reads one item (a GetItem), a request without one reads
// nothing, a sign-out writes one item.
func TestSignOutOnDynamoDBCostsOneReadPerRequest(t *testing.T) {
	t.Parallel()
	clients, counter := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(n.ExecutionTable))
	clk := clock.NewFake(epoch)
	st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	a, b := instances(t, console.StoreRevocations(st, clk.Now), clk.Now)
	a.get("/console", http.StatusOK)
	counter.Reset()
	a.get("/console", http.StatusOK)
	if got := counter.Snapshot(); len(got) != 0 {
		t.Errorf("a request without a session called %v, want nothing", got)
	}
	a.signIn()
	counter.Reset()
	a.get("/console/executions/"+queuedID, http.StatusOK)
	if got := counter.Snapshot(); !maps.Equal(got, map[string]int{"DynamoDB.GetItem": 1}) {
		t.Errorf("a request with a session called %v, want one GetItem", got)
	}
	old := a.jar[console.SessionCookie]
	counter.Reset()
	if w := a.post("/console/logout", url.Values{"next": {"/console"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d\n%s", w.Code, w.Body)
	}
	if got := counter.Snapshot(); !maps.Equal(got, map[string]int{"DynamoDB.PutItem": 1}) {
		t.Errorf("the sign-out called %v, want one PutItem", got)
	}
	b.jar[console.SessionCookie] = old
	if b.isOperator() {
		t.Error("the other instance accepts the signed-out session")
	}
}
