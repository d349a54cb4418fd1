package tracing_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	// The generated OTLP types decode what the hand-written encoder
	// sent: test-only, never linked into a bundle. TracesData has the
	// wire layout of ExportTraceServiceRequest (field 1, repeated
	// ResourceSpans) without the collector package's gRPC imports.
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/qasync/qasync/shared/internal/tracing"
)

// receiver is an OTLP/HTTP receiver: it decodes every request's body
// (gunzipping it when asked) and answers with the statuses of status in
// turn (then 200).
type receiver struct {
	mu       sync.Mutex
	t        *testing.T
	requests []*http.Request
	decoded  []*tracepb.TracesData
	status   []int
	header   http.Header // added to the non-200 answers
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		rc.t.Errorf("read: %v", err)
	}
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			rc.t.Errorf("gunzip: %v", err)
			return
		}
		if body, err = io.ReadAll(zr); err != nil {
			rc.t.Errorf("gunzip: %v", err)
		}
	}
	var td tracepb.TracesData
	if err := proto.Unmarshal(body, &td); err != nil {
		rc.t.Errorf("the body is no ExportTraceServiceRequest: %v", err)
	}
	rc.requests = append(rc.requests, r)
	rc.decoded = append(rc.decoded, &td)
	if len(rc.status) > 0 {
		code := rc.status[0]
		rc.status = rc.status[1:]
		for k, v := range rc.header {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// syncProvider is New's provider exporting each span as it ends to
// endpoint, with headers.
func syncProvider(t *testing.T, endpoint string, headers map[string]string) *tracing.Provider {
	t.Helper()
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", Endpoint: endpoint, Headers: headers,
		SampleRatio: 1, Sync: true, ServiceName: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// TestOTLPExporterEncodesTheSpans: what the hand-written provider and
// encoder send decodes, with the generated OTLP types, to the spans as
// they were made: ids, parent, name, kind, times, attributes of every type, an
// event, a link, the status, the scope and the resource's service.name;
// the content type is protobuf and the configured headers are sent.
func TestOTLPExporterEncodesTheSpans(t *testing.T) {
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	tr := tracing.Tracer(syncProvider(t, srv.URL+"/v1/traces", map[string]string{"X-Api-Key": "k1"}))
	start := time.Unix(1700000000, 123456789)
	ctx, parent := tr.Start(context.Background(), "qasync.receive", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start))
	linked := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, Remote: true})
	_, child := tr.Start(ctx, "qasync.step", trace.WithTimestamp(start.Add(time.Millisecond)),
		trace.WithLinks(trace.Link{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.String("l", "v")}}),
		trace.WithAttributes(attribute.String("qasync.step", "a"), attribute.Int("qasync.attempt", 2),
			attribute.Bool("qasync.takeover", true), attribute.Float64("f", 1.5),
			attribute.StringSlice("ss", []string{"x", "y"}), attribute.Int64Slice("is", []int64{-1, 7})))
	child.AddEvent("e1", trace.WithTimestamp(start.Add(2*time.Millisecond)), trace.WithAttributes(attribute.Int("n", 3)))
	child.SetStatus(codes.Error, "failed")
	child.End(trace.WithTimestamp(start.Add(3 * time.Millisecond)))
	parent.End(trace.WithTimestamp(start.Add(4 * time.Millisecond)))
	if len(rc.decoded) != 2 {
		t.Fatalf("%d requests, want 2 (one per span, synchronous)", len(rc.decoded))
	}
	r := rc.requests[0]
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("X-Api-Key") != "k1" {
		t.Fatalf("request %s %s %v", r.Method, r.URL.Path, r.Header)
	}
	byName := map[string]*tracepb.Span{}
	for _, td := range rc.decoded {
		if len(td.ResourceSpans) != 1 {
			t.Fatalf("%d resource spans", len(td.ResourceSpans))
		}
		rs := td.ResourceSpans[0]
		if got := rs.GetResource().GetAttributes(); len(got) != 1 || got[0].Key != "service.name" || got[0].GetValue().GetStringValue() != "svc" {
			t.Fatalf("resource %v", got)
		}
		if len(rs.ScopeSpans) != 1 || rs.ScopeSpans[0].GetScope().GetName() != tracing.ScopeName {
			t.Fatalf("scope spans %v", rs.ScopeSpans)
		}
		for _, s := range rs.ScopeSpans[0].Spans {
			byName[s.Name] = s
		}
	}
	ps, cs := byName["qasync.receive"], byName["qasync.step"]
	if ps == nil || cs == nil {
		t.Fatalf("spans %v", byName)
	}
	wantTID, wantSID := child.SpanContext().TraceID(), child.SpanContext().SpanID()
	wantPID := parent.SpanContext().SpanID()
	if !bytes.Equal(cs.TraceId, wantTID[:]) || !bytes.Equal(cs.SpanId, wantSID[:]) || !bytes.Equal(cs.ParentSpanId, wantPID[:]) {
		t.Fatalf("ids %x %x %x, want %x %x %x", cs.TraceId, cs.SpanId, cs.ParentSpanId, wantTID, wantSID, wantPID)
	}
	if !bytes.Equal(ps.TraceId, wantTID[:]) || len(ps.ParentSpanId) != 0 {
		t.Fatalf("root: trace %x parent %x", ps.TraceId, ps.ParentSpanId)
	}
	if ps.Kind != tracepb.Span_SPAN_KIND_CONSUMER || cs.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Fatalf("kinds %v %v", ps.Kind, cs.Kind)
	}
	if cs.StartTimeUnixNano != uint64(start.Add(time.Millisecond).UnixNano()) || cs.EndTimeUnixNano != uint64(start.Add(3*time.Millisecond).UnixNano()) ||
		ps.StartTimeUnixNano != uint64(start.UnixNano()) {
		t.Fatalf("times %d %d %d", cs.StartTimeUnixNano, cs.EndTimeUnixNano, ps.StartTimeUnixNano)
	}
	attrs := map[string]*commonpb.AnyValue{}
	for _, kv := range cs.Attributes {
		attrs[kv.Key] = kv.Value
	}
	str := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	num := func(i int64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
	}
	arr := func(v ...*commonpb.AnyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: v}}}
	}
	for k, v := range map[string]*commonpb.AnyValue{"qasync.step": str("a"), "qasync.attempt": num(2),
		"qasync.takeover": {Value: &commonpb.AnyValue_BoolValue{BoolValue: true}},
		"f":               {Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 1.5}},
		"ss":              arr(str("x"), str("y")), "is": arr(num(-1), num(7))} {
		if !proto.Equal(attrs[k], v) {
			t.Errorf("attribute %s = %v, want %v", k, attrs[k], v)
		}
	}
	if len(cs.Attributes) != 6 {
		t.Errorf("%d attributes, want 6", len(cs.Attributes))
	}
	if cs.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || cs.Status.GetMessage() != "failed" || ps.Status != nil {
		t.Fatalf("status %v / %v", cs.Status, ps.Status)
	}
	if len(cs.Events) != 1 || cs.Events[0].Name != "e1" || cs.Events[0].TimeUnixNano != uint64(start.Add(2*time.Millisecond).UnixNano()) ||
		cs.Events[0].Attributes[0].GetValue().GetIntValue() != 3 {
		t.Fatalf("events %v", cs.Events)
	}
	linkedTID := linked.TraceID()
	if len(cs.Links) != 1 || !bytes.Equal(cs.Links[0].TraceId, linkedTID[:]) || cs.Links[0].Attributes[0].Key != "l" {
		t.Fatalf("links %v", cs.Links)
	}
	if cs.Flags&0xff != uint32(trace.FlagsSampled) || cs.Flags&0x100 == 0 || cs.Flags&0x200 != 0 {
		t.Fatalf("flags %#x: sampled, parent known local", cs.Flags)
	}
}

// delays is a Sleep that records the waits and returns at once.
type delays struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *delays) sleep(_ context.Context, w time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.d = append(d.d, w)
	return nil
}

// TestOTLPExporterRetries: 429, 502, 503 and 504 are retried, after the
// server's Retry-After when it gives one (seconds or an HTTP date), else
// after a growing backoff; the body is the same on every try.
func TestOTLPExporterRetries(t *testing.T) {
	rc := &receiver{t: t, status: []int{503, 429, 502, 504}, header: http.Header{"Retry-After": {"3"}}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	var d delays
	exp, err := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: srv.URL + "/v1/traces", Sleep: d.sleep})
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Export(context.Background(), nil, spansOf()); err != nil {
		t.Fatalf("export: %v", err)
	}
	if len(rc.requests) != 5 || len(d.d) != 4 {
		t.Fatalf("%d requests and %d waits, want 5 and 4", len(rc.requests), len(d.d))
	}
	for i, w := range d.d {
		if w != 3*time.Second {
			t.Errorf("wait %d: %v, want the Retry-After's 3s", i, w)
		}
	}
	for _, td := range rc.decoded {
		if !proto.Equal(td, rc.decoded[0]) {
			t.Fatal("a retry sent another body")
		}
	}
	// Without a Retry-After: a backoff that grows.
	rc2 := &receiver{t: t, status: []int{503, 503, 503}}
	srv2 := httptest.NewServer(rc2)
	defer srv2.Close()
	var d2 delays
	exp2, _ := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: srv2.URL, Sleep: d2.sleep})
	if err := exp2.Export(context.Background(), nil, spansOf()); err != nil {
		t.Fatalf("export: %v", err)
	}
	if len(d2.d) != 3 || !(d2.d[0] > 0 && d2.d[2] > d2.d[0]) {
		t.Fatalf("backoff %v", d2.d)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := tracing.RetryAfter(now.Add(7*time.Second).Format(http.TimeFormat), now); got != 7*time.Second {
		t.Fatalf("Retry-After date: %v", got)
	}
	for _, h := range []string{"", "-1", "soon", now.Add(-time.Second).Format(http.TimeFormat)} {
		if got := tracing.RetryAfter(h, now); got != 0 {
			t.Fatalf("Retry-After %q: %v", h, got)
		}
	}
}

// TestOTLPExporterStops: a non-retryable status (400, 401, 413) is not
// retried; retries stop after MaxAttempts; a failed export's error names
// the status, never a header's value.
func TestOTLPExporterStops(t *testing.T) {
	for _, code := range []int{400, 401, 413} {
		rc := &receiver{t: t, status: []int{code}}
		srv := httptest.NewServer(rc)
		var d delays
		exp, _ := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: srv.URL, Sleep: d.sleep, Headers: map[string]string{"Authorization": "Bearer s3cret"}})
		err := exp.Export(context.Background(), nil, spansOf())
		srv.Close()
		if err == nil || len(rc.requests) != 1 || len(d.d) != 0 {
			t.Fatalf("status %d: %v after %d requests", code, err, len(rc.requests))
		}
		if !strings.HasPrefix(err.Error(), "tracing: ") || !strings.Contains(err.Error(), "status "+strconv.Itoa(code)) || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("error %q", err)
		}
	}
	rc := &receiver{t: t, status: []int{503, 503, 503, 503, 503, 503}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	var d delays
	exp, _ := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: srv.URL, Sleep: d.sleep, MaxAttempts: 3})
	if err := exp.Export(context.Background(), nil, spansOf()); err == nil || len(rc.requests) != 3 {
		t.Fatalf("%v after %d requests, want an error after 3", err, len(rc.requests))
	}
	// A transport error is retried too.
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	var d2 delays
	exp2, _ := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: url, Sleep: d2.sleep, MaxAttempts: 2})
	if err := exp2.Export(context.Background(), nil, spansOf()); err == nil || len(d2.d) != 1 {
		t.Fatalf("transport error: %v, %d waits", err, len(d2.d))
	}
	// After Shutdown, exports are dropped.
	exp.Shutdown()
	n := len(rc.requests)
	if err := exp.Export(context.Background(), nil, spansOf()); err != nil || len(rc.requests) != n {
		t.Fatalf("export after shutdown: %v, %d requests", err, len(rc.requests)-n)
	}
}

// TestOTLPExporterGzip: with Gzip the body is gzipped and says so.
func TestOTLPExporterGzip(t *testing.T) {
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	exp, _ := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: srv.URL, Gzip: true})
	if err := exp.Export(context.Background(), nil, spansOf()); err != nil {
		t.Fatal(err)
	}
	if len(rc.decoded) != 1 || rc.requests[0].Header.Get("Content-Encoding") != "gzip" || len(rc.decoded[0].ResourceSpans) != 1 {
		t.Fatalf("%d requests", len(rc.decoded))
	}
}

// spansOf returns one ended span.
func spansOf() []*tracing.SpanData {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	return []*tracing.SpanData{{Name: "x", Context: sc, Kind: trace.SpanKindInternal, Start: time.Unix(1, 0), End: time.Unix(2, 0)}}
}

// sigV4 is the form of a SigV4 Authorization header: the credential's
// scope (date, region, service xray, aws4_request), the signed headers
// (host and the date among them) and a 64-hex signature.
var sigV4 = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260102/eu-west-1/xray/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$`)

// TestXRayExporterSignsWithSigV4: exporter xray signs every request with
// SigV4 for service xray in the region, with the credentials it is given
// (the session token too), and its default endpoint is the region's X-Ray OTLP endpoint.
func TestXRayExporterSignsWithSigV4(t *testing.T) {
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	signing := &tracing.SigV4{Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "token1"),
		Region: "eu-west-1", Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
	p, err := tracing.New(context.Background(), tracing.Options{Exporter: "xray", Endpoint: srv.URL + "/v1/traces", SampleRatio: 1, Sync: true, AWS: signing})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	_, sp := tracing.Tracer(p).Start(context.Background(), "x")
	sp.End()
	if len(rc.requests) != 1 {
		t.Fatalf("%d requests", len(rc.requests))
	}
	h := rc.requests[0].Header
	m := sigV4.FindStringSubmatch(h.Get("Authorization"))
	if m == nil {
		t.Fatalf("Authorization %q", h.Get("Authorization"))
	}
	signed := strings.Split(m[1], ";")
	for _, want := range []string{"host", "x-amz-date", "content-type"} {
		if !slices.Contains(signed, want) {
			t.Errorf("signed headers %v lack %s", signed, want)
		}
	}
	if h.Get("X-Amz-Date") != "20260102T030405Z" || h.Get("X-Amz-Security-Token") != "token1" {
		t.Fatalf("headers %v", h)
	}
	if got := tracing.XRayEndpoint("eu-west-1"); got != "https://xray.eu-west-1.amazonaws.com/v1/traces" {
		t.Fatalf("endpoint %s", got)
	}
	if _, err := tracing.New(context.Background(), tracing.Options{Exporter: "xray", SampleRatio: 1}); err == nil || !strings.HasPrefix(err.Error(), "tracing: ") {
		t.Fatalf("xray without credentials: %v", err)
	}
	var _ aws.CredentialsProvider = signing.Credentials
}

// TestOTLPExporterPartialSuccess: a 200 whose ExportTraceServiceResponse
// says some spans were rejected is an error naming how many and why, not
// retried (the OTLP specification); a plain 200 is a success.
func TestOTLPExporterPartialSuccess(t *testing.T) {
	// ExportTraceServiceResponse{partial_success: {rejected_spans: 2,
	// error_message: "too old"}}, encoded here (the generated collector
	// package would bring gRPC into the module).
	var ps []byte
	ps = protowire.AppendTag(ps, 1, protowire.VarintType)
	ps = protowire.AppendVarint(ps, 2)
	ps = protowire.AppendTag(ps, 2, protowire.BytesType)
	ps = protowire.AppendString(ps, "too old")
	answer := protowire.AppendTag(nil, 1, protowire.BytesType)
	answer = protowire.AppendBytes(answer, ps)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		n++
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	var d delays
	exp, _ := tracing.NewOTLPExporter(tracing.ExporterOptions{Endpoint: srv.URL, Sleep: d.sleep})
	err := exp.Export(context.Background(), nil, spansOf())
	mu.Lock()
	if err == nil || !strings.Contains(err.Error(), "rejected 2 spans") || !strings.Contains(err.Error(), "too old") || n != 1 {
		t.Fatalf("%v after %d requests", err, n)
	}
	answer = nil
	mu.Unlock()
	if err := exp.Export(context.Background(), nil, spansOf()); err != nil {
		t.Fatal(err)
	}
}
