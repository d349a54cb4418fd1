package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
)

// scheduleRow finds a schedule's row on the schedules page.
var scheduleRow = regexp.MustCompile(`<tr data-schedule="(sch-[0-9a-f]+)">`)

// TestSchedulesPageOverTheRealRuntime creates a schedule with the form
// (a refused spec first: the problem shows next to the spec field, the
// form keeps what was typed), lets the engine fire it, and pauses,
// resumes and deletes it with its buttons: the list shows the next fire
// time, the last run, the counts and the paused state.
func TestSchedulesPageOverTheRealRuntime(t *testing.T) {
	t.Parallel()
	rt, _ := newRuntime(t)
	logs, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: log, Pipelines: []string{"echo"}}),
		logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}

	body := e.get("/console/schedules", http.StatusOK)
	wantContains(t, body, `id="no-schedules"`, `id="schedule-hint"`, `href="/console/schedules" aria-current="page">Schedules</a>`)
	if strings.Contains(body, `id="schedule-form"`) {
		t.Error("the create form is shown to a signed-out browser")
	}
	e.signIn()

	w := e.post("/console/schedules", url.Values{"pipeline": {"echo"}, "spec": {"every day"}, "timeZone": {"Europe/Paris"}, "overlap": {"BUFFER_ONE"}, "catchupLimit": {"2"}})
	if w.Code != http.StatusBadRequest {
		t.Fatalf("a bad spec: status %d, want 400", w.Code)
	}
	wantContains(t, w.Body.String(), `id="sch-spec-problem"`, `value="every day"`, `value="Europe/Paris"`, `value="BUFFER_ONE" selected`, `aria-invalid="true"`)
	if strings.Contains(w.Body.String(), `id="sch-zone-problem"`) {
		t.Error("a problem is shown next to a field that has none")
	}
	w = e.post("/console/schedules", url.Values{"pipeline": {"echo"}, "spec": {"@every 1m"}, "catchupLimit": {"many"}})
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `id="sch-catchup-problem"`) {
		t.Fatalf("a catch-up limit that is no number: status %d, want 400 with the problem next to its field", w.Code)
	}

	w = e.post("/console/schedules", url.Values{"pipeline": {"echo"}, "spec": {"@every 1m"}, "timeZone": {"UTC"}, "overlap": {"SKIP"}, "catchupLimit": {"1"}, "input": {`{"a":1}`}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/schedules?done=created" {
		t.Fatalf("create: status %d, location %q", w.Code, w.Header().Get("Location"))
	}
	if _, err := rt.DriveSchedules(context.Background()); err != nil {
		t.Fatal(err)
	}
	body = e.get("/console/schedules?done=created", http.StatusOK)
	ids := matches(scheduleRow, body)
	if len(ids) != 1 {
		t.Fatalf("the list shows %d schedules, want 1", len(ids))
	}
	id := ids[0]
	wantContains(t, body, `id="flash">The schedule is created.`, `<code>@every 1m</code>`, `<td class="fired">1</td>`, `<td class="skipped">0</td>`,
		`<span class="badge">ACTIVE</span>`, `<td class="next-fire"><time datetime="2026-03-04T15:31:00Z"`, `<td class="last-run"><time datetime="2026-03-04T15:30:00Z"`,
		`<a href="/console/executions/`+engine.ExecutionSlot(tenantAcme, "schedule:"+id+":2026-03-04T15:30:00Z")+`">execution</a>`)

	w = e.post("/console/schedules/"+id+"/pause", nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("pause: status %d", w.Code)
	}
	body = e.get("/console/schedules?done=paused", http.StatusOK)
	wantContains(t, body, `<span class="badge">PAUSED</span>`, `class="schedule-resume">Resume</button>`, `<td class="next-fire">-</td>`)
	if s, _ := rt.GetSchedule(context.Background(), tenantAcme, id); !s.Paused {
		t.Error("the pause button did not pause the schedule")
	}
	if w = e.post("/console/schedules/"+id+"/resume", nil); w.Code != http.StatusSeeOther {
		t.Fatalf("resume: status %d", w.Code)
	}
	wantContains(t, e.get("/console/schedules", http.StatusOK), `<span class="badge">ACTIVE</span>`, `class="schedule-pause">Pause</button>`)
	if w = e.post("/console/schedules/"+id+"/delete", nil); w.Code != http.StatusSeeOther {
		t.Fatalf("delete: status %d", w.Code)
	}
	wantContains(t, e.get("/console/schedules?done=deleted", http.StatusOK), `id="no-schedules"`, "The schedule is deleted")
	if w = e.post("/console/schedules/"+id+"/pause", nil); w.Code != http.StatusNotFound {
		t.Errorf("pausing a deleted schedule: status %d, want 404", w.Code)
	}
	wantContains(t, logs.String(), `"event":"console_schedule_created"`, `"event":"console_schedule_paused"`, `"event":"console_schedule_deleted"`)
}

// TestScheduleFormsAreOperatorOnlyAndCSRFChecked: a create or an action
// without the CSRF token is refused (403), without an operator session
// too (401), and nothing is created.
func TestScheduleFormsAreOperatorOnlyAndCSRFChecked(t *testing.T) {
	t.Parallel()
	rt, _ := newRuntime(t)
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: slog.New(slog.DiscardHandler)}),
		jar: map[string]string{console.TenantCookieName: tenantAcme}}
	form := url.Values{"pipeline": {"echo"}, "spec": {"@hourly"}}
	if w := e.post("/console/schedules", form); w.Code != http.StatusUnauthorized {
		t.Errorf("create without an operator session: status %d, want 401", w.Code)
	}
	e.signIn()
	forged := url.Values{"pipeline": {"echo"}, "spec": {"@hourly"}, "csrf": {"forged-token-value-000000000000000"}}
	if w := e.post("/console/schedules", forged); w.Code != http.StatusForbidden {
		t.Errorf("create with a forged CSRF token: status %d, want 403", w.Code)
	}
	if w := e.post("/console/schedules/sch-00/pause", url.Values{"csrf": {"x"}}); w.Code != http.StatusForbidden {
		t.Errorf("pause with a forged CSRF token: status %d, want 403", w.Code)
	}
	if list, _ := rt.ListSchedules(context.Background(), tenantAcme); len(list) != 0 {
		t.Errorf("refused forms created %d schedules", len(list))
	}
}

// TestSchedulesNotAvailableWithoutScheduleOperations: a backend without
// the engine's schedule operations answers the page with 501.
func TestSchedulesNotAvailableWithoutScheduleOperations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantContains(t, e.get("/console/schedules", http.StatusNotImplemented), "Schedules is not available on this deployment")
}

// TestSchedulesInChromium: in headless Chromium, an operator opens the
// schedules page from the navigation, sends a spec the engine refuses
// (the problem shows next to the field), creates a schedule, pauses,
// resumes and deletes it.
func TestSchedulesInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	rt, _ := newRuntime(t)
	srv := httptest.NewServer(console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true,
		Pipelines: []string{"echo"}, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	b := startBrowser(t, chrome, srv.URL, "schedules-")
	b.expected = append(b.expected, srv.URL+console.Prefix+"/schedules")

	b.open("open the console", console.Prefix, "#executions")
	b.do("type the tenant", chromedp.SetValue(chromedp.CSS("#tenant"), tenantAcme))
	b.clickAndLoad("choose the tenant", "#tenant-form button")
	b.do("type the token", chromedp.SetValue(chromedp.CSS("#token"), operatorToken))
	b.clickAndLoad("sign in", "#sign-in")
	b.clickAndLoad("open the schedules", `nav a[href="/console/schedules"]`)
	b.do("the form", chromedp.WaitVisible(chromedp.CSS("#schedule-form")))

	b.do("type a bad spec", chromedp.SetValue(chromedp.CSS("#sch-pipeline"), "echo"), chromedp.SetValue(chromedp.CSS("#sch-spec"), "every day"))
	b.clickAndLoad("create (refused)", "#schedule-create")
	if got := b.text("#sch-spec-problem"); got == "" {
		t.Error("no problem shown next to the spec field")
	}
	b.shot("refused.png")
	b.do("type a good spec", chromedp.SetValue(chromedp.CSS("#sch-spec"), "*/15 * * * *"), chromedp.SetValue(chromedp.CSS("#sch-zone"), "America/New_York"))
	b.clickAndLoad("create", "#schedule-create")
	if got := b.text("#flash"); got != "The schedule is created." {
		t.Errorf("flash %q", got)
	}
	if b.count("#schedules tbody tr") != 1 || b.text("#schedules .state") != "ACTIVE" {
		t.Fatalf("the list does not show the new active schedule")
	}
	b.shot("created.png")
	b.clickAndLoad("pause", ".schedule-pause")
	if got := b.text("#schedules .state"); got != "PAUSED" {
		t.Errorf("after pause the state is %q", got)
	}
	b.clickAndLoad("resume", ".schedule-resume")
	if got := b.text("#schedules .state"); got != "ACTIVE" {
		t.Errorf("after resume the state is %q", got)
	}
	b.clickAndLoad("delete", ".schedule-delete")
	b.do("deleted", chromedp.WaitVisible(chromedp.CSS("#no-schedules")))
	if list, _ := rt.ListSchedules(context.Background(), tenantAcme); len(list) != 0 {
		t.Errorf("the runtime still holds %d schedules", len(list))
	}
	b.finish()
}
