package console_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// queue keeps dispatched work items for the test to run.
type queue struct {
	mu    sync.Mutex
	items []dispatch.WorkItem
}

func (q *queue) Dispatch(_ context.Context, msgs ...dispatch.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		q.items = append(q.items, m.Item)
	}
	return nil
}

// drain runs every dispatched item until none is left (a step at a
// time: a pipeline of n steps takes n rounds).
func (q *queue) drain(t *testing.T, rt *engine.Runtime) {
	t.Helper()
	for range 500 {
		q.mu.Lock()
		items := q.items
		q.items = nil
		q.mu.Unlock()
		if len(items) == 0 {
			return
		}
		for _, it := range items {
			if err := rt.Process(context.Background(), it); err != nil {
				t.Fatalf("process: %v", err)
			}
		}
	}
	t.Fatal("work items kept coming")
}

// newRuntime is a memory runtime with an "echo" and a "fail" pipeline,
// and the extra ones.
func newRuntime(t *testing.T, extra ...pipeline.Pipeline) (*engine.Runtime, *queue) {
	t.Helper()
	echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	})
	fail := pipeline.NewStep("explode", func(context.Context, pipeline.StepInfo, payload.Payload) (payload.Payload, error) {
		return payload.Payload{}, pipeline.NonRetryable("boom", errors.New("the step always fails"))
	})
	reg, err := pipeline.NewRegistry(append(extra, pipeline.Pipeline{ID: "echo", Steps: []pipeline.Step{echo}}, pipeline.Pipeline{ID: "fail", Steps: []pipeline.Step{fail}})...)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(epoch)
	log := slog.New(slog.DiscardHandler)
	q := &queue{}
	st := memory.NewStateStore(clk)
	dead := memory.NewDeadLetters(clk)
	rt, err := engine.New(engine.Config{WorkerID: "test-worker"}, engine.Deps{
		Registry: reg, Store: st, Payloads: memory.NewPayloadStore(clk),
		Dispatcher: q, DeadLetter: recording{dead, clk}, Clock: clk, Logger: log,
		History: st, DeadLetters: dead,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt, q
}

// recording publishes a dead letter by recording it, as the dead-letter
// consumer would.
type recording struct {
	dead *memory.DeadLetters
	clk  clock.Clock
}

func (r recording) Publish(ctx context.Context, env deadletter.Envelope) error {
	_, err := r.dead.Put(ctx, deadletter.ExecutionRecord(env, r.clk.Now()))
	return err
}

func submit(t *testing.T, rt *engine.Runtime, pipelineID, key, body string) store.Execution {
	t.Helper()
	res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: tenantAcme, PipelineID: pipelineID, IdempotencyKey: key,
		Input: payload.Raw("application/json", []byte(body))})
	if err != nil {
		t.Fatal(err)
	}
	return res.Execution
}

// TestEngineBackendOverTheRealRuntime runs the console on a memory
// runtime through Engine: the status page with its history, the result
// route, a re-drive, the list, the dead letters and a cancel are all the
// runtime's own.
func TestEngineBackendOverTheRealRuntime(t *testing.T) {
	t.Parallel()
	rt, q := newRuntime(t)
	failed := submit(t, rt, "fail", "k-fail", `{}`)
	done := submit(t, rt, "echo", "k-echo", `{"echo":"result-bytes-3b9e"}`)
	q.drain(t, rt)

	logs, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: log}),
		logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}

	body := e.get("/console/executions/"+failed.ExecutionID, http.StatusOK)
	wantContains(t, body, `id="exec-status">DLQ</span>`, "<code>boom</code>", "the step always fails", "DEAD_LETTERED", "STEP_FAILED")
	if strings.Contains(body, `id="history-notice"`) {
		t.Error("the timeline says history is not available, with the memory store's history wired")
	}

	// The result only to an operator who asks for it.
	if strings.Contains(e.get("/console/executions/"+done.ExecutionID+"?show=result", http.StatusOK), "result-bytes-3b9e") {
		t.Error("the page shows the result's bytes to a signed-out browser")
	}
	e.signIn()
	if got := e.get("/console/executions/"+done.ExecutionID+"/result", http.StatusOK); got != `{"echo":"result-bytes-3b9e"}` {
		t.Errorf("result %q", got)
	}
	wantContains(t, e.get("/console/executions/"+done.ExecutionID+"?show=result", http.StatusOK), `&#34;echo&#34;: &#34;result-bytes-3b9e&#34;`,
		`<code id="idempotency-key">k-echo</code>`)

	// A re-drive by the operator, at the version the page showed.
	cur, err := rt.Status(context.Background(), failed.Key())
	if err != nil {
		t.Fatal(err)
	}
	w := e.post("/console/executions/"+failed.ExecutionID+"/redrive", url.Values{"reason": {"fixed the input"}, "version": {strconv.FormatInt(cur.Version, 10)}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("redrive: %d\n%s", w.Code, w.Body)
	}
	got, err := rt.Status(context.Background(), failed.Key())
	if err != nil || got.Status != store.Queued || got.RedriveCount != 1 || got.Note != "fixed the input" {
		t.Fatalf("after the re-drive: %s, %d re-drives, note %q (%v)", got.Status, got.RedriveCount, got.Note, err)
	}
	// Re-driving the succeeded one is refused by the runtime.
	if w := e.post("/console/executions/"+done.ExecutionID+"/redrive", url.Values{"reason": {"x"}}); w.Code != http.StatusConflict {
		t.Errorf("redrive of SUCCEEDED: %d, want 409", w.Code)
	}

	// The list, the dead letters and a cancel are the runtime's own.
	wantContains(t, e.get("/console", http.StatusOK), failed.ExecutionID, done.ExecutionID)
	wantContains(t, e.get("/console/dead-letters", http.StatusOK), failed.ExecutionID, "boom")
	// A cursor the dead-letter list never returned is a 400 with a way
	// back (it was a 500).
	wantContains(t, e.get("/console/dead-letters?cursor=x", http.StatusBadRequest), "Page link expired", `href="/console/dead-letters" id="back"`)
	if w := e.post("/console/executions/"+got.ExecutionID+"/cancel", url.Values{"reason": {"stop"}}); w.Code != http.StatusSeeOther {
		t.Errorf("cancel: %d, want 303", w.Code)
	}
	if after, err := rt.Status(context.Background(), got.Key()); err != nil || after.Status != store.Cancelled || after.CancelReason != "stop" {
		t.Errorf("after the cancel: %s, reason %q (%v)", after.Status, after.CancelReason, err)
	}
}

// TestSearchFindsAnExecutionByIDOrByIdempotencyKey searches the memory
// runtime's executions through Engine: an execution id opens its page;
// anything else is an idempotency key, whose slot names the live
// execution submitted with it; neither is a 404 that says so.
func TestSearchFindsAnExecutionByIDOrByIdempotencyKey(t *testing.T) {
	t.Parallel()
	rt, q := newRuntime(t)
	x := submit(t, rt, "echo", "order 7/b", `{}`)
	q.drain(t, rt)
	_, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{TenantCookie: true, Logger: log}),
		jar: map[string]string{console.TenantCookieName: tenantAcme}}
	want := "/console/executions/" + x.ExecutionID
	for _, query := range []string{x.ExecutionID, " " + x.ExecutionID + " ", "order 7/b", store.Slot(x.ExecutionID)} {
		w := e.do(http.MethodGet, "/console/search?q="+url.QueryEscape(query), nil)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want {
			t.Errorf("search %q: %d to %q, want 303 to %s", query, w.Code, w.Header().Get("Location"), want)
		}
	}
	wantContains(t, e.get("/console/search?q=order+7%2Fc", http.StatusNotFound), "No execution found",
		"no live execution of it was submitted with it as its idempotency key", `href="/console" id="back"`)
	// Another tenant's key names another slot.
	e.jar[console.TenantCookieName] = tenantOther
	e.get("/console/search?q="+url.QueryEscape("order 7/b"), http.StatusNotFound)
	e.get("/console/search?q="+url.QueryEscape(x.ExecutionID), http.StatusNotFound)
	// Not an id, not a key (a control character): 400.
	wantContains(t, e.get("/console/search?q=%01", http.StatusBadRequest), "printable ASCII")
	if w := e.do(http.MethodGet, "/console/search?q=", nil); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console" {
		t.Errorf("an empty search: %d to %q, want the list", w.Code, w.Header().Get("Location"))
	}
}

// TestEngineBackendPagesALongHistory runs a pipeline of 110 steps on the
// memory runtime (222 events: more than a page) and reads its history on
// the console through Engine: the first page shows 200 events and links
// the next, which shows the rest; together they are the runtime's
// history, each event once and in order.
func TestEngineBackendPagesALongHistory(t *testing.T) {
	t.Parallel()
	steps := make([]pipeline.Step, 110)
	for i := range steps {
		steps[i] = pipeline.NewStep(fmt.Sprintf("s%03d", i), func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
			return in, nil
		})
	}
	rt, q := newRuntime(t, pipeline.Pipeline{ID: "long", Steps: steps})
	x := submit(t, rt, "long", "k-long", `{}`)
	q.drain(t, rt)
	all, err := rt.History(context.Background(), x.Key())
	if err != nil || len(all) <= 200 {
		t.Fatalf("history of %d events (%v), want more than a page", len(all), err)
	}

	_, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{TenantCookie: true, Logger: log}),
		jar: map[string]string{console.TenantCookieName: tenantAcme}}
	var seqs []string
	eachPage(e, "/console/executions/"+x.ExecutionID, func(page int, body string) {
		rows := matches(eventSeq, body)
		if want := min(200, len(all)-len(seqs)); len(rows) != want {
			t.Fatalf("page %d shows %d events, want %d", page, len(rows), want)
		}
		seqs = append(seqs, rows...)
	})
	for i, ev := range all {
		if i >= len(seqs) || seqs[i] != strconv.Itoa(ev.Seq) {
			t.Fatalf("the pages show events %v, want 1 to %d in order", seqs, len(all))
		}
	}
	if len(seqs) != len(all) {
		t.Errorf("the pages show %d events, want %d", len(seqs), len(all))
	}

	// The next page's cursor names an event of this history only: on
	// another execution's page it is refused, not read as a position.
	next := matches(nextLink, e.get("/console/executions/"+x.ExecutionID, http.StatusOK))
	if len(next) != 1 {
		t.Fatal("the first page links no next page")
	}
	cursor := regexp.MustCompile(`cursor=([^&]+)`).FindStringSubmatch(unescape(next[0]))[1]
	other := submit(t, rt, "echo", "k-other", `{}`)
	q.drain(t, rt)
	body := e.get("/console/executions/"+other.ExecutionID+"?cursor="+cursor, http.StatusBadRequest)
	wantContains(t, body, "names no event of this execution&#39;s history")
}

// step processes the work items dispatched so far, once (a step of each).
func (q *queue) step(t *testing.T, rt *engine.Runtime) {
	t.Helper()
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.mu.Unlock()
	for _, it := range items {
		if err := rt.Process(context.Background(), it); err != nil {
			t.Fatalf("process: %v", err)
		}
	}
}

// TestEngineBackendShowsAMap runs a map of three children, one at a time,
// on the memory runtime and shows it through Engine: while the parent
// waits, its page has the runtime's counts (one running, two pending);
// after, three succeeded; a child's page links the parent, and the list
// marks both.
func TestEngineBackendShowsAMap(t *testing.T) {
	t.Parallel()
	rt, q := newRuntime(t, pipeline.Pipeline{ID: "fan", Steps: []pipeline.Step{pipeline.Map("each", "echo", pipeline.MapOptions{MaxInFlight: 1})}})
	in, err := payload.RawJSON([]byte(`[{"n":1},{"n":2},{"n":3}]`))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: tenantAcme, PipelineID: "fan", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	parent := sub.Execution
	q.step(t, rt) // the map step: three children, the first released

	_, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{TenantCookie: true, Logger: log}),
		jar: map[string]string{console.TenantCookieName: tenantAcme}}
	page := "/console/executions/" + parent.ExecutionID
	body := e.get(page, http.StatusOK)
	wantContains(t, body, `id="exec-status">WAITING_CHILDREN</span>`, "Waiting for its 3 children", "0 of 3 ended", "CHILDREN_STARTED")
	want := map[string]string{"total": "3", "succeeded": "0", "failed": "0", "running": "1", "pending": "2"}
	if got := shownCounts(body); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waiting: counts %v, want %v", got, want)
	}

	q.drain(t, rt)
	body = e.get(page, http.StatusOK)
	wantContains(t, body, `id="exec-status">SUCCEEDED</span>`, "Its last map fanned out to 3 children", "3 of 3 ended", "CHILDREN_FINISHED")
	want = map[string]string{"total": "3", "succeeded": "3", "failed": "0", "running": "0", "pending": "0"}
	if got := shownCounts(body); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the map: counts %v, want %v", got, want)
	}

	// The map's result names its children.
	_, res, err := rt.Result(context.Background(), parent.Key())
	var joined pipeline.MapResult
	if err != nil || res.DecodeJSON(&joined) != nil || len(joined.Elements) != 3 {
		t.Fatalf("the map's result: %+v (%v)", joined, err)
	}
	childID := joined.Elements[2].ExecutionID
	child := e.get("/console/executions/"+childID, http.StatusOK)
	wantContains(t, child, `<a class="id" href="`+page+`" id="parent-link" rel="up">`+parent.ExecutionID+`</a>`, "child #2 of 3, from its map step 0")
	list := e.get("/console", http.StatusOK)
	wantContains(t, list, `#children" title="the counts are on the execution's page">3 children</a> <span class="muted">all ended</span>`,
		`child #2 of <a href="`+page+`" title="`+parent.ExecutionID+`" rel="up">its parent</a>`)
}

// TestExecutionPageShowsTheConcurrencyKey: with a key's one slot taken,
// the second execution's page shows its key and that it waits for a
// slot; the first one's that it holds the slot; each page shows the
// execution's priority (given at submit, or the default); the list
// offers the WAITING_KEY filter and finds the waiter.
func TestExecutionPageShowsTheConcurrencyKey(t *testing.T) {
	t.Parallel()
	type order struct {
		Customer string `json:"customer"`
	}
	hold := pipeline.NewStep("hold", func(context.Context, pipeline.StepInfo, order) (order, error) { return order{}, nil })
	wake := pipeline.NewStep("wake", func(context.Context, pipeline.StepInfo, order) (order, error) { return order{}, nil })
	// The sleep keeps the first execution, and its slot, between steps.
	keyed := pipeline.Pipeline{ID: "keyed", Steps: []pipeline.Step{hold, pipeline.Sleep("nap", time.Hour), wake},
		Concurrency: pipeline.ConcurrencyKey("customer", 1, func(o order) string { return o.Customer })}
	rt, q := newRuntime(t, keyed)
	submitJSON := func(key string, prio int) store.Execution {
		in, _ := payload.JSON(order{Customer: "c-42"})
		res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: tenantAcme, PipelineID: "keyed", IdempotencyKey: key, Input: in, Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		return res.Execution
	}
	first := submitJSON("k1", 0)
	// The first claim takes the slot; it runs its first step and sleeps.
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.mu.Unlock()
	for _, it := range items {
		if err := rt.Process(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	second := submitJSON("k2", 1)
	q.mu.Lock()
	items = q.items
	q.items = nil
	q.mu.Unlock()
	for _, it := range items {
		if it.ExecutionID == second.ExecutionID {
			if err := rt.Process(context.Background(), it); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := rt.Status(context.Background(), second.Key()); err != nil || got.Status != store.WaitingKey {
		t.Fatalf("the second execution is %s (%v), want WAITING_KEY", got.Status, err)
	}
	logs, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: log}),
		logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}
	wantContains(t, e.get("/console/executions/"+second.ExecutionID, http.StatusOK),
		`<code id="concurrency-key">c-42</code>`, `id="key-wait">waiting for a slot of its key since`, `<span id="priority">1</span>`)
	wantContains(t, e.get("/console/executions/"+first.ExecutionID, http.StatusOK),
		`<code id="concurrency-key">c-42</code>`, `id="key-wait">holds a slot of its key`, `<span id="priority">3</span>`)
	list := e.get(console.Prefix+"?status=WAITING_KEY", http.StatusOK)
	wantContains(t, list, `value="WAITING_KEY"`, second.ExecutionID)
	if strings.Contains(list, first.ExecutionID) {
		t.Error("the WAITING_KEY list shows the execution holding the slot")
	}
}

// TestExecutionPageShowsTheRateLimit: with a limit of one start a minute,
// the second execution's page shows its limit, its key and that its step
// waits for its turn; the first one's (ended) only the limit and key.
func TestExecutionPageShowsTheRateLimit(t *testing.T) {
	t.Parallel()
	type order struct {
		Customer string `json:"customer"`
	}
	call := pipeline.NewStep("call", func(context.Context, pipeline.StepInfo, order) (order, error) { return order{}, nil })
	limited := pipeline.Pipeline{ID: "limited", Steps: []pipeline.Step{call},
		RateLimit: pipeline.RateLimitKey("carrier", 1, time.Minute, 1, func(o order) string { return o.Customer })}
	rt, q := newRuntime(t, limited)
	var ids []string
	for _, key := range []string{"k1", "k2"} {
		in, _ := payload.JSON(order{Customer: "c-42"})
		res, err := rt.Submit(context.Background(), engine.SubmitRequest{TenantID: tenantAcme, PipelineID: "limited", IdempotencyKey: key, Input: in})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Execution.ExecutionID)
	}
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.mu.Unlock()
	for _, it := range items {
		if err := rt.Process(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	logs, log := logtest.New()
	e := &env{t: t, h: console.New(console.Engine(rt), console.Options{AdminToken: operatorToken, TenantCookie: true, Logger: log}),
		logs: logs, jar: map[string]string{console.TenantCookieName: tenantAcme}}
	wantContains(t, e.get("/console/executions/"+ids[1], http.StatusOK),
		`<code id="rate-limit">carrier</code> key <code id="rate-key">c-42</code>`, `id="rate-wait">waiting for its turn: step call starts`)
	first := e.get("/console/executions/"+ids[0], http.StatusOK)
	wantContains(t, first, `<code id="rate-limit">carrier</code>`)
	if strings.Contains(first, `id="rate-wait"`) {
		t.Error("the execution that ran shows a wait for its turn")
	}
}
