package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
)

// TestSubmitContinuesTheCallersTrace: with tracing on, a submit request's
// W3C traceparent header makes the execution's trace the caller's: the
// work item dispatched carries the caller's trace id.
func TestSubmitContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(_ *engine.Config, d *engine.Deps, _ *httpapi.Options) {
		d.TracerProvider = sdktrace.NewTracerProvider()
	})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	w := e.submit("greet", "", `{"name":"ada"}`, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if w.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	msgs := e.disp.take()
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0].Item.TraceParent, "00-"+traceID+"-") {
		t.Fatalf("work items %+v, want the caller's trace %s", msgs, traceID)
	}
}
