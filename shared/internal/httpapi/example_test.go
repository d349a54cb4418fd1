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
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/pipeline"
)

func ExampleNew() {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clock.System{}
	upper := pipeline.NewStep("upper", func(_ context.Context, _ pipeline.StepInfo, s string) (string, error) {
		return strings.ToUpper(s), nil
	})
	reg, _ := pipeline.NewRegistry(pipeline.Pipeline{ID: "upper", Steps: []pipeline.Step{upper}})
	rt, _ := engine.New(engine.Config{}, engine.Deps{
		Registry: reg, Store: memory.NewStateStore(clk), Payloads: memory.NewPayloadStore(clk),
		Dispatcher: discardDispatcher{}, DeadLetter: memory.NewLogDLQ(logger), Logger: logger,
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
