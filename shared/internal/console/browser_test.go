package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/store"
)

// browserTarget is a console the browser scenario drives, and what it
// expects there. startFakeConsole serves one over the fake backend; a
// `qasync serve` started with an admin token, with executions submitted
// through its HTTP API, fills the same fields (the scenario does not care
// which).
type browserTarget struct {
	// BaseURL is the server's root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is the server's admin.token.
	Token string
	// Tenant is typed into the tenant field ("" to keep the default).
	Tenant string
	// ListMin is the least number of rows the first page shows.
	ListMin int
	// Pipeline and Statuses are the filter applied; FilterMin the least
	// number of rows it keeps.
	Pipeline  string
	Statuses  []store.Status
	FilterMin int
	// TimelineID is an execution whose timeline has at least MinEvents
	// events.
	TimelineID string
	MinEvents  int
	// CancelID is an execution that a cancel ends CANCELLED at once
	// (QUEUED, WAIT_RETRY or parked).
	CancelID string
	// ChildID is a map's child, whose parent's page shows Children
	// children, with Ended of them ended.
	ChildID         string
	Children, Ended int
	// SearchID is an execution submitted with the idempotency key
	// SearchKey: searching either opens it.
	SearchID, SearchKey string
	// ShotPrefix starts the screenshots' file names.
	ShotPrefix string
}

// startFakeConsole serves the console over the fake backend (alone: no
// HTTP API beside it).
func startFakeConsole(t *testing.T) browserTarget {
	t.Helper()
	f := newFakeBackend()
	srv := httptest.NewServer(console.New(f, console.Options{
		AdminToken: operatorToken, TenantCookie: true, Pipelines: fixturePipelines, Now: func() time.Time { return epoch },
		Logger: slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(srv.Close)
	return browserTarget{
		BaseURL: srv.URL, Token: operatorToken, Tenant: tenantAcme, ListMin: store.DefaultListLimit,
		Pipeline: "checkout.deliver-order", Statuses: []store.Status{store.Queued, store.Running, store.DLQ},
		FilterMin: 3, TimelineID: showcaseID, MinEvents: 20, CancelID: queuedID,
		ChildID: fanChildID(fanWaitingID, 1, 7), Children: fanWaitingCounts.Total, Ended: fanWaitingCounts.Succeeded + fanWaitingCounts.Failed,
		SearchID: keyedID, SearchKey: keyedKey,
	}
}

// TestConsoleInChromium drives the console of a real server (the
// runtime on memory providers, executions submitted through the HTTP API)
// in headless Chromium: the list, paging, a filter, a timeline, a sign-in
// and a cancel, a map's child and its parent, with a screenshot of each
// page.
func TestConsoleInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	runBrowserScenario(t, chrome, startRealConsole(t))
}

// TestConsoleFixturesInChromium runs the same scenario over the fake
// backend, whose fixtures hold what a short test run cannot produce (every
// status at once, a long timeline with a takeover and an await); its
// screenshots are named fixture-*.
func TestConsoleFixturesInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	target := startFakeConsole(t)
	target.ShotPrefix = "fixture-"
	runBrowserScenario(t, chrome, target)
}

// chromiumPath finds Chromium, or skips the test saying how to get it;
// under CI=true a missing Chromium fails the test (make test installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("QASYNC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const how = "Chromium is not installed: the console's browser test needs it. Install it with " +
		"`sudo apt-get update && sudo apt-get install -y chromium` (Debian, Ubuntu), or point QASYNC_CHROMIUM at a Chrome or Chromium binary. " +
		"Under CI=true, `make test` installs it."
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and " + how)
	}
	t.Skip(how)
	return ""
}

// screenshotDirs are where screenshots go: the test's artifact directory
// (kept with go test -artifacts) and a stable directory that outlives the
// test (.cache/console-screenshots at the repository root, or
// QASYNC_CONSOLE_SCREENSHOTS).
func screenshotDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	stable := os.Getenv("QASYNC_CONSOLE_SCREENSHOTS")
	if stable == "" {
		if root, ok := repoRoot(); ok {
			stable = filepath.Join(root, ".cache", "console-screenshots")
		}
	}
	if stable != "" {
		if err := os.MkdirAll(stable, 0o755); err != nil {
			t.Fatalf("screenshot directory: %v", err)
		}
		dirs = append(dirs, stable)
	}
	return dirs
}

// repoRoot is the directory of go.mod above the working directory.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	for err == nil {
		if _, serr := os.Stat(filepath.Join(dir, "go.mod")); serr == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", false
}

// browser is a headless Chromium tab driving a console, with the
// scenarios' steps; every console message (an error, a CSP violation, an
// exception) is collected, and finish fails the test on any.
type browser struct {
	t      *testing.T
	ctx    context.Context
	base   string
	dirs   []string
	prefix string
	stop   func()

	mu        sync.Mutex
	messages  []chromedp.ConsoleMessage
	collected sync.WaitGroup
	// expected are the addresses whose failed load (an error page the
	// scenario asked for) is no console error.
	expected []string
}

// startBrowser starts Chromium for a console at base; screenshots are
// named prefix+name.
func startBrowser(t *testing.T, chrome, base, prefix string) *browser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chrome),
		// The browser runs as root in CI containers, where Chromium's
		// sandbox cannot start; it only ever loads this test's pages.
		chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-gpu", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	// Start the browser (no timeout on the first call: it would end the
	// browser), then bound the scenario.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium (%s): %v", chrome, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	b := &browser{t: t, ctx: ctx, base: base, dirs: screenshotDirs(t), prefix: prefix}
	b.stop = func() { cancel(); cancelTab(); cancelAlloc() }
	msgs := chromedp.Console(ctx)
	b.collected.Go(func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.messages = append(b.messages, m)
			b.mu.Unlock()
		}
	})
	t.Cleanup(b.stop)
	return b
}

// finish ends the scenario: the browser stops, and any error, warning or
// exception it logged fails the test.
func (b *browser) finish() {
	b.t.Helper()
	b.stop()
	b.collected.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.messages {
		if m.Type == chromedp.ConsoleError && !m.IsException() && slices.Contains(b.expected, m.URL) {
			continue
		}
		if m.Type == chromedp.ConsoleError || m.IsException() || m.Type == chromedp.ConsoleWarning {
			b.t.Errorf("browser console: %s (%s)", m, m.URL)
		}
	}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) eval(what, expr string) any {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// open navigates to the console's path and waits for sel.
func (b *browser) open(what, path, sel string) {
	b.t.Helper()
	b.do(what, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	for _, d := range b.dirs {
		p := filepath.Join(d, b.prefix+name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Fatalf("screenshot %s: %v", name, err)
		}
		b.t.Logf("screenshot: %s", p)
	}
}

// sameOrigin checks that the page contacted only the console's origin.
func (b *browser) sameOrigin(page string) {
	b.t.Helper()
	v := b.eval("resources", `[location.href, ...performance.getEntriesByType("resource").map(e => e.name)]`)
	for _, u := range v.([]any) {
		if s, _ := u.(string); !strings.HasPrefix(s, b.base+"/") {
			b.t.Errorf("%s: the page loaded %v, outside %s", page, u, b.base)
		}
	}
}

// clickAndLoad clicks sel and waits for the next page to load.
func (b *browser) clickAndLoad(what, sel string) {
	b.t.Helper()
	b.do(what,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool]("window.__qasyncOldPage = true")(ctx, tg)
			return err
		}),
		chromedp.Click(chromedp.CSS(sel)),
		// Evaluating fails while the page navigates: ask again.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			deadline := time.Now().Add(15 * time.Second)
			for {
				loaded, err := chromedp.Evaluate[bool](`!window.__qasyncOldPage && document.readyState === "complete"`)(ctx, tg)
				if err == nil && loaded {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("no new page within 15 s (last error: %v)", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}),
	)
}

// search types query into the list's search box and submits it.
func (b *browser) search(query string) {
	b.t.Helper()
	b.open("open the list to search", console.Prefix, "#search")
	b.do("type the search", chromedp.SetValue(chromedp.CSS("#search"), query))
	b.clickAndLoad("search", "#search-button")
}

// runBrowserScenario is the browser test's body against target.
func runBrowserScenario(t *testing.T, chrome string, target browserTarget) {
	t.Helper()
	b := startBrowser(t, chrome, target.BaseURL, target.ShotPrefix)
	do, eval, text, count, shot, sameOrigin, clickAndLoad := b.do, b.eval, b.text, b.count, b.shot, b.sameOrigin, b.clickAndLoad
	const rows = "#executions tbody tr[data-status]"

	// 1. The list (in the tenant the scenario names).
	do("open the console", chromedp.Navigate(target.BaseURL+console.Prefix), chromedp.WaitVisible(chromedp.CSS("#executions")))
	if target.Tenant != "" {
		do("type the tenant", chromedp.SetValue(chromedp.CSS("#tenant"), target.Tenant))
		clickAndLoad("choose the tenant", "#tenant-form button")
	}
	if n := count(rows); n < target.ListMin {
		t.Fatalf("the list shows %d executions, want at least %d", n, target.ListMin)
	}
	shot("01-executions.png")
	sameOrigin("list")
	if count("#next-page") == 1 {
		clickAndLoad("next page", "#next-page")
		if c := text("#executions caption"); !strings.Contains(c, "page 2") || count(rows) == 0 {
			t.Errorf("next page: caption %q, %d rows", c, count(rows))
		}
		clickAndLoad("first page", "#first-page")
	}

	// 2. A filter.
	do("type the pipeline", chromedp.SetValue(chromedp.CSS("#pipeline"), target.Pipeline))
	for _, s := range target.Statuses {
		do("check "+string(s), chromedp.Click(chromedp.CSS(fmt.Sprintf(`#filters input[value=%q]`, s))))
	}
	clickAndLoad("apply the filter", "#apply-filters")
	got := eval("filtered rows", `[...document.querySelectorAll("`+rows+`")].map(r => [r.cells[1].textContent, r.dataset.status])`).([]any)
	if len(got) < target.FilterMin {
		t.Fatalf("the filter keeps %d executions, want at least %d", len(got), target.FilterMin)
	}
	for _, r := range got {
		cells := r.([]any)
		if cells[0] != target.Pipeline || !slices.Contains(target.Statuses, store.Status(cells[1].(string))) {
			t.Errorf("filtered row %v: want pipeline %s in %v", cells, target.Pipeline, target.Statuses)
		}
	}
	shot("02-executions-filtered.png")

	// 3. A timeline.
	do("open the timeline", chromedp.Navigate(target.BaseURL+console.Prefix+"/executions/"+target.TimelineID),
		chromedp.WaitVisible(chromedp.CSS("#events")))
	if n := count("#events tbody tr[data-type]"); n < target.MinEvents {
		t.Errorf("the timeline shows %d events, want at least %d", n, target.MinEvents)
	}
	if count("#chart rect.bar") == 0 || count("#steps tbody tr") == 0 {
		t.Error("the timeline has no chart or no steps table")
	}
	shot("03-timeline.png")
	sameOrigin("timeline")

	// 4. Sign in with the operator token, then cancel.
	do("open the execution to cancel", chromedp.Navigate(target.BaseURL+console.Prefix+"/executions/"+target.CancelID),
		chromedp.WaitVisible(chromedp.CSS("#sign-in-hint")))
	do("type the token", chromedp.SetValue(chromedp.CSS("#token"), target.Token))
	clickAndLoad("sign in", "#sign-in")
	do("signed in", chromedp.WaitVisible(chromedp.CSS("#operator-badge")), chromedp.WaitVisible(chromedp.CSS("#cancel-form")))
	if before := text("#exec-status"); before == string(store.Cancelled) {
		t.Fatalf("execution %s is already CANCELLED", target.CancelID)
	}
	do("type the reason", chromedp.SetValue(chromedp.CSS("#cancel-reason-input"), "duplicate order (browser test)"))
	clickAndLoad("cancel", "#cancel-button")
	if s := text("#exec-status"); s != string(store.Cancelled) {
		t.Errorf("after the cancel the status is %q, want CANCELLED", s)
	}
	if f := text("#flash"); !strings.Contains(f, "cancelled") {
		t.Errorf("flash %q", f)
	}
	if r := text("#cancel-reason"); !strings.Contains(r, "duplicate order (browser test)") {
		t.Errorf("cancel reason shown: %q", r)
	}
	shot("04-cancelled.png")

	// 5. The list shows it CANCELLED.
	do("list the cancelled", chromedp.Navigate(target.BaseURL+console.Prefix+"?status=CANCELLED"), chromedp.WaitVisible(chromedp.CSS("#executions")))
	if n := count(fmt.Sprintf(`#executions a[href$=%q]`, "/"+target.CancelID)); n != 1 {
		t.Errorf("the CANCELLED list shows execution %s %d times, want once", target.CancelID, n)
	}

	// 6. A map's child links its parent, whose page shows the counts.
	do("open a map's child", chromedp.Navigate(target.BaseURL+console.Prefix+"/executions/"+target.ChildID),
		chromedp.WaitVisible(chromedp.CSS("#parent-link")))
	shot("05-map-child.png")
	clickAndLoad("open the parent", "#parent-link")
	do("the parent's counts", chromedp.WaitVisible(chromedp.CSS("#child-counts")))
	if got, want := text(`#child-counts td[data-count="total"]`), fmt.Sprint(target.Children); got != want {
		t.Errorf("the parent shows %s children, want %s", got, want)
	}
	if got := eval("progress", `[document.querySelector("#children-progress").max, document.querySelector("#children-progress").value]`); fmt.Sprint(got) != fmt.Sprint([]any{float64(target.Children), float64(target.Ended)}) {
		t.Errorf("the parent's progress (max, value) %v, want %d of %d ended", got, target.Ended, target.Children)
	}
	if n := count(fmt.Sprintf(`#events tr[data-type=%q]`, "CHILDREN_STARTED")); n != 1 {
		t.Errorf("the parent's timeline has %d CHILDREN_STARTED events, want 1", n)
	}
	shot("06-map-parent.png")
	sameOrigin("map parent")

	// 7. Search: by execution id, and by the idempotency key it was
	// submitted with.
	for _, query := range []string{target.SearchID, target.SearchKey} {
		b.search(query)
		if got := text("h1 .id"); got != target.SearchID {
			t.Errorf("search %q opened %q, want %s", query, got, target.SearchID)
		}
	}
	b.search("no-such-key-" + target.SearchID)
	if got := text("#problem"); !strings.Contains(got, "no live execution") {
		t.Errorf("a search that finds nothing says %q", got)
	}
	b.expected = append(b.expected, eval("the 404's address", "location.href").(string))

	// 8. Sign out: the operator's badge goes.
	do("open the list to sign out", chromedp.Navigate(target.BaseURL+console.Prefix), chromedp.WaitVisible(chromedp.CSS("#operator-badge")))
	clickAndLoad("sign out", "#sign-out")
	if count("#operator-badge") != 0 || count("#login-form") != 1 {
		t.Error("after the sign-out the page is still an operator's")
	}
	b.finish()
}
