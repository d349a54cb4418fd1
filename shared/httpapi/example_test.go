package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/httpapi"
	"github.com/qasync/qasync/shared/logdlq"
	"github.com/qasync/qasync/shared/memstore"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/runtime"
)

func ExampleNew() {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clock.System{}
	upper := pipeline.NewStep("upper", func(_ context.Context, _ pipeline.StepInfo, s string) (string, error) {
		return strings.ToUpper(s), nil
	})
	reg, _ := pipeline.NewRegistry(pipeline.Pipeline{ID: "upper", Steps: []pipeline.Step{upper}})
	rt, _ := runtime.New(runtime.Config{}, runtime.Deps{
		Registry: reg, Store: memstore.NewStateStore(clk), Payloads: memstore.NewPayloadStore(clk),
		Dispatcher: discardDispatcher{}, DeadLetter: logdlq.New(logger), Logger: logger,
	})
	h := httpapi.New(rt, httpapi.Options{Logger: logger})

	r := httptest.NewRequest(http.MethodPost, "/v1/pipelines/upper/executions", strings.NewReader(`"hello"`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "greeting-1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, strings.HasPrefix(w.Header().Get("Location"), "/v1/executions/"))

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/pipelines/upper/executions", nil))
	fmt.Println(w.Code, w.Header().Get("Allow"), w.Header().Get("Content-Type"))
	// Output:
	// 202 true
	// 405 POST application/problem+json
}
