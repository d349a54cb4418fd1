package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

func TestCompleteAwait(t *testing.T) {
	const secret = "await-secret"
	var awaitID string
	e := newEnv(t, func(c *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		c.AwaitSecret = secret
		step := await.Step("approve", await.Spec{}, func(_ context.Context, r await.Request) error {
			awaitID = r.AwaitID
			return nil
		})
		echo := pipeline.NewStep("echo", func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
			return in, nil
		})
		reg, err := pipeline.NewRegistry(append(testPipelines(), pipeline.Pipeline{ID: "approval", Steps: []pipeline.Step{echo, step}})...)
		if err != nil {
			t.Fatal(err)
		}
		d.Registry = reg
	})
	sub := e.mustSubmit("approval", "k1", `{"doc":1}`)
	e.drive()
	st := decode[client.Execution](t, e.do(req{method: http.MethodGet, path: "/v1/executions/" + sub.ExecutionID}))
	if st.Status != store.WaitingExternal || st.Await == nil || st.Await.AwaitID != awaitID || st.Await.Status != store.AwaitWaiting {
		t.Fatalf("status = %+v await %+v", st, st.Await)
	}
	path := "/v1/executions/" + sub.ExecutionID + "/awaits/" + awaitID + "/complete"
	token := await.Sign([]byte(secret), "default", sub.ExecutionID, awaitID)
	complete := func(p, body, tok string, hdr ...string) *httptest.ResponseRecorder {
		h := map[string]string{"Content-Type": "application/json"}
		if tok != "" {
			h[httpapi.ResumeTokenHeader] = tok
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			h[hdr[i]] = hdr[i+1]
		}
		return e.do(req{method: http.MethodPost, path: p, body: body, headers: h})
	}
	wantProblem(t, complete(path, `{"ok":true}`, ""), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, complete(path, `{"ok":true}`, token[:len(token)-1]+"x"), http.StatusForbidden, "forbidden")
	// The token names the tenant; a caller's tenant header changes nothing,
	// and a token of another tenant finds no such execution.
	wantProblem(t, complete(path, `{"ok":true}`, await.Sign([]byte(secret), "other", sub.ExecutionID, awaitID), "X-Tenant-Id", "other"),
		http.StatusNotFound, "execution-not-found")
	wantProblem(t, complete("/v1/executions/nope/awaits/"+awaitID+"/complete", `{"ok":true}`, token), http.StatusForbidden, "forbidden")
	wrong := "aw-0"
	wantProblem(t, complete("/v1/executions/"+sub.ExecutionID+"/awaits/"+wrong+"/complete", `{"ok":true}`,
		await.Sign([]byte(secret), "default", sub.ExecutionID, wrong)), http.StatusConflict, "await-conflict")
	wantProblem(t, complete(path, `{bad`, token), http.StatusBadRequest, "invalid-json")

	w := complete(path, `{"ok":true}`, token, "X-Tenant-Id", "other")
	if w.Code != http.StatusOK {
		t.Fatalf("complete: %d %s", w.Code, w.Body)
	}
	doc := decode[client.Execution](t, w)
	if doc.Status != store.Queued || doc.Await == nil || doc.Await.Status != store.AwaitCompleted || doc.Await.CompletedAt.IsZero() {
		t.Fatalf("doc = %+v await %+v", doc, doc.Await)
	}
	e.drive() // a worker commits the await step with the completion
	st = decode[client.Execution](t, e.do(req{method: http.MethodGet, path: "/v1/executions/" + sub.ExecutionID}))
	if st.Status != store.Succeeded {
		t.Fatalf("after the worker: %+v", st)
	}
	res := e.do(req{method: http.MethodGet, path: "/v1/executions/" + sub.ExecutionID + "/result"})
	if res.Code != http.StatusOK || res.Body.String() != `{"ok":true}` {
		t.Fatalf("result: %d %s", res.Code, res.Body)
	}
	again := complete(path, `{"ok":true}`, token)
	if again.Code != http.StatusOK || decode[client.Execution](t, again).Version != st.Version {
		t.Fatalf("repeat: %d %s", again.Code, again.Body)
	}
	wantProblem(t, complete(path, `{"ok":false}`, token), http.StatusConflict, "await-conflict")
}

func TestCompleteAwaitDisabled(t *testing.T) {
	e := newEnv(t)
	sub := e.mustSubmit("echo", "k1", `{}`)
	w := e.do(req{method: http.MethodPost, path: "/v1/executions/" + sub.ExecutionID + "/awaits/aw-1/complete", body: `{}`,
		headers: map[string]string{httpapi.ResumeTokenHeader: "x"}})
	wantProblem(t, w, http.StatusServiceUnavailable, "awaits-disabled")
}
