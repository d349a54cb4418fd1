package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// dlRowNow matches a dead-letter row's outstanding mark, execution id and
// status now ("gone" for none).
var dlRowNow = regexp.MustCompile(`(?s)<tr(?: class="outstanding")? data-outstanding="(true|false)">\s*<td>.*?</td>\s*<td class="id">(?:<a href="[^"]+">)?([^<]+)(?:</a>)?</td>\s*<td class="now">(?:<a href="[^"]+">)?(?:<span class="badge s-[a-z-]+">([A-Z_]+)</span>|<span class="muted" title="[^"]+">(gone)</span>)`)

// dlNow maps each row's execution to "STATUS" or "gone", with
// "+outstanding" when the row is marked so.
func dlNow(body string) map[string]string {
	out := map[string]string{}
	for _, m := range dlRowNow.FindAllStringSubmatch(body, -1) {
		now := m[3] + m[4]
		if m[1] == "true" {
			now += "+outstanding"
		}
		out[m[2]] = now
	}
	return out
}

// TestDeadLettersTellWhatBecameOfTheirExecutions reproduces the issue's
// "the dead-letter list tells the truth": a dead letter whose execution
// was re-driven and succeeded looked as failed as any. Now each row says
// the execution's status now (linked), how often it was re-driven,
// "gone" when its row expired, and whether the failure is outstanding;
// the filter keeps the outstanding ones across pages; the first page
// counts the records by error code.
func TestDeadLettersTellWhatBecameOfTheirExecutions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/dead-letters?limit=200", http.StatusOK)
	now := dlNow(body)
	for id, want := range map[string]string{dlqID: "DLQ+outstanding", showcaseID: "SUCCEEDED", goneID: "gone", hostileID: ""} {
		if now[id] != want {
			t.Errorf("dead letter of %s: now %q, want %q", id, now[id], want)
		}
	}
	wantContains(t, body, `<a href="/console/executions/`+showcaseID+`"><span class="badge s-succeeded">SUCCEEDED</span></a> <span class="muted">re-driven 1×</span>`)

	// Outstanding only, kept across pages.
	seen := 0
	target := "/console/dead-letters?outstanding=1&limit=5"
	for pages := 0; target != ""; pages++ {
		body := e.get(target, http.StatusOK)
		for id, n := range dlNow(body) {
			if !strings.HasSuffix(n, "+outstanding") {
				t.Errorf("outstanding only: %s is %q", id, n)
			}
			seen++
		}
		wantContains(t, body, `id="outstanding-only" checked`)
		target = ""
		if next := matches(nextLink, body); len(next) == 1 {
			target = unescape(next[0])
			if u, _ := url.Parse(target); u.Query().Get("outstanding") != "1" {
				t.Fatalf("next link %q drops the filter", target)
			}
		}
		if pages > 20 {
			t.Fatal("paging does not end")
		}
	}
	if want := strings.Count(strings.Join(mapValues(now), " "), "+outstanding"); seen != want || seen < 6 {
		t.Errorf("outstanding only listed %d, want the %d outstanding", seen, want)
	}

	// The counts by error code, all records.
	counts := countsOf(body)
	if counts["card_declined"] != [2]string{"1", "1"} || counts["label_rejected"] != [2]string{"1", "0"} || counts["template_missing"] != [2]string{"1", "0"} {
		t.Errorf("counts %v", counts)
	}
	wantContains(t, body, "<caption>All ")
	// Bounded: of the newest N.
	e.f.mu.Lock()
	e.f.countLimit = 4
	e.f.mu.Unlock()
	wantContains(t, e.get("/console/dead-letters", http.StatusOK), `<caption>Of the newest 4 records`)
}

// countsOf reads the counts table: error code to (records, outstanding).
func countsOf(body string) map[string][2]string {
	out := map[string][2]string{}
	re := regexp.MustCompile(`<tr data-code="([^"]*)"><td>.*?</td><td class="num">(\d+)</td><td class="num">(\d+)</td></tr>`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		out[m[1]] = [2]string{m[2], m[3]}
	}
	return out
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestBulkRedriveIsAnOperatorsAndCSRFChecked checks who may start a bulk
// re-drive: the form is an operator's; a post without a session, from
// another site or without the CSRF token is refused before the backend
// is asked; without a token the routes are 404.
func TestBulkRedriveIsAnOperatorsAndCSRFChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := e.get("/console/dead-letters", http.StatusOK)
	if strings.Contains(body, `id="bulk-form"`) || !strings.Contains(body, `id="bulk-hint"`) {
		t.Error("signed out: the bulk re-drive form is shown")
	}
	form := url.Values{"reason": {"r"}}
	if w := e.post("/console/redrives", form); w.Code != http.StatusUnauthorized {
		t.Errorf("dry run without a session: %d, want 401", w.Code)
	}
	e.signIn()
	wantContains(t, e.get("/console/dead-letters", http.StatusOK), `id="bulk-form"`, `<option value="card_declined">`)
	if w := e.post("/console/redrives", url.Values{"reason": {"r"}, "csrf": {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}); w.Code != http.StatusForbidden {
		t.Errorf("dry run with a wrong CSRF token: %d, want 403", w.Code)
	}
	if w := e.post("/console/redrives", url.Values{"reason": {"r"}}, "Sec-Fetch-Site", "cross-site"); w.Code != http.StatusForbidden {
		t.Errorf("cross-site dry run: %d, want 403", w.Code)
	}
	if s := e.f.bulkStarts(); len(s) != 0 {
		t.Errorf("the backend started %v", s)
	}
	off := newEnv(t, withoutToken)
	if w := off.post("/console/redrives", form); w.Code != http.StatusNotFound {
		t.Errorf("without a token: %d, want 404", w.Code)
	}
	off.get("/console/redrives/00000000000000000000000000000001", http.StatusNotFound)
}

// TestBulkRedriveDryRunThenStart runs the bulk re-drive form: a dry run
// of the filter, its page with the count and the start form, the start
// (the dry run's own filter, reason and rate, keyed by the dry run so
// that a second post starts nothing more), and the job's progress page.
func TestBulkRedriveDryRunThenStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	w := e.post("/console/redrives", url.Values{"pipeline": {"checkout.deliver-order"}, "errorCode": {"validation_failed"},
		"status": {"DLQ"}, "createdAfter": {"2026-03-04T12:00"}, "rate": {"25"}, "reason": {"  address service fixed  "}})
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/console/redrives/") {
		t.Fatalf("dry run: %d to %q\n%s", w.Code, w.Header().Get("Location"), w.Body)
	}
	starts := e.f.bulkStarts()
	want := engine.RedrivesOptions{Filter: engine.RedriveFilter{PipelineID: "checkout.deliver-order", ErrorCode: "validation_failed",
		Statuses: []store.Status{store.DLQ}, CreatedAfter: time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)},
		Reason: "address service fixed", RatePerSecond: 25, DryRun: true}
	if len(starts) != 1 || !sameOptions(starts[0], want) {
		t.Fatalf("dry run options %+v, want %+v", starts, want)
	}
	dryPage := w.Header().Get("Location")
	body := e.get(dryPage, http.StatusOK)
	n := regexp.MustCompile(`<p id="bulk-matched">(\d+) executions match.</p>`).FindStringSubmatch(body)
	if want := e.f.matching(want.Filter); n == nil || n[1] != strconv.Itoa(want) || want == 0 {
		t.Fatalf("the dry run's page shows %v, want %d matching\n%s", n, want, body)
	}
	wantContains(t, body, `id="bulk-start">Re-drive these `+n[1]+` executions</button>`, "<code>validation_failed</code>", "25 a second",
		`id="bulk-reason">address service fixed</dd>`)
	if e.f.matching(want.Filter) == 0 {
		t.Fatal("the dry run re-drove")
	}

	w = e.post(dryPage+"/start", nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("start: %d\n%s", w.Code, w.Body)
	}
	jobPage := w.Header().Get("Location")
	starts = e.f.bulkStarts()
	dry, _ := e.f.RedriveJob(t.Context(), tenantAcme, strings.TrimPrefix(dryPage, "/console/redrives/"))
	if len(starts) != 2 || starts[1].DryRun || !sameFilter(starts[1].Filter, dry.Filter) || starts[1].Reason != dry.Reason ||
		starts[1].RatePerSecond != 25 || starts[1].IdempotencyKey == "" || starts[1].Filter.CreatedBefore.IsZero() {
		t.Fatalf("start options %+v, want the dry run's filter %+v (its cut-off too), reason and rate, with a key", starts[1:], dry.Filter)
	}
	body = e.get(jobPage, http.StatusOK)
	wantContains(t, body, `<td class="num" data-count="matched">`+n[1]+`</td>`, `<td class="num" data-count="redriven">`+n[1]+`</td>`,
		`id="bulk-done">done</span>`)
	// The dead letters now tell it.
	left := dlNow(e.get("/console/dead-letters?outstanding=1&pipeline=checkout.deliver-order&limit=200", http.StatusOK))
	if len(left) != 1 || left[dlqID] != "DLQ+outstanding" {
		t.Errorf("outstanding after the re-drive: %v, want only %s (another error code)", left, dlqID)
	}
	// The start form sent again starts nothing more.
	if w := e.post(dryPage+"/start", nil); w.Code != http.StatusSeeOther || w.Header().Get("Location") != jobPage {
		t.Errorf("second start: %d to %q, want the same job %s", w.Code, w.Header().Get("Location"), jobPage)
	}
	// A job that is no dry run cannot be started; an unknown one is 404.
	if w := e.post(jobPage+"/start", nil); w.Code != http.StatusConflict {
		t.Errorf("start of a running job: %d, want 409", w.Code)
	}
	e.get("/console/redrives/ffffffffffffffffffffffffffffffff", http.StatusNotFound)
	// Another tenant's job is not found.
	e.jar["qasync_console_tenant"] = tenantOther
	e.get(jobPage, http.StatusNotFound)
	for _, ev := range []string{`"event":"console_bulk_redrive_dry_run"`, `"event":"console_bulk_redrive_started"`} {
		if !strings.Contains(e.logs.String(), ev) {
			t.Errorf("no %s", ev)
		}
	}
}

// TestBulkRedriveRefusesABadForm checks each field of the form.
func TestBulkRedriveRefusesABadForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	for name, c := range map[string]struct {
		form url.Values
		says string
	}{
		"no reason":       {url.Values{}, "Give a reason"},
		"bad pipeline":    {url.Values{"reason": {"r"}, "pipeline": {"a b"}}, "A pipeline id is"},
		"queued":          {url.Values{"reason": {"r"}, "status": {"QUEUED"}}, "takes DLQ and FAILED executions"},
		"rate zero":       {url.Values{"reason": {"r"}, "rate": {"0"}}, "from 1 to 1000"},
		"rate too high":   {url.Values{"reason": {"r"}, "rate": {"1001"}}, "from 1 to 1000"},
		"bad time":        {url.Values{"reason": {"r"}, "createdBefore": {"soon"}}, "“Created before” must be a time"},
		"long error code": {url.Values{"reason": {"r"}, "errorCode": {strings.Repeat("x", 129)}}, "at most 128 bytes"},
	} {
		w := e.post("/console/redrives", c.form)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s: %d, want 400 saying %q\n%s", name, w.Code, c.says, w.Body)
		}
	}
	if s := e.f.bulkStarts(); len(s) != 0 {
		t.Errorf("the backend started %v", s)
	}
	// A dry run that matched nothing offers no start.
	w := e.post("/console/redrives", url.Values{"reason": {"r"}, "errorCode": {"no_such_code"}})
	body := e.get(w.Header().Get("Location"), http.StatusOK)
	wantContains(t, body, `<p id="bulk-matched">0 executions match.</p>`, `id="bulk-nothing"`)
	if w := e.post(w.Header().Get("Location")+"/start", nil); w.Code != http.StatusConflict {
		t.Errorf("start of an empty dry run: %d, want 409", w.Code)
	}
}

// TestBulkRedrivePageShowsAJobInProgress checks a job the sweeper is
// still driving: its progress so far, and the auto-refresh.
func TestBulkRedrivePageShowsAJobInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.signIn()
	const id = "0000000000000000000000000000abcd"
	e.f.mu.Lock()
	e.f.jobs[tenantAcme+"/"+id] = engine.RedriveJob{ID: id, Matched: 40, Redriven: 12, Skipped: 2, Failed: 1, Reason: "r", RatePerSecond: 10,
		Filter: engine.RedriveFilter{Statuses: []store.Status{store.DLQ, store.Failed}, CreatedBefore: epoch}, CreatedAt: epoch}
	e.f.mu.Unlock()
	wantContains(t, e.get("/console/redrives/"+id, http.StatusOK), `<progress id="bulk-progress" max="40" value="15"></progress> 15 of 40 handled`,
		`id="bulk-running"`, `id="auto-refresh"`, `<td class="num error" data-count="failed">1</td>`)
}

// matching counts tenant acme's executions that f matches (DLQ or
// FAILED).
func (f *fakeBackend) matching(filter engine.RedriveFilter) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.execs {
		if e.TenantID == tenantAcme && slices.Contains(filter.Statuses, e.Status) && (filter.PipelineID == "" || e.PipelineID == filter.PipelineID) &&
			(filter.ErrorCode == "" || (e.Error != nil && e.Error.Code == filter.ErrorCode)) && e.CreatedAt.After(filter.CreatedAfter) {
			n++
		}
	}
	return n
}

func sameFilter(a, b engine.RedriveFilter) bool {
	return a.PipelineID == b.PipelineID && a.ErrorCode == b.ErrorCode && slices.Equal(a.Statuses, b.Statuses) &&
		a.CreatedAfter.Equal(b.CreatedAfter) && a.CreatedBefore.Equal(b.CreatedBefore)
}

func sameOptions(a, b engine.RedrivesOptions) bool {
	return sameFilter(a.Filter, b.Filter) && a.Reason == b.Reason && a.RatePerSecond == b.RatePerSecond && a.DryRun == b.DryRun &&
		a.IdempotencyKey == b.IdempotencyKey
}
