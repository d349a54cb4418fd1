package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// attack is what TestEveryValueIsEscaped writes into each string that can
// reach a page: markup, both quotes and an ampersand.
const attack = `<script>alert(1)</script>"'&`

// attackForms are the only forms attack may take on a page: escaped as
// HTML (text or a quoted attribute value), escaped in a URL path then as
// HTML (an href), escaped in a URL query (a paging link).
var attackForms = []string{
	`&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;`,
	`%3Cscript%3Ealert%281%29%3C%2Fscript%3E%22%27&amp;`,
	`%3Cscript%3Ealert%281%29%3C%2Fscript%3E%22%27%26`,
}

// tenantEvil holds the executions whose every string is label+attack,
// the label (Zpipe, Zstep, ...) saying which field it is.
const (
	tenantEvil = "evil"
	evilID     = "0195a1c2-0000-8000-8000-0000000evil2"
)

// evil adds tenant evil's executions and dead letters: one that can be
// opened (a valid id) and one whose id is an attack too (listed, never
// opened: the console refuses such an id in its addresses).
func (f *fakeBackend) evil() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, id := range []string{evilID, "Zid" + attack} {
		e := f.add(tenantEvil, id, "Zpipe"+attack, store.DLQ, epoch.Add(-time.Duration(i+1)*time.Minute))
		e.PipelineVersion, e.StepName, e.IdempotencyKey = "Zversion"+attack, "Zstep"+attack, "Zkey"+attack
		e.LeaseOwner, e.LeaseExpiresAt = "Zowner"+attack, epoch.Add(time.Minute)
		e.Error = &store.Failure{Code: "Zcode" + attack, Message: "Zmsg" + attack, TerminalReason: "Zterminal" + attack}
		e.Note, e.RedriveCount = "Znote"+attack, 1
		e.CancelReason = "Zcancel" + attack
		e.Await = &store.Await{ID: "Zawait" + attack, Status: store.AwaitTimedOut}
		// A child of a parent whose id is an attack (shown as text, never
		// linked), itself the parent of a map.
		e.Parent = &store.ParentRef{ExecutionID: "Zparent" + attack, CreateToken: "Ztoken" + attack, StepIndex: 1, Index: 2, Total: 5}
		e.Children = &store.Children{StepIndex: 0, Total: 4, MaxInFlight: 2}
		at := e.CreatedAt
		f.setEvents(e.Key(), []history.Event{
			{Type: history.Submitted, At: at, Status: store.Queued},
			{Type: history.StepStarted, At: at.Add(time.Second), StepName: e.StepName, Attempt: 1, Status: store.Running, Worker: "Zworker" + attack},
			{Type: history.StepFailed, At: at.Add(2 * time.Second), StepName: e.StepName, Attempt: 1, Status: store.DLQ, Error: e.Error,
				Worker: "Zworker" + attack},
			{Type: history.Redriven, At: at.Add(3 * time.Second), StepName: e.StepName, Attempt: 2, Status: store.Queued, Reason: "Zevreason" + attack},
		})
		f.deadLetter(e, e.UpdatedAt)
		f.inputs[e.Key()] = payload.Payload{ContentType: "application/json", Data: []byte(`{"v":"Zinput<script>alert(1)</script>\"'&"}`)}
	}
}

// wantOnlyEscaped checks that each label is on the page, and that every
// occurrence of it is followed by one of attackForms; and that no raw
// script tag or quote pair is anywhere.
func wantOnlyEscaped(t *testing.T, page, body string, labels ...string) {
	t.Helper()
	for _, label := range labels {
		rest, n := body, 0
		for {
			i := strings.Index(rest, label)
			if i < 0 {
				break
			}
			n++
			rest = rest[i+len(label):]
			ok := false
			for _, form := range attackForms {
				ok = ok || strings.HasPrefix(rest, form)
			}
			if !ok {
				t.Errorf("%s: %s is followed by %q, not an escaped form", page, label, rest[:min(len(rest), 60)])
			}
		}
		if n == 0 {
			t.Errorf("%s: %s is not on the page", page, label)
		}
	}
	for _, raw := range []string{"<script>alert", `"'&`, "alert(1)</script>"} {
		if strings.Contains(body, raw) {
			t.Errorf("%s: the page contains %q", page, raw)
		}
	}
}

// TestEveryValueIsEscaped puts an attack into every string that reaches
// the pages (pipeline, step, error, worker, reasons, await, execution
// ids, the idempotency key, a child's parent id, the registered
// pipelines, the page's own address, the input shown to an operator, a
// search, a bulk re-drive's error code and reason, a tenant function's
// error naming the tenant) and checks that the list, the execution, the
// dead letters (with their counts by error code), a bulk re-drive and
// the error pages hold only its escaped forms. The idempotency key
// reaches the execution's page only.
func TestEveryValueIsEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *console.Options) { o.Pipelines = append(fixturePipelines, "Zregistered"+attack) })
	e.f.evil()
	e.jar[console.TenantCookieName] = tenantEvil
	e.signIn()

	list := e.get("/console?limit=1", http.StatusOK)
	wantOnlyEscaped(t, "list", list, "Zpipe", "Zstep", "Zcode", "Zregistered", "Zparent")
	if len(matches(nextLink, list)) != 1 {
		t.Error("list: no next page link")
	}
	list2 := e.get(unescape(matches(nextLink, list)[0]), http.StatusOK)
	wantOnlyEscaped(t, "list page 2", list2, "Zid", "Zpipe", "Zstep", "Zcode", "Zparent")
	// A filter that is no pipeline id is refused; the page does not
	// echo it.
	wantOnlyEscaped(t, "bad filter", e.get("/console?pipeline="+url.QueryEscape("Zpipe"+attack), http.StatusBadRequest))

	exec := e.get("/console/executions/"+evilID+"?show=input", http.StatusOK)
	wantOnlyEscaped(t, "execution", exec, "Zpipe", "Zversion", "Zstep", "Zowner", "Zcode", "Zmsg", "Zterminal", "Znote", "Zcancel",
		"Zawait", "Zworker", "Zevreason", "Zparent", "Zkey")
	if !strings.Contains(exec, `id="redrive-form"`) {
		t.Error("execution: the operator's re-drive form is not shown")
	}
	// The input, as JSON shows it (its quote escaped), then as HTML.
	if !strings.Contains(exec, `Zinput&lt;script&gt;alert(1)&lt;/script&gt;\&#34;&#39;&amp;`) {
		t.Error("execution: the input is not shown escaped")
	}
	if strings.Contains(exec, `id="parent-link"`) || strings.Contains(list, `rel="up"`) || !strings.Contains(exec, `id="children-notice"`) {
		t.Error("an attack parent id is linked, or the map's missing counts are not said")
	}

	dead := e.get("/console/dead-letters", http.StatusOK)
	wantOnlyEscaped(t, "dead letters", dead, "Zid", "Zpipe", "Zstep", "Zcode", "Zmsg", "Zterminal")
	if !strings.Contains(dead, `id="dl-counts"`) || !strings.Contains(dead, `id="bulk-form"`) {
		t.Error("dead letters: no counts by error code, or no bulk re-drive form")
	}

	// The page's own address is in the sign-out form.
	here := e.get("/console/dead-letters?Zhere="+attack, http.StatusOK)
	wantOnlyEscaped(t, "dead letters' address", here, "Zhere=")

	for page, body := range map[string]string{"list": list, "execution": exec, "dead letters": dead} {
		if strings.Contains(body, "Ztoken") || (page != "execution" && strings.Contains(body, "Zkey")) {
			t.Errorf("%s: the idempotency key or the parent's create token is on the page", page)
		}
	}

	// A search for an attack names it on its not-found page.
	wantOnlyEscaped(t, "search", e.get("/console/search?q="+url.QueryEscape("Zsearch"+attack), http.StatusNotFound), "Zsearch")

	// A bulk re-drive's error code and reason.
	w := e.post("/console/redrives", url.Values{"errorCode": {"Zbulkcode" + attack}, "reason": {"Zbulkreason" + attack}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("dry run: %d\n%s", w.Code, w.Body)
	}
	wantOnlyEscaped(t, "bulk re-drive", e.get(w.Header().Get("Location"), http.StatusOK), "Zbulkcode", "Zbulkreason")

	// A tenant function's error that names the tenant.
	bad := newEnv(t, func(o *console.Options) {
		o.TenantFunc = func(*http.Request) (string, error) {
			return "", fmt.Errorf("%w: tenant %s is not allowed", httpapi.ErrInvalidTenant, "Ztenant"+attack)
		}
	})
	wantOnlyEscaped(t, "error", bad.get("/console", http.StatusBadRequest), "Ztenant")
}
