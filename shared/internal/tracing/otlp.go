package tracing

// The OTLP/HTTP exporter, written by hand.
//
// Why not go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp:
// it encodes with the generated OTLP protobuf types, which link the
// protobuf runtime (its registry, reflection and descriptors) and, through
// the shared OTLP packages, gRPC. Measured on the Lambda bundles
// (linux/arm64, stripped, functions/bundle_test.go): with it (and the
// SDK) the submit function's bootstrap weighed 20.69 MiB and the
// worker's 23.50, against 11.44 and 11.13 without tracing, for an exporter
// that is off by default. An ExportTraceServiceRequest is a handful of
// nested messages; the wire encoder of
// google.golang.org/protobuf/encoding/protowire (no generated code, no
// registry) writes it in a few hundred lines: with this exporter and the
// provider of provider.go the same bootstraps weigh 11.75 and 11.44 MiB.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Defaults of the exporter's bounds.
const (
	// DefaultExportTimeout bounds one export, its retries included.
	DefaultExportTimeout = 10 * time.Second
	// DefaultMaxAttempts bounds the tries of one export (the first and its
	// retries).
	DefaultMaxAttempts = 5
	// maxRetryDelay caps one wait between tries, a server's Retry-After
	// included (the export's timeout bounds them all).
	maxRetryDelay = 5 * time.Second
	// firstRetryDelay is the first backoff without a Retry-After; each
	// next one doubles, with jitter.
	firstRetryDelay = 200 * time.Millisecond
	// maxErrorBody is how much of a refused export's response body an
	// error quotes.
	maxErrorBody = 256
)

// XRayService is the SigV4 signing name of the X-Ray OTLP endpoint.
const XRayService = "xray"

// XRayEndpoint is the X-Ray OTLP traces endpoint of region.
func XRayEndpoint(region string) string {
	return "https://xray." + region + ".amazonaws.com/v1/traces"
}

// ExporterOptions configure NewOTLPExporter.
type ExporterOptions struct {
	// Endpoint is the full URL spans are POSTed to (…/v1/traces).
	Endpoint string
	// Headers are added to every request (a vendor's API key). They are
	// never logged nor quoted in errors.
	Headers map[string]string
	// Gzip compresses the request body (Content-Encoding: gzip).
	Gzip bool
	// Timeout bounds one export, retries included; 0 is
	// DefaultExportTimeout.
	Timeout time.Duration
	// MaxAttempts bounds the tries of one export; 0 is DefaultMaxAttempts.
	MaxAttempts int
	// Client sends the requests; nil is a client of its own.
	Client *http.Client
	// SigV4 signs each request for AWS (the X-Ray OTLP endpoint); nil
	// sends it unsigned.
	SigV4 *SigV4
	// Sleep waits between tries; nil waits on a real timer (tests pass
	// one that records the delays and returns at once).
	Sleep func(ctx context.Context, d time.Duration) error
}

// SigV4 is what signing a request for AWS takes.
type SigV4 struct {
	// Credentials are the signer's (the function's execution role).
	Credentials aws.CredentialsProvider
	// Region and Service name the signing scope (Service: XRayService).
	Region, Service string
	// Now is the signing time; nil is time.Now.
	Now func() time.Time
}

// NewOTLPExporter returns an exporter of spans to an OTLP/HTTP endpoint,
// as binary protobuf (application/x-protobuf), retrying what the OTLP
// specification calls retryable (429, 502, 503 and 504, after the
// server's Retry-After when it gives one, and transport errors) within
// its bounds.
func NewOTLPExporter(o ExporterOptions) (*OTLPExporter, error) {
	if o.Endpoint == "" {
		return nil, errors.New("tracing: the OTLP exporter has no endpoint")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultExportTimeout
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.SigV4 != nil && o.SigV4.Now == nil {
		o.SigV4.Now = time.Now
	}
	return &OTLPExporter{o: o, signer: v4.NewSigner()}, nil
}

// OTLPExporter is NewOTLPExporter's exporter.
type OTLPExporter struct {
	o      ExporterOptions
	signer *v4.Signer
	// closed is set by Shutdown: later exports are dropped.
	closed atomic.Bool
}

// Export sends spans, of a process whose resource attributes are
// resource, in one request (with its retries).
func (e *OTLPExporter) Export(ctx context.Context, resource []attribute.KeyValue, spans []*SpanData) error {
	if e.closed.Load() || len(spans) == 0 {
		return nil
	}
	body := EncodeSpans(resource, spans)
	if e.o.Gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body)
		if err := zw.Close(); err != nil {
			return fmt.Errorf("tracing: gzip: %w", err)
		}
		body = b.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.o.Timeout)
	defer cancel()
	delay := firstRetryDelay
	var last error
	for attempt := 1; ; attempt++ {
		retryAfter, err := e.send(ctx, body)
		if err == nil {
			return nil
		}
		last = err
		var perm permanent
		if errors.As(err, &perm) || attempt >= e.o.MaxAttempts || ctx.Err() != nil {
			break
		}
		wait := retryAfter
		if wait <= 0 {
			// Exponential backoff with jitter: half the delay plus a
			// random share of the other half.
			wait = delay/2 + rand.N(delay/2+1)
			delay *= 2
		}
		wait = min(wait, maxRetryDelay)
		if err := e.o.Sleep(ctx, wait); err != nil {
			break
		}
	}
	return fmt.Errorf("tracing: export of %d spans: %w", len(spans), last)
}

// permanent is an error a retry would not cure (the OTLP specification's
// non-retryable statuses).
type permanent struct{ error }

// send POSTs body once. It returns the server's Retry-After (0 when it
// gave none) and an error, permanent when a retry would not help.
func (e *OTLPExporter) send(ctx context.Context, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.o.Endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, permanent{err}
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.o.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	for k, v := range e.o.Headers {
		req.Header.Set(k, v)
	}
	if s := e.o.SigV4; s != nil {
		creds, err := s.Credentials.Retrieve(ctx)
		if err != nil {
			return 0, fmt.Errorf("tracing: credentials: %w", err)
		}
		sum := sha256.Sum256(body)
		if err := e.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), s.Service, s.Region, s.Now()); err != nil {
			return 0, permanent{fmt.Errorf("tracing: sigv4: %w", err)}
		}
	}
	resp, err := e.o.Client.Do(req)
	if err != nil {
		return 0, err // transport errors are retryable
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if n, msg := partialSuccess(body); n > 0 {
			// Accepted in part: the OTLP specification says not to retry.
			return 0, permanent{fmt.Errorf("the endpoint rejected %d spans: %q", n, truncate(msg, maxErrorBody))}
		}
		return 0, nil
	}
	quote, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	err = fmt.Errorf("status %d: %q", resp.StatusCode, quote)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return RetryAfter(resp.Header.Get("Retry-After"), time.Now()), err
	}
	return 0, permanent{err}
}

// partialSuccess reads an ExportTraceServiceResponse (binary protobuf):
// the spans its partial_success says were rejected, and why; 0 when it
// has none or is not protobuf (a JSON or empty answer).
func partialSuccess(b []byte) (rejected int64, msg string) {
	ps := field(b, 1, protowire.BytesType)
	if ps == nil {
		return 0, ""
	}
	if v := field(ps, 1, protowire.VarintType); v != nil {
		n, _ := protowire.ConsumeVarint(v)
		rejected = int64(n)
	}
	if v := field(ps, 2, protowire.BytesType); v != nil {
		msg = string(v)
	}
	return rejected, msg
}

// field returns the value of the last field num of type typ in the
// message b (a varint's bytes, or a length-delimited field's contents);
// nil when absent or b does not parse.
func field(b []byte, num protowire.Number, typ protowire.Type) []byte {
	var out []byte
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		vl := protowire.ConsumeFieldValue(n, t, b)
		if vl < 0 {
			return nil
		}
		if n == num && t == typ {
			if t == protowire.BytesType {
				v, _ := protowire.ConsumeBytes(b[:vl])
				out = v
			} else {
				out = b[:vl]
			}
		}
		b = b[vl:]
	}
	return out
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// RetryAfter is the wait a Retry-After header asks for, in seconds or as
// an HTTP date (relative to now); 0 when it is empty, unparsable or past.
func RetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// export is Export for a provider.
func (e *OTLPExporter) export(ctx context.Context, resource []attribute.KeyValue, spans []*SpanData) error {
	return e.Export(ctx, resource, spans)
}

// Shutdown stops the exporter: later exports are dropped.
func (e *OTLPExporter) Shutdown() {
	e.closed.Store(true)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OTLP protobuf field numbers (opentelemetry-proto, v1).
const (
	// ExportTraceServiceRequest
	fRequestResourceSpans = 1
	// ResourceSpans
	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	// Resource
	fResourceAttributes = 1
	// ScopeSpans
	fScopeSpansScope = 1
	fScopeSpansSpans = 2
	// InstrumentationScope
	fScopeName = 1
	// Span
	fSpanTraceID           = 1
	fSpanSpanID            = 2
	fSpanTraceState        = 3
	fSpanParentSpanID      = 4
	fSpanName              = 5
	fSpanKind              = 6
	fSpanStart             = 7
	fSpanEnd               = 8
	fSpanAttributes        = 9
	fSpanDroppedAttributes = 10
	fSpanEvents            = 11
	fSpanDroppedEvents     = 12
	fSpanLinks             = 13
	fSpanDroppedLinks      = 14
	fSpanStatus            = 15
	fSpanFlags             = 16
	// Span.Event
	fEventTime       = 1
	fEventName       = 2
	fEventAttributes = 3
	// Span.Link
	fLinkTraceID    = 1
	fLinkSpanID     = 2
	fLinkTraceState = 3
	fLinkAttributes = 4
	fLinkFlags      = 6
	// Status
	fStatusMessage = 2
	fStatusCode    = 3
	// KeyValue
	fKVKey   = 1
	fKVValue = 2
	// AnyValue
	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKVList = 6
	fAnyBytes  = 7
	// ArrayValue and KeyValueList
	fListValues = 1
)

// Span flags: the W3C trace flags in the low byte, and whether the
// parent is known to be remote (bits 8 and 9 of SpanFlags).
const (
	flagsContextHasIsRemote = 0x100
	flagsContextIsRemote    = 0x200
)

// EncodeSpans returns the OTLP ExportTraceServiceRequest of spans as
// binary protobuf: one ResourceSpans (resource's attributes), one
// ScopeSpans per instrumentation scope within it, in the order spans
// come.
func EncodeSpans(resource []attribute.KeyValue, spans []*SpanData) []byte {
	var scopes []string
	byScope := map[string][]*SpanData{}
	for _, s := range spans {
		if _, ok := byScope[s.Scope]; !ok {
			scopes = append(scopes, s.Scope)
		}
		byScope[s.Scope] = append(byScope[s.Scope], s)
	}
	var rs []byte
	rs = appendMessage(rs, fResourceSpansResource, appendAttributes(nil, fResourceAttributes, resource))
	for _, name := range scopes {
		var ss []byte
		ss = appendMessage(ss, fScopeSpansScope, appendString(nil, fScopeName, name))
		for _, s := range byScope[name] {
			ss = appendMessage(ss, fScopeSpansSpans, encodeSpan(s))
		}
		rs = appendMessage(rs, fResourceSpansScopeSpans, ss)
	}
	return appendMessage(nil, fRequestResourceSpans, rs)
}

// encodeSpan is one Span message.
func encodeSpan(s *SpanData) []byte {
	sc := s.Context
	tid, sid := sc.TraceID(), sc.SpanID()
	var b []byte
	b = protowire.AppendTag(b, fSpanTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, fSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	b = appendString(b, fSpanTraceState, sc.TraceState().String())
	flags := uint32(sc.TraceFlags())
	if p := s.Parent; p.SpanID().IsValid() {
		psid := p.SpanID()
		b = protowire.AppendTag(b, fSpanParentSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
		flags |= flagsContextHasIsRemote
		if p.IsRemote() {
			flags |= flagsContextIsRemote
		}
	}
	b = appendString(b, fSpanName, s.Name)
	if k := s.Kind; k != trace.SpanKindUnspecified {
		// trace.SpanKind's values are OTLP's (internal 1 … consumer 5).
		b = protowire.AppendTag(b, fSpanKind, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(k))
	}
	b = appendTime(b, fSpanStart, s.Start)
	b = appendTime(b, fSpanEnd, s.End)
	b = appendAttributes(b, fSpanAttributes, s.Attributes)
	b = appendCount(b, fSpanDroppedAttributes, s.DroppedAttributes)
	for _, ev := range s.Events {
		var e []byte
		e = appendTime(e, fEventTime, ev.Time)
		e = appendString(e, fEventName, ev.Name)
		e = appendAttributes(e, fEventAttributes, ev.Attributes)
		b = appendMessage(b, fSpanEvents, e)
	}
	b = appendCount(b, fSpanDroppedEvents, s.DroppedEvents)
	for _, l := range s.Links {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		var e []byte
		e = protowire.AppendTag(e, fLinkTraceID, protowire.BytesType)
		e = protowire.AppendBytes(e, ltid[:])
		e = protowire.AppendTag(e, fLinkSpanID, protowire.BytesType)
		e = protowire.AppendBytes(e, lsid[:])
		e = appendString(e, fLinkTraceState, l.SpanContext.TraceState().String())
		e = appendAttributes(e, fLinkAttributes, l.Attributes)
		lflags := uint32(l.SpanContext.TraceFlags()) | flagsContextHasIsRemote
		if l.SpanContext.IsRemote() {
			lflags |= flagsContextIsRemote
		}
		e = protowire.AppendTag(e, fLinkFlags, protowire.Fixed32Type)
		e = protowire.AppendFixed32(e, lflags)
		b = appendMessage(b, fSpanLinks, e)
	}
	b = appendCount(b, fSpanDroppedLinks, s.DroppedLinks)
	if st := s.Status; st.Code != 0 || st.Description != "" {
		var e []byte
		e = appendString(e, fStatusMessage, st.Description)
		// OTLP's StatusCode is Unset 0, Ok 1, Error 2 (codes.Code
		// numbers Error and Ok the other way round).
		code := uint64(0)
		switch st.Code {
		case codes.Error:
			code = 2
		case codes.Ok:
			code = 1
		}
		if code != 0 {
			e = protowire.AppendTag(e, fStatusCode, protowire.VarintType)
			e = protowire.AppendVarint(e, code)
		}
		b = appendMessage(b, fSpanStatus, e)
	}
	b = protowire.AppendTag(b, fSpanFlags, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, flags)
	return b
}

// appendMessage appends an embedded message field (also when empty: a
// present empty message, as a required Resource).
func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// appendString appends a string field, left out when empty (proto3).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendCount appends a uint32 count, left out when 0.
func appendCount(b []byte, num protowire.Number, n int) []byte {
	if n <= 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(n))
}

// appendTime appends a fixed64 Unix nanoseconds time, left out when zero.
func appendTime(b []byte, num protowire.Number, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, uint64(t.UnixNano()))
}

// appendAttributes appends one KeyValue field per attribute.
func appendAttributes(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMessage(b, num, appendKeyValue(nil, string(kv.Key), kv.Value))
	}
	return b
}

// appendKeyValue appends a KeyValue message's fields.
func appendKeyValue(b []byte, key string, v attribute.Value) []byte {
	b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	return appendMessage(b, fKVValue, appendAnyValue(nil, v))
}

// appendAnyValue appends an AnyValue message's fields.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = appendDouble(b, v.AsFloat64())
	case attribute.STRING:
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, fAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice(), func(x bool) []byte { return appendAnyValue(nil, attribute.BoolValue(x)) })
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), func(x int64) []byte { return appendAnyValue(nil, attribute.Int64Value(x)) })
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), func(x float64) []byte { return appendDouble(nil, x) })
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), func(x string) []byte { return appendAnyValue(nil, attribute.StringValue(x)) })
	case attribute.SLICE:
		b = appendArray(b, v.AsSlice(), func(x attribute.Value) []byte { return appendAnyValue(nil, x) })
	case attribute.MAP:
		var l []byte
		for _, kv := range v.AsMap() {
			l = appendMessage(l, fListValues, appendKeyValue(nil, string(kv.Key), kv.Value))
		}
		b = appendMessage(b, fAnyKVList, l)
	}
	return b
}

// appendArray appends an AnyValue's array_value: each element of xs,
// encoded as an AnyValue by enc, as one of the ArrayValue's values.
func appendArray[T any](b []byte, xs []T, enc func(T) []byte) []byte {
	var l []byte
	for _, x := range xs {
		l = appendMessage(l, fListValues, enc(x))
	}
	return appendMessage(b, fAnyArray, l)
}

// appendDouble appends an AnyValue's double_value.
func appendDouble(b []byte, f float64) []byte {
	b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(f))
}
