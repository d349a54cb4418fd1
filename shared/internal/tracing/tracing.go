// Package tracing holds qasync's OpenTelemetry tracing: the tracer
// provider an OTLP endpoint receives spans from, the W3C traceparent a work
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
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of qasync's spans.
const ScopeName = "github.com/qasync/qasync"

// Exporters: where spans go.
const (
	// ExporterNone turns tracing off (the default).
	ExporterNone = "none"
	// ExporterOTLP sends spans to an OTLP/HTTP endpoint (an OpenTelemetry
	// collector, which may forward them to AWS X-Ray).
	ExporterOTLP = "otlp"
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
	// Endpoint is the OTLP/HTTP endpoint URL (http://collector:4318);
	// empty uses the OpenTelemetry environment variables
	// (OTEL_EXPORTER_OTLP_ENDPOINT) or their default.
	Endpoint string
	// SampleRatio is the share of new traces sampled (0..1); a span with
	// a parent follows its parent's decision.
	SampleRatio float64
	// ServiceName names the process in the traces (service.name).
	ServiceName string
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
// (ExporterNone), an SDK provider batching spans to the OTLP endpoint
// otherwise.
func New(ctx context.Context, opts Options) (*Provider, error) {
	switch strings.ToLower(opts.Exporter) {
	case "", ExporterNone:
		return nil, nil
	case ExporterOTLP:
	default:
		return nil, fmt.Errorf("tracing: unknown exporter %q (want %s or %s)", opts.Exporter, ExporterNone, ExporterOTLP)
	}
	if opts.SampleRatio < 0 || opts.SampleRatio > 1 {
		return nil, errors.New("tracing: sample ratio must be between 0 and 1")
	}
	var eopts []otlptracehttp.Option
	if opts.Endpoint != "" {
		eopts = append(eopts, otlptracehttp.WithEndpointURL(opts.Endpoint))
	}
	exp, err := otlptracehttp.New(ctx, eopts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	name := opts.ServiceName
	if name == "" {
		name = "qasync"
	}
	export := sdktrace.WithBatcher(exp)
	if opts.Sync {
		export = sdktrace.WithSyncer(exp)
	}
	tp := sdktrace.NewTracerProvider(
		export,
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))),
	)
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}, nil
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
