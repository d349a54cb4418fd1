package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
)

// A submit's priority query parameter is stored on the execution and
// shown by its status document and the list; an absent one takes the
// pipeline's default (3); one out of 1..5, not an integer or given twice
// is a 400 naming the parameter, and nothing is stored.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := "/v1/pipelines/greet/executions"
	w := e.do(req{method: http.MethodPost, path: path + "?priority=1", body: `{"name":"bob"}`,
		headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "urgent"}})
	if w.Code != http.StatusAccepted {
		t.Fatalf("submit with priority 1: %d %s", w.Code, w.Body)
	}
	sub := decode[client.Submission](t, w)
	if doc := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: sub.StatusURL})); doc.Priority != 1 {
		t.Fatalf("status document priority %d, want 1", doc.Priority)
	}
	e.mustSubmit("greet", "plain", `{"name":"ann"}`)
	page := decode[client.ExecutionPage](t, e.do(req{method: http.MethodGet, path: "/v1/executions"}))
	got := map[string]int{}
	for _, x := range page.Executions {
		got[x.IdempotencyKey] = x.Priority
	}
	if got["urgent"] != 1 || got["plain"] != 3 {
		t.Fatalf("listed priorities %v, want urgent 1 and plain 3 (the default)", got)
	}
	for _, q := range []string{"priority=0", "priority=6", "priority=x", "priority=1&priority=2"} {
		w := e.do(req{method: http.MethodPost, path: path + "?" + q, body: `{"name":"bob"}`,
			headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "bad"}})
		p := wantProblem(t, w, http.StatusBadRequest, "invalid-request")
		if !strings.Contains(p.Detail, "priority") {
			t.Errorf("%s: detail %q does not name the parameter", q, p.Detail)
		}
	}
	if page := decode[client.ExecutionPage](t, e.do(req{method: http.MethodGet, path: "/v1/executions"})); len(page.Executions) != 2 {
		t.Fatalf("%d executions listed after the refusals, want 2", len(page.Executions))
	}
}
