package console_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/memory"
)

// TestConsoleOperatorFlowsInChromium drives the operator's flows of
// issue 22 in headless Chromium over the fake backend, served by two
// console instances that share their revocations (as two Lambda
// instances share the state store): a search by idempotency key, the
// input shown on the execution's page, the dead letters' outstanding
// filter and counts, a bulk re-drive (dry run, start, progress), and a
// sign-out on one instance after which the other refuses the old
// session cookie. Its screenshots are named flows-*.
func TestConsoleOperatorFlowsInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	f := newFakeBackend()
	now := func() time.Time { return epoch }
	rev := console.StoreRevocations(memory.NewStateStore(clock.NewFake(epoch)), now)
	newConsole := func() http.Handler {
		return console.New(f, console.Options{AdminToken: operatorToken, TenantCookie: true, Pipelines: fixturePipelines, Now: now,
			Logger: slog.New(slog.DiscardHandler), Revocations: rev})
	}
	// Instance a remembers the session cookie it sets, for the replay.
	var mu sync.Mutex
	var session string
	conA := newConsole()
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conA.ServeHTTP(w, r)
		for _, c := range (&http.Response{Header: w.Header()}).Cookies() {
			if c.Name == console.SessionCookie && c.MaxAge > 0 {
				mu.Lock()
				session = c.Value
				mu.Unlock()
			}
		}
	}))
	t.Cleanup(a.Close)
	other := httptest.NewServer(newConsole())
	t.Cleanup(other.Close)

	b := startBrowser(t, chrome, a.URL, "flows-")

	// 1. The tenant, a sign-in, then a search by idempotency key.
	b.open("open the console", console.Prefix, "#executions")
	b.do("type the tenant", chromedp.SetValue(chromedp.CSS("#tenant"), tenantAcme))
	b.clickAndLoad("choose the tenant", "#tenant-form button")
	b.do("type the token", chromedp.SetValue(chromedp.CSS("#token"), operatorToken))
	b.clickAndLoad("sign in", "#sign-in")
	b.do("signed in", chromedp.WaitVisible(chromedp.CSS("#operator-badge")))
	b.search(keyedKey)
	if got := b.text("h1 .id"); got != keyedID {
		t.Fatalf("the search by key opened %q, want %s", got, keyedID)
	}
	if got := b.text("#idempotency-key"); got != keyedKey {
		t.Errorf("the page shows the key %q, want %q", got, keyedKey)
	}

	// 2. The input, shown on the page.
	b.clickAndLoad("show the input", "#show-input")
	if got := b.text("#input-view"); !strings.Contains(got, `"order": "`+keyedID+`"`) {
		t.Errorf("the input shown is %q", got)
	}
	if b.count("#download-input[download]") != 1 {
		t.Error("no download link for the input")
	}
	b.shot("01-input.png")
	b.sameOrigin("input")

	// 3. The dead letters: status now, counts, outstanding only.
	b.open("open the dead letters", console.Prefix+"/dead-letters", "#dead-letters")
	if b.count("#dl-counts tbody tr[data-code]") == 0 {
		t.Error("no counts by error code")
	}
	all := b.count("#dead-letters tbody tr[data-outstanding]")
	if gone := b.eval("a gone row", `[...document.querySelectorAll("#dead-letters td.now")].some(td => td.textContent.trim() === "gone")`); gone != true {
		t.Error("no dead letter says its execution is gone")
	}
	b.shot("02-dead-letters.png")
	b.do("outstanding only", chromedp.Click(chromedp.CSS("#outstanding-only")))
	b.clickAndLoad("apply the filter", "#apply-dl-filters")
	shown := b.count("#dead-letters tbody tr[data-outstanding]")
	if n := b.count(`#dead-letters tbody tr[data-outstanding="true"]`); n != shown || shown == 0 || shown >= all {
		t.Errorf("outstanding only: %d rows, %d outstanding, of %d in all", shown, n, all)
	}
	if b.eval("checked", `document.querySelector("#outstanding-only").checked`) != true {
		t.Error("the filter's checkbox is not kept")
	}
	b.shot("03-dead-letters-outstanding.png")

	// 4. A bulk re-drive: the dry run's count, then the start.
	b.do("fill the bulk form",
		chromedp.SetValue(chromedp.CSS("#bulk-pipeline"), "checkout.deliver-order"),
		chromedp.SetValue(chromedp.CSS("#bulk-code"), "validation_failed"),
		chromedp.SetValue(chromedp.CSS("#bulk-reason"), "address service fixed (browser test)"))
	b.clickAndLoad("dry run", "#bulk-dry-run")
	matched := b.text("#bulk-matched")
	n, err := strconv.Atoi(strings.TrimSuffix(matched, " executions match."))
	if err != nil || n == 0 {
		t.Fatalf("the dry run says %q", matched)
	}
	b.shot("04-bulk-dry-run.png")
	b.clickAndLoad("start", "#bulk-start")
	b.do("done", chromedp.WaitVisible(chromedp.CSS("#bulk-done")))
	if got := b.text(`#bulk-counts td[data-count="redriven"]`); got != strconv.Itoa(n) {
		t.Errorf("the job re-drove %s, want the %d counted", got, n)
	}
	b.shot("05-bulk-progress.png")
	b.sameOrigin("bulk re-drive")

	// 5. The session works on the other instance; after a sign-out on
	// this one, the other refuses the old cookie.
	mu.Lock()
	old := session
	mu.Unlock()
	if old == "" {
		t.Fatal("the sign-in set no session cookie")
	}
	b.do("the other instance", chromedp.Navigate(other.URL+console.Prefix+"/executions/"+queuedID), chromedp.WaitVisible(chromedp.CSS("#cancel-form")))
	b.open("back to this instance", console.Prefix, "#sign-out")
	b.clickAndLoad("sign out", "#sign-out")
	b.do("signed out", chromedp.WaitVisible(chromedp.CSS("#login-form")))
	b.do("replay the old cookie on the other instance", chromedp.Navigate(other.URL+console.Prefix),
		chromedp.WaitVisible(chromedp.CSS("#login-form")))
	b.eval("set the old cookie", fmt.Sprintf(`document.cookie = %q`, console.SessionCookie+"="+old+"; path="+console.Prefix))
	b.do("open an execution there", chromedp.Navigate(other.URL+console.Prefix+"/executions/"+queuedID), chromedp.WaitVisible(chromedp.CSS("#sign-in-hint")))
	if b.count("#operator-badge") != 0 || b.count("#cancel-form") != 0 {
		t.Error("the other instance accepts the signed-out session")
	}
	if got := b.eval("the cookie is sent", `document.cookie.includes(`+strconv.Quote(old)+`)`); got != true {
		t.Error("the replayed cookie is not in the browser (the check proves nothing)")
	}
	b.shot("06-signed-out-elsewhere.png")
	b.finish()
}
