package console_test

import (
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/qasync/qasync/shared/internal/console"
)

// TestPauseAndResumeInChromium drives pause and resume in headless
// Chromium over the fake backend: the Pause button of a queued
// execution's page (with its reason), the paused state it then shows,
// the Resume button; then a bulk pause from the executions page (dry
// run, start, progress) and PAUSED in the list's status filter. Its
// screenshots are named pause-*.
func TestPauseAndResumeInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	f := newFakeBackend()
	srv := httptest.NewServer(console.New(f, console.Options{AdminToken: operatorToken, TenantCookie: true, Pipelines: fixturePipelines,
		Now: func() time.Time { return epoch }, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	b := startBrowser(t, chrome, srv.URL, "pause-")

	b.open("open the console", console.Prefix, "#executions")
	b.do("type the tenant", chromedp.SetValue(chromedp.CSS("#tenant"), tenantAcme))
	b.clickAndLoad("choose the tenant", "#tenant-form button")
	b.do("type the token", chromedp.SetValue(chromedp.CSS("#token"), operatorToken))
	b.clickAndLoad("sign in", "#sign-in")

	// 1. Pause one execution from its page, then resume it.
	b.open("open a queued execution", console.Prefix+"/executions/"+queuedID, "#pause-form")
	b.do("type the reason", chromedp.SetValue(chromedp.CSS("#pause-reason-input"), "supplier outage (browser test)"))
	b.clickAndLoad("pause", "#pause-button")
	b.do("paused", chromedp.WaitVisible(chromedp.CSS("#pause-state")))
	if got := b.text("#exec-status"); got != "PAUSED" {
		t.Errorf("after the pause the page shows %q, want PAUSED", got)
	}
	if got := b.text("#pause-reason"); got != "supplier outage (browser test)" {
		t.Errorf("the pause reason shown is %q", got)
	}
	if b.count("#pause-form") != 0 {
		t.Error("a paused execution still offers pause")
	}
	b.shot("01-paused.png")
	b.do("type the resume reason", chromedp.SetValue(chromedp.CSS("#resume-reason-input"), "supplier back"))
	b.clickAndLoad("resume", "#resume-button")
	if got := b.text("#exec-status"); got != "QUEUED" {
		t.Errorf("after the resume the page shows %q, want QUEUED", got)
	}
	if b.count("#pause-state") != 0 || b.count("#pause-form") != 1 {
		t.Error("a resumed execution shows a pause, or offers none")
	}
	b.sameOrigin("pause and resume")

	// 2. A bulk pause of the queued executions, then the list of PAUSED
	// (the fixtures have some already).
	b.open("list the paused", console.Prefix+"?status=PAUSED", "#executions")
	before := b.count(`#executions tbody tr[data-status="PAUSED"]`)
	b.open("open the executions", console.Prefix, "#bulk-pause-form")
	b.eval("only QUEUED", `document.querySelectorAll("#bulk-pause-form input[name=status]").forEach(c => c.checked = c.value === "QUEUED")`)
	b.do("fill the bulk pause form", chromedp.SetValue(chromedp.CSS("#bulk-pause-reason"), "maintenance (browser test)"))
	b.clickAndLoad("dry run", "#bulk-pause-dry-run")
	matched := b.text("#bulk-matched")
	n, err := strconv.Atoi(strings.TrimSuffix(matched, " executions match."))
	if err != nil || n == 0 {
		t.Fatalf("the dry run says %q", matched)
	}
	if got := b.text("#bulk-start"); got != "Pause these "+strconv.Itoa(n)+" executions" {
		t.Errorf("the start button says %q", got)
	}
	b.shot("02-bulk-pause-dry-run.png")
	b.clickAndLoad("start", "#bulk-start")
	b.do("done", chromedp.WaitVisible(chromedp.CSS("#bulk-done")))
	if got := b.text(`#bulk-counts td[data-count="redriven"]`); got != strconv.Itoa(n) {
		t.Errorf("the job paused %s, want the %d counted", got, n)
	}
	b.shot("03-bulk-pause-progress.png")
	b.open("list the paused", console.Prefix+"?status=PAUSED", "#executions")
	if got, all := b.count(`#executions tbody tr[data-status="PAUSED"]`), b.count("#executions tbody tr[data-status]"); got != before+n || all != got {
		t.Errorf("the list of PAUSED shows %d PAUSED of %d rows, want the %d paused before and the %d paused now", got, all, before, n)
	}
	b.shot("04-paused-list.png")
	b.finish()
}
