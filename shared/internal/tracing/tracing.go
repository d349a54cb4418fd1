// Package tracing holds qasync's OpenTelemetry tracing: the tracer
// provider an OTLP endpoint (or AWS X-Ray's) receives spans from, its
// hand-written OTLP/HTTP exporter (otlp.go), the W3C traceparent a work
// item carries across the queue hop, and the attribute set every span
// of an execution has. Tracing is off by default: the runtime then holds
// no tracer and does nothing beyond a nil check.
//
// Spans never carry payload bytes (inputs, outputs, error messages): only
// ids, names, counts and error codes.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of qasync's spans.
const ScopeName = "github.com/qasync/qasync"

// Exporters: where spans go.
const (
	// ExporterNone turns tracing off (the default).
	ExporterNone = "none"
	// ExporterOTLP sends spans to an OTLP/HTTP endpoint (an OpenTelemetry
	// collector, a vendor's OTLP endpoint).
	ExporterOTLP = "otlp"
	// ExporterXRay sends spans to the AWS X-Ray OTLP endpoint of the
	// region, signed with SigV4 (service "xray") with the process's AWS
	// credentials.
	ExporterXRay = "xray"
)

// Attribute keys every span of an execution carries (when known).
const (
	AttrExecutionID   = attribute.Key("qasync.execution_id")
	AttrTenant        = attribute.Key("qasync.tenant")
	AttrPipeline      = attribute.Key("qasync.pipeline")
	AttrStep          = attribute.Key("qasync.step")
	AttrAttempt       = attribute.Key("qasync.attempt")
	AttrTransitionKey = attribute.Key("qasync.transition_key")
	// AttrErrorCode is a failed attempt's error code (never its message).
	AttrErrorCode = attribute.Key("qasync.error_code")
	// AttrStatus is the status a commit wrote.
	AttrStatus = attribute.Key("qasync.status")
	// AttrTakeover marks an attempt that took over a lapsed lease.
	AttrTakeover = attribute.Key("qasync.takeover")
)

// Options configure the tracer provider of New.
type Options struct {
	// Exporter is ExporterNone (or empty) or ExporterOTLP.
	Exporter string
	// Endpoint is the OTLP/HTTP endpoint URL (http://collector:4318, to
	// which /v1/traces is added when it has no path); empty uses the
	// OpenTelemetry environment (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it
	// is, else OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces), else
	// http://localhost:4318/v1/traces; for ExporterXRay, empty is the
	// region's X-Ray endpoint (XRayEndpoint).
	Endpoint string
	// Headers are added to every export request (a vendor's API key),
	// after those of OTEL_EXPORTER_OTLP_HEADERS. Never logged.
	Headers map[string]string
	// Gzip compresses the export requests.
	Gzip bool
	// Timeout bounds one export, retries included; 0 is
	// DefaultExportTimeout.
	Timeout time.Duration
	// AWS is the signer's credentials and region of ExporterXRay (the
	// function's execution role); Service is set by New.
	AWS *SigV4
	// SampleRatio is the share of new traces sampled (0..1); a span with
	// a parent follows its parent's decision.
	SampleRatio float64
	// ServiceName names the process in the traces (service.name).
	ServiceName string
	// BatchInterval is how often spans are exported when not Sync; 0 is
	// DefaultBatchInterval.
	BatchInterval time.Duration
	// Logger receives export failures (event trace_export_failed); nil
	// discards them.
	Logger *slog.Logger
	// Sync exports each span as it ends rather than in batches: for a
	// process frozen between invocations (AWS Lambda), where a batch may
	// wait for the next invocation or be lost.
	Sync bool
}

// Provider is a tracer provider with its shutdown.
type Provider struct {
	trace.TracerProvider
	shutdown func(context.Context) error
}

// Shutdown flushes the spans not yet exported and stops the exporter.
// Nil-safe.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// New returns the tracer provider opts ask for: nil when tracing is off
// (ExporterNone), otherwise qasync's own provider (provider.go) exporting
// to the OTLP endpoint with its own exporter (otlp.go), in batches or,
// with Sync, as each span ends.
func New(ctx context.Context, opts Options) (*Provider, error) {
	eo := ExporterOptions{Endpoint: opts.Endpoint, Gzip: opts.Gzip, Timeout: opts.Timeout,
		Headers: ParseHeaders(os.Getenv("OTEL_EXPORTER_OTLP_HEADERS"))}
	for k, v := range opts.Headers {
		eo.Headers[k] = v
	}
	switch strings.ToLower(opts.Exporter) {
	case "", ExporterNone:
		return nil, nil
	case ExporterOTLP:
		eo.Endpoint = otlpEndpoint(opts.Endpoint)
	case ExporterXRay:
		if opts.AWS == nil || opts.AWS.Credentials == nil || opts.AWS.Region == "" {
			return nil, errors.New("tracing: exporter xray needs AWS credentials and a region")
		}
		signing := *opts.AWS
		signing.Service = XRayService
		eo.SigV4 = &signing
		if eo.Endpoint == "" {
			eo.Endpoint = XRayEndpoint(signing.Region)
		}
	default:
		return nil, fmt.Errorf("tracing: unknown exporter %q (want %s, %s or %s)", opts.Exporter, ExporterNone, ExporterOTLP, ExporterXRay)
	}
	if opts.SampleRatio < 0 || opts.SampleRatio > 1 {
		return nil, errors.New("tracing: sample ratio must be between 0 and 1")
	}
	name := opts.ServiceName
	if name == "" {
		name = "qasync"
	}
	exp, err := NewOTLPExporter(eo)
	if err != nil {
		return nil, err
	}
	p := newProvider([]attribute.KeyValue{attribute.String("service.name", name)}, opts.SampleRatio, exp, opts.Sync, opts.BatchInterval, opts.Logger)
	return &Provider{TracerProvider: p, shutdown: func(ctx context.Context) error {
		err := p.shutdown(ctx)
		exp.Shutdown()
		return err
	}}, nil
}

// otlpEndpoint is the export URL of exporter otlp: endpoint, with
// /v1/traces when it has no path, else the OpenTelemetry environment's,
// else the local collector's.
func otlpEndpoint(endpoint string) string {
	if endpoint == "" {
		if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
			return v
		}
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" {
		return "http://localhost:4318/v1/traces"
	}
	if u, err := url.Parse(endpoint); err == nil && (u.Path == "" || u.Path == "/") {
		return strings.TrimSuffix(endpoint, "/") + "/v1/traces"
	}
	return endpoint
}

// ParseHeaders reads headers written as OTEL_EXPORTER_OTLP_HEADERS is
// (key1=value1,key2=value2, values URL-encoded); a malformed pair is
// left out. It never returns nil.
func ParseHeaders(s string) map[string]string {
	h := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
			h[k] = dv
		}
	}
	return h
}

// Tracer returns qasync's tracer of tp; nil when tp is nil (tracing off).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	if p, ok := tp.(*Provider); ok {
		if p == nil || p.TracerProvider == nil {
			return nil
		}
		return p.Tracer(ScopeName)
	}
	return tp.Tracer(ScopeName)
}

var propagator = propagation.TraceContext{}

// Inject returns the W3C traceparent of ctx's span; "" when ctx has no
// valid span context (tracing off, or nothing sampled nor recorded).
func Inject(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// Extract returns ctx with the remote span context of traceparent as its
// parent; ctx itself when traceparent is empty or not a valid one.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Execution is the attribute set of an execution's spans: ids, names and
// counts, never payload. Empty values are left out.
func Execution(executionID, tenant, pipeline, step string, attempt int, transitionKey string) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 6)
	add := func(k attribute.Key, v string) {
		if v != "" {
			kv = append(kv, k.String(v))
		}
	}
	add(AttrExecutionID, executionID)
	add(AttrTenant, tenant)
	add(AttrPipeline, pipeline)
	add(AttrStep, step)
	if attempt > 0 {
		kv = append(kv, AttrAttempt.Int(attempt))
	}
	add(AttrTransitionKey, transitionKey)
	return kv
}
