package console_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// fakeBulkStatuses are the statuses a bulk job of action takes by default.
func fakeBulkStatuses(a engine.BulkAction) []store.Status {
	switch a {
	case engine.BulkPause:
		return []store.Status{store.Queued, store.WaitRetry, store.WaitingExternal, store.Running, store.WaitingChildren}
	case engine.BulkResume:
		return []store.Status{store.Paused}
	}
	return []store.Status{store.DLQ, store.Failed}
}

// fakeBulkPause pauses or resumes e as the engine does (no commit to
// wait for: a RUNNING row is parked at once).
func fakeBulkPause(e *store.Execution, a engine.BulkAction, reason string) {
	e.Version++
	if a == engine.BulkPause {
		e.PausedFrom, e.Status, e.PauseReason = e.Status, store.Paused, reason
		return
	}
	e.Status, e.PausedFrom = cmp.Or(e.PausedFrom, store.Queued), ""
}

// Pause implements console.Backend as the engine does: QUEUED and the
// waiting statuses are PAUSED at once, RUNNING and WAITING_CHILDREN
// record the request.
func (f *fakeBackend) Pause(_ context.Context, key store.Key, opts engine.PauseOptions) (store.Execution, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[key]
	switch {
	case !ok:
		return store.Execution{}, false, store.ErrNotFound
	case e.Status == store.Paused || !e.PauseRequestedAt.IsZero():
		return *e, false, nil
	case e.Status == store.Running || e.Status == store.WaitingChildren:
		e.Version++
		e.PauseReason, e.PauseRequestedAt = opts.Reason, f.now
		return *e, true, nil
	case e.Status == store.Queued || e.Status == store.WaitRetry || e.Status == store.WaitingExternal:
		e.Version++
		e.PauseReason, e.PauseRequestedAt, e.PausedFrom, e.Status = opts.Reason, f.now, e.Status, store.Paused
		return *e, true, nil
	}
	return *e, false, fmt.Errorf("%w: status %s", engine.ErrNotPausable, e.Status)
}

// Resume implements console.Backend as the engine does.
func (f *fakeBackend) Resume(_ context.Context, key store.Key, _ engine.PauseOptions) (store.Execution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[key]
	switch {
	case !ok:
		return store.Execution{}, store.ErrNotFound
	case e.Status == store.Paused:
		e.Version++
		e.Status, e.PausedFrom, e.PauseRequestedAt = cmp.Or(e.PausedFrom, store.Queued), "", timeZero
		return *e, nil
	case !e.PauseRequestedAt.IsZero():
		e.Version++
		e.PauseRequestedAt = timeZero
		return *e, nil
	}
	return *e, fmt.Errorf("%w: status %s", engine.ErrNotPaused, e.Status)
}

var timeZero time.Time

// TestPauseAndResumeFromTheExecutionPage pauses a QUEUED execution from
// its page (an operator's, CSRF-checked form with a reason), sees the
// paused state and its reason, resumes it; a RUNNING one gets a request,
// withdrawn by the resume; an ended one is refused.
func TestPauseAndResumeFromTheExecutionPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	post := func(id, action, reason string) *httptest.ResponseRecorder {
		return e.post("/console/executions/"+id+"/"+action, url.Values{"reason": {reason}})
	}
	body := e.get("/console/executions/"+queuedID, http.StatusOK)
	if strings.Contains(body, `id="pause-form"`) {
		t.Error("signed out: the pause form is shown")
	}
	if w := post(queuedID, "pause", "x"); w.Code != http.StatusUnauthorized {
		t.Errorf("pause without a session: %d, want 401", w.Code)
	}
	e.signIn()
	wantContains(t, e.get("/console/executions/"+queuedID, http.StatusOK), `id="pause-form"`, `id="pause-button">Pause execution</button>`)
	if w := e.post("/console/executions/"+queuedID+"/pause", url.Values{"reason": {"r"}, "csrf": {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}); w.Code != http.StatusForbidden {
		t.Errorf("pause with a wrong CSRF token: %d, want 403", w.Code)
	}
	if w := post(queuedID, "pause", "   "); w.Code != http.StatusBadRequest {
		t.Errorf("pause without a reason: %d, want 400", w.Code)
	}
	if st := e.f.status(queuedID); st != store.Queued {
		t.Fatalf("refused pauses changed the execution: %s", st)
	}
	w := post(queuedID, "pause", "  supplier outage  ")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/executions/"+queuedID+"?done=paused" {
		t.Fatalf("pause queued: %d to %q", w.Code, w.Header().Get("Location"))
	}
	body = e.get(w.Header().Get("Location"), http.StatusOK)
	wantContains(t, body, `id="exec-status">PAUSED</span>`, `id="flash">The execution is paused`, `id="pause-state"`,
		`id="pause-reason">supplier outage</span>`, `a resume returns it to QUEUED`, `id="resume-button">Resume execution</button>`)
	if strings.Contains(body, `id="pause-form"`) {
		t.Error("a paused execution still offers pause")
	}
	if w := post(queuedID, "resume", "supplier back"); !strings.HasSuffix(w.Header().Get("Location"), "?done=resumed") {
		t.Errorf("resume: %d to %q", w.Code, w.Header().Get("Location"))
	}
	if st := e.f.status(queuedID); st != store.Queued {
		t.Errorf("resumed to %s, want QUEUED", st)
	}
	if w := post(queuedID, "resume", "again"); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "nothing to resume") {
		t.Errorf("resume of a queued execution: %d\n%s", w.Code, w.Body)
	}
	// RUNNING: a request, shown, then withdrawn.
	if w := post(runningID, "pause", "hold it"); !strings.HasSuffix(w.Header().Get("Location"), "?done=pause-requested") {
		t.Errorf("pause running: %q", w.Header().Get("Location"))
	}
	wantContains(t, e.get("/console/executions/"+runningID, http.StatusOK), `id="pause-state">Pause requested`, `id="pause-reason">hold it</span>`,
		`id="resume-button">Withdraw the pause request</button>`)
	if w := post(runningID, "resume", "never mind"); !strings.HasSuffix(w.Header().Get("Location"), "?done=pause-withdrawn") {
		t.Errorf("withdraw: %q", w.Header().Get("Location"))
	}
	// SUCCEEDED: refused, with the status.
	if w := post(succeededID, "pause", "too late"); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "The execution is SUCCEEDED") {
		t.Errorf("pause succeeded: %d\n%s", w.Code, w.Body)
	}
	if !strings.Contains(e.logs.String(), `"event":"console_pause"`) || !strings.Contains(e.logs.String(), `"event":"console_resume"`) {
		t.Error("no console_pause or console_resume event")
	}
}

// TestListOffersPausedAndTheBulkPauseForms: the executions page's status
// filter has PAUSED; an operator gets the bulk pause and resume forms,
// each offering the statuses its action takes.
func TestListOffersPausedAndTheBulkPauseForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console", http.StatusOK)
	wantContains(t, body, `name="status" value="PAUSED"`)
	if strings.Contains(body, `id="bulk-pause-form"`) {
		t.Error("signed out: the bulk pause form is shown")
	}
	e.signIn()
	body = e.get("/console?status=PAUSED", http.StatusOK)
	wantContains(t, body, `id="bulk-pause-form"`, `action="/console/pauses"`, `id="bulk-resume-form"`, `action="/console/resumes"`,
		`id="bulk-pause-dry-run"`, `id="bulk-resume-dry-run"`)
	form := body[strings.Index(body, `id="bulk-resume-form"`):]
	if strings.Contains(form, `value="QUEUED"`) || !strings.Contains(form, `value="PAUSED"`) {
		t.Error("the bulk resume form does not offer exactly PAUSED")
	}
	if w := e.post("/console/pauses", url.Values{"status": {"DLQ"}, "reason": {"r"}}); w.Code != http.StatusBadRequest ||
		!strings.Contains(w.Body.String(), "A bulk pause takes QUEUED") {
		t.Errorf("bulk pause of DLQ executions: %d\n%s", w.Code, w.Body)
	}
}

// TestBulkPauseDryRunThenStartOnceThenResume runs the bulk pause form: a
// dry run, its page, the start (keyed by the dry run: a second post
// starts no other job), the progress page; then a bulk resume. A pause
// job is not found at the re-drives' address.
func TestBulkPauseDryRunThenStartOnceThenResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	w := e.post("/console/pauses", url.Values{"status": {"QUEUED"}, "rate": {"10"}, "reason": {"supplier outage"}})
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/console/pauses/") {
		t.Fatalf("dry run: %d to %q\n%s", w.Code, w.Header().Get("Location"), w.Body)
	}
	dryPage := w.Header().Get("Location")
	body := e.get(dryPage, http.StatusOK)
	n := regexp.MustCompile(`<p id="bulk-matched">(\d+) executions match.</p>`).FindStringSubmatch(body)
	if n == nil || n[1] == "0" {
		t.Fatalf("the dry run's page shows %v\n%s", n, body)
	}
	wantContains(t, body, `id="bulk-start">Pause these `+n[1]+` executions</button>`, `<a href="/console">Executions</a>`)
	e.get(strings.Replace(dryPage, "/pauses/", "/redrives/", 1), http.StatusNotFound)
	if st := e.f.status(queuedID); st != store.Queued {
		t.Fatalf("the dry run paused: %s", st)
	}
	first := e.post(dryPage+"/start", nil)
	second := e.post(dryPage+"/start", nil)
	if first.Code != http.StatusSeeOther || second.Header().Get("Location") != first.Header().Get("Location") {
		t.Fatalf("two starts: %d to %q and %q", first.Code, first.Header().Get("Location"), second.Header().Get("Location"))
	}
	starts := e.f.bulkStarts()
	if len(starts) != 3 || starts[1].Action != engine.BulkPause || starts[1].IdempotencyKey == "" || starts[2].IdempotencyKey != starts[1].IdempotencyKey {
		t.Fatalf("starts %+v, want the dry run and two keyed pause starts", starts)
	}
	body = e.get(first.Header().Get("Location"), http.StatusOK)
	wantContains(t, body, `<th scope="col">Paused</th>`, `<td class="num" data-count="redriven">`+n[1]+`</td>`, `id="bulk-done">done</span>`)
	if st := e.f.status(queuedID); st != store.Paused {
		t.Fatalf("after the bulk pause: %s, want PAUSED", st)
	}
	w = e.post("/console/resumes", url.Values{"reason": {"supplier back"}})
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/console/resumes/") {
		t.Fatalf("resume dry run: %d to %q\n%s", w.Code, w.Header().Get("Location"), w.Body)
	}
	if w := e.post(w.Header().Get("Location")+"/start", nil); w.Code != http.StatusSeeOther {
		t.Fatalf("resume start: %d\n%s", w.Code, w.Body)
	}
	if st := e.f.status(queuedID); st != store.Queued {
		t.Errorf("after the bulk resume: %s, want QUEUED", st)
	}
}

// status is the acme execution id's status now.
func (f *fakeBackend) status(id string) store.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.execs[store.Key{TenantID: tenantAcme, ExecutionID: id}]; ok {
		return e.Status
	}
	return ""
}
