package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/internal/tracing"
)

// TestOffByDefault: no exporter (or none) builds no provider, and the
// runtime then gets no tracer; an unknown exporter or ratio is refused.
func TestOffByDefault(t *testing.T) {
	for _, exp := range []string{"", "none", "NONE"} {
		p, err := tracing.New(context.Background(), tracing.Options{Exporter: exp})
		if p != nil || err != nil {
			t.Fatalf("exporter %q: %v, %v", exp, p, err)
		}
		if tracing.Tracer(p) != nil {
			t.Fatalf("exporter %q: a tracer", exp)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if tracing.Tracer(nil) != nil {
		t.Fatal("a tracer of no provider")
	}
	if _, err := tracing.New(context.Background(), tracing.Options{Exporter: "jaeger"}); err == nil || !strings.HasPrefix(err.Error(), "tracing: ") {
		t.Fatalf("unknown exporter: %v", err)
	}
	if _, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", SampleRatio: 2}); err == nil {
		t.Fatal("ratio 2 accepted")
	}
}

// TestOTLPExport: with exporter otlp, a span reaches the endpoint's
// /v1/traces on shutdown (the flush a closing process does).
func TestOTLPExport(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", Endpoint: srv.URL + "/v1/traces", SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tracing.Tracer(p).Start(context.Background(), "x")
	sp.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no spans exported")
	}
}

// TestOTLPSyncExport: with Sync (Lambda functions), a span is exported
// when it ends, with no flush.
func TestOTLPSyncExport(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", Endpoint: srv.URL + "/v1/traces", SampleRatio: 1, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	_, sp := tracing.Tracer(p).Start(context.Background(), "x")
	sp.End()
	if posts.Load() != 1 {
		t.Fatalf("%d exports after the span ended, want 1", posts.Load())
	}
}

// TestTraceParentRoundTrip: Inject writes the W3C traceparent of ctx's
// span, Extract makes it the parent of the next span; no span, no
// traceparent.
func TestTraceParentRoundTrip(t *testing.T) {
	if got := tracing.Inject(context.Background()); got != "" {
		t.Fatalf("no span: %q", got)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, sp := tp.Tracer("t").Start(context.Background(), "parent")
	defer sp.End()
	tpHeader := tracing.Inject(ctx)
	if !strings.HasPrefix(tpHeader, "00-"+sp.SpanContext().TraceID().String()+"-"+sp.SpanContext().SpanID().String()) {
		t.Fatalf("traceparent %q", tpHeader)
	}
	got := trace.SpanContextFromContext(tracing.Extract(context.Background(), tpHeader))
	if got.TraceID() != sp.SpanContext().TraceID() || got.SpanID() != sp.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v", got)
	}
	if c := tracing.Extract(context.Background(), "garbage"); trace.SpanContextFromContext(c).IsValid() {
		t.Fatal("garbage extracted")
	}
}

// TestExecutionAttributes: the attribute set leaves empty values out.
func TestExecutionAttributes(t *testing.T) {
	kv := tracing.Execution("e1", "t1", "", "a", 0, "")
	if len(kv) != 3 || kv[0].Key != tracing.AttrExecutionID || kv[2].Key != tracing.AttrStep {
		t.Fatalf("%v", kv)
	}
}
