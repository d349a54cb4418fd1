package tracing_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/qasync/qasync/shared/internal/tracing"
)

// spansSent are the spans rc received, by name.
func spansSent(rc *receiver) map[string]*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, td := range rc.decoded {
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out[s.Name] = s
				}
			}
		}
	}
	return out
}

// TestProviderSampling: a new trace is sampled at the ratio (0: none,
// 1: all), a child follows its parent's decision, a remote parent's
// included (the traceparent a work item carries), and an unsampled span
// still hands its context on (so its children are unsampled too) but
// exports nothing.
func TestProviderSampling(t *testing.T) {
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	off, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", Endpoint: srv.URL, SampleRatio: 0, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := tracing.Tracer(off)
	ctx, root := tr.Start(context.Background(), "unsampled-root")
	_, child := tr.Start(ctx, "unsampled-child")
	if root.IsRecording() || root.SpanContext().IsSampled() || !root.SpanContext().IsValid() {
		t.Fatalf("ratio 0: root %v", root.SpanContext())
	}
	if child.SpanContext().TraceID() != root.SpanContext().TraceID() || child.SpanContext().IsSampled() {
		t.Fatalf("child of an unsampled root: %v", child.SpanContext())
	}
	tp := tracing.Inject(ctx)
	if tp == "" || tp[len(tp)-2:] != "00" {
		t.Fatalf("traceparent of an unsampled span %q", tp)
	}
	child.End()
	root.End()
	// A sampled remote parent makes the span sampled even at ratio 0.
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled, Remote: true})
	_, sp := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "remote-child")
	sp.End()
	got := spansSent(rc)
	if len(got) != 1 || got["remote-child"] == nil {
		t.Fatalf("sent %v, want remote-child only", got)
	}
	if s := got["remote-child"]; s.Flags&0x300 != 0x300 {
		t.Fatalf("flags %#x: the parent is remote", s.Flags)
	}
	_ = off.Shutdown(context.Background())
	// Ratio 1 samples every new trace; WithNewRoot leaves the parent.
	rc2 := &receiver{t: t}
	srv2 := httptest.NewServer(rc2)
	defer srv2.Close()
	on := syncProvider(t, srv2.URL, nil)
	ctx, a := tracing.Tracer(on).Start(context.Background(), "a")
	_, b := tracing.Tracer(on).Start(ctx, "b", trace.WithNewRoot())
	if !a.SpanContext().IsSampled() || b.SpanContext().TraceID() == a.SpanContext().TraceID() {
		t.Fatalf("a %v, new root b %v", a.SpanContext(), b.SpanContext())
	}
	b.End()
	a.End()
	if sent := spansSent(rc2); len(sent) != 2 || len(sent["b"].ParentSpanId) != 0 {
		t.Fatalf("sent %v", sent)
	}
}

// TestProviderSpanRules: an attribute set again keeps one key with the
// new value, the 129th new key is dropped and counted; Ok is a final
// status and an Ok description is dropped; End is once; after End the
// span changes no more.
func TestProviderSpanRules(t *testing.T) {
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	_, sp := tracing.Tracer(syncProvider(t, srv.URL, nil)).Start(context.Background(), "s")
	sp.SetAttributes(attribute.String("k", "1"), attribute.String("k", "2"))
	for i := range 130 {
		sp.SetAttributes(attribute.Int(fmt.Sprint("n", i), i))
	}
	sp.SetStatus(codes.Ok, "ignored")
	sp.SetStatus(codes.Error, "after ok")
	sp.End()
	sp.SetName("renamed")
	sp.End()
	got := spansSent(rc)
	s := got["s"]
	if len(got) != 1 || s == nil {
		t.Fatalf("sent %v", got)
	}
	if len(s.Attributes) != 128 || s.DroppedAttributesCount != 3 || s.Attributes[0].Key != "k" || s.Attributes[0].Value.GetStringValue() != "2" {
		t.Fatalf("%d attributes, %d dropped, first %v", len(s.Attributes), s.DroppedAttributesCount, s.Attributes[0])
	}
	if s.Status.GetCode() != tracepb.Status_STATUS_CODE_OK || s.Status.GetMessage() != "" {
		t.Fatalf("status %v", s.Status)
	}
}

// TestProviderBatches: without Sync, ended spans wait in the queue (none
// is sent as it ends, the interval being an hour) and Shutdown sends
// them, in one request; a span
// ending after Shutdown is dropped.
func TestProviderBatches(t *testing.T) {
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", Endpoint: srv.URL, SampleRatio: 1, BatchInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tr := tracing.Tracer(p)
	for i := range 3 {
		_, sp := tr.Start(context.Background(), fmt.Sprint("s", i))
		sp.End()
	}
	rc.mu.Lock()
	early := len(rc.requests)
	rc.mu.Unlock()
	if early != 0 {
		t.Fatalf("%d requests before the batch was due", early)
	}
	_, late := tr.Start(context.Background(), "late")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	late.End()
	if len(rc.requests) != 1 || len(spansSent(rc)) != 3 {
		t.Fatalf("%d requests, spans %v", len(rc.requests), spansSent(rc))
	}
}

// TestProviderLogsAFailedExport: an export the endpoint refuses is
// logged (event trace_export_failed, with the status), never with a
// header's value, and the span's code goes on.
func TestProviderLogsAFailedExport(t *testing.T) {
	rc := &receiver{t: t, status: []int{401}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	var out bytes.Buffer
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", Endpoint: srv.URL, SampleRatio: 1, Sync: true,
		Headers: map[string]string{"X-Api-Key": "s3cret-key"}, Logger: slog.New(slog.NewJSONHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tracing.Tracer(p).Start(context.Background(), "s")
	sp.End()
	line := out.String()
	if !strings.Contains(line, `"event":"trace_export_failed"`) || !strings.Contains(line, "status 401") || strings.Contains(line, "s3cret") {
		t.Fatalf("log %q", line)
	}
}
