package tracing

// The tracer provider, written by hand on the OpenTelemetry API.
//
// Why not go.opentelemetry.io/otel/sdk/trace: the SDK links its own
// metrics (the self-observability instruments and their semantic
// conventions), a logr logger behind its global error handler, attribute
// sets with hashing and JSON encoding, resource detectors and attribute
// normalisation, whether or not tracing is on. Measured on the Lambda
// bundles (linux/arm64, stripped; functions/bundle_test.go), the SDK with
// this package's exporter made each function about 0.8 MiB heavier than
// without tracing (submit 11.44 -> 12.25 MiB, worker 11.13 -> 12.00),
// about half of it the SDK's own. What qasync needs of it is small: start
// a span under its parent (W3C ids, parent-based ratio sampling), record
// attributes, events, links and a status, and hand the ended span to the
// exporter, at once (Lambda) or in batches. Tests still use the SDK (its
// in-memory exporter) against the same OpenTelemetry API.

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Limits of one span, the OpenTelemetry SDK's defaults: what goes beyond
// is dropped and counted.
const (
	maxAttributes = 128
	maxEvents     = 128
	maxLinks      = 128
)

// Batching of a provider that is not Sync.
const (
	batchSize = 512
	// DefaultBatchInterval is how often a batching provider exports.
	DefaultBatchInterval = 5 * time.Second
	maxQueue             = 2048
)

// SpanData is an ended span as the exporter encodes it.
type SpanData struct {
	Name       string
	Scope      string
	Context    trace.SpanContext
	Parent     trace.SpanContext // invalid for a root span
	Kind       trace.SpanKind
	Start, End time.Time
	Attributes []attribute.KeyValue
	Events     []Event
	Links      []trace.Link
	Status     Status
	// Dropped* count what went beyond the limits.
	DroppedAttributes, DroppedEvents, DroppedLinks int
}

// Event is a span event.
type Event struct {
	Name       string
	Time       time.Time
	Attributes []attribute.KeyValue
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// spanExporter is where a provider hands its ended spans.
type spanExporter interface {
	export(ctx context.Context, resource []attribute.KeyValue, spans []*SpanData) error
}

// provider is New's tracer provider.
type provider struct {
	embedded.TracerProvider
	resource []attribute.KeyValue
	ratio    float64
	exp      spanExporter
	sync     bool
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time
	// rnd draws the ids' random bits.
	rnd func() uint64

	mu      sync.Mutex
	queue   []*SpanData
	dropped int
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// newProvider returns a provider exporting to exp; a batching one (not
// sync) runs its export loop until shutdown.
func newProvider(resource []attribute.KeyValue, ratio float64, exp spanExporter, sync bool, interval time.Duration, log *slog.Logger) *provider {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if interval <= 0 {
		interval = DefaultBatchInterval
	}
	p := &provider{resource: resource, ratio: ratio, exp: exp, sync: sync, interval: interval, log: log, now: time.Now, rnd: rand.Uint64,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if !sync {
		go p.loop()
	} else {
		close(p.done)
	}
	return p
}

// Tracer returns the tracer of an instrumentation scope.
func (p *provider) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return &tracer{p: p, scope: name}
}

// ended hands an ended span over: exported now (sync) or queued.
func (p *provider) ended(d *SpanData) {
	if p.sync {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if !closed {
			p.exportNow([]*SpanData{d})
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.queue) >= maxQueue {
		p.dropped++
		return
	}
	p.queue = append(p.queue, d)
	if len(p.queue) >= batchSize {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// exportNow exports spans, logging a failure (never a header's value:
// the exporter's errors hold none).
func (p *provider) exportNow(spans []*SpanData) {
	if err := p.exp.export(context.Background(), p.resource, spans); err != nil {
		p.log.Warn("spans not exported", "event", "trace_export_failed", "spans", len(spans), "error", err.Error())
	}
}

// loop exports the queue every interval, or when it holds a batch,
// until shutdown.
func (p *provider) loop() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.wake:
		}
		if stop := p.flush(); stop {
			return
		}
	}
}

// flush exports what is queued; it reports whether the provider is
// closed.
func (p *provider) flush() bool {
	p.mu.Lock()
	q, dropped, closed := p.queue, p.dropped, p.closed
	p.queue, p.dropped = nil, 0
	p.mu.Unlock()
	if dropped > 0 {
		p.log.Warn("spans dropped: the export queue was full", "event", "trace_spans_dropped", "spans", dropped)
	}
	for len(q) > 0 {
		n := min(len(q), batchSize)
		p.exportNow(q[:n])
		q = q[n:]
	}
	return closed
}

// shutdown exports what is queued and stops the provider: spans that end
// later are dropped.
func (p *provider) shutdown(ctx context.Context) error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tracer is a provider's tracer of one instrumentation scope.
type tracer struct {
	embedded.Tracer
	p     *provider
	scope string
}

// Start starts a span: a child of ctx's span (its trace and sampling
// decision) unless WithNewRoot, else the root of a new trace sampled at
// the provider's ratio. An unsampled span records nothing but carries
// its context on, so that its children are unsampled too.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	scc := trace.SpanContextConfig{SpanID: t.p.newSpanID()}
	var sampled bool
	if parent.IsValid() {
		scc.TraceID, scc.TraceState = parent.TraceID(), parent.TraceState()
		sampled = parent.IsSampled()
	} else {
		scc.TraceID = t.p.newTraceID()
		sampled = ratioSampled(scc.TraceID, t.p.ratio)
	}
	if sampled {
		scc.TraceFlags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(scc)
	if !sampled {
		ctx = trace.ContextWithSpanContext(ctx, sc)
		return ctx, trace.SpanFromContext(ctx)
	}
	start := cfg.Timestamp()
	if start.IsZero() {
		start = t.p.now()
	}
	kind := cfg.SpanKind()
	if kind == trace.SpanKindUnspecified {
		kind = trace.SpanKindInternal
	}
	s := &span{t: t, d: SpanData{Name: name, Scope: t.scope, Context: sc, Parent: parent, Kind: kind, Start: start}}
	s.SetAttributes(cfg.Attributes()...)
	for _, l := range cfg.Links() {
		s.AddLink(l)
	}
	return trace.ContextWithSpan(ctx, s), s
}

// ratioSampled is the TraceIDRatioBased decision: the trace id's low 63
// bits of its last 8 bytes below ratio's share of them.
func ratioSampled(id trace.TraceID, ratio float64) bool {
	if ratio >= 1 {
		return true
	}
	if ratio <= 0 {
		return false
	}
	return binary.BigEndian.Uint64(id[8:16])>>1 < uint64(ratio*(1<<63))
}

// newTraceID and newSpanID are random ids, never all zeros.
func (p *provider) newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], p.rnd())
		binary.BigEndian.PutUint64(id[8:], p.rnd())
	}
	return id
}

func (p *provider) newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], p.rnd())
	}
	return id
}

// span is a recording span.
type span struct {
	embedded.Span
	t     *tracer
	mu    sync.Mutex
	d     SpanData
	ended bool
}

// End ends the span and hands it to the provider; later calls do
// nothing.
func (s *span) End(opts ...trace.SpanEndOption) {
	cfg := trace.NewSpanEndConfig(opts...)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.d.End = cfg.Timestamp()
	if s.d.End.IsZero() {
		s.d.End = s.t.p.now()
	}
	d := s.d
	s.mu.Unlock()
	s.t.p.ended(&d)
}

// AddEvent records an event.
func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.addEvent(name, cfg.Timestamp(), cfg.Attributes())
}

func (s *span) addEvent(name string, at time.Time, attrs []attribute.KeyValue) {
	if at.IsZero() {
		at = s.t.p.now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if len(s.d.Events) >= maxEvents {
		s.d.DroppedEvents++
		return
	}
	s.d.Events = append(s.d.Events, Event{Name: name, Time: at, Attributes: attrs})
}

// AddLink records a link to another span.
func (s *span) AddLink(l trace.Link) {
	if !l.SpanContext.IsValid() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if len(s.d.Links) >= maxLinks {
		s.d.DroppedLinks++
		return
	}
	s.d.Links = append(s.d.Links, l)
}

// IsRecording reports whether the span still records (not ended).
func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// RecordError records err as an exception event (the OpenTelemetry
// convention); qasync's own spans never call it (an error's message may
// quote data): a step's code may.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	cfg := trace.NewEventConfig(opts...)
	s.addEvent("exception", cfg.Timestamp(), append(cfg.Attributes(), attribute.String("exception.message", err.Error())))
}

// SpanContext is the span's identity.
func (s *span) SpanContext() trace.SpanContext { return s.d.Context }

// SetStatus sets the status as the specification says: Ok is final,
// Unset changes nothing, a description goes with Error only.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || code == codes.Unset || s.d.Status.Code == codes.Ok {
		return
	}
	if code != codes.Error {
		description = ""
	}
	s.d.Status = Status{Code: code, Description: description}
}

// SetName renames the span.
func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.d.Name = name
	}
}

// SetAttributes sets attributes: a key set again takes the new value;
// new keys beyond the limit are dropped and counted.
func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
next:
	for _, a := range kv {
		if !a.Valid() {
			continue
		}
		for i := range s.d.Attributes {
			if s.d.Attributes[i].Key == a.Key {
				s.d.Attributes[i] = a
				continue next
			}
		}
		if len(s.d.Attributes) >= maxAttributes {
			s.d.DroppedAttributes++
			continue
		}
		s.d.Attributes = append(s.d.Attributes, a)
	}
}

// TracerProvider is the span's provider.
func (s *span) TracerProvider() trace.TracerProvider { return s.t.p }

// InMemory keeps the spans a provider of NewInMemory exports: for tests
// and the simulator, to check the span tree qasync's own provider makes.
type InMemory struct {
	mu    sync.Mutex
	spans []*SpanData
}

// NewInMemory returns a provider that samples every trace and hands each
// span, as it ends, to the InMemory it returns. Its ids' random bits come
// from ids when set (the simulator's seed: the same run, the same ids).
func NewInMemory(ids io.Reader) (*Provider, *InMemory) {
	m := &InMemory{}
	p := newProvider(nil, 1, m, true, 0, nil)
	if ids != nil {
		var mu sync.Mutex
		p.rnd = func() uint64 {
			mu.Lock()
			defer mu.Unlock()
			var b [8]byte
			_, _ = io.ReadFull(ids, b[:])
			return binary.BigEndian.Uint64(b[:])
		}
	}
	return &Provider{TracerProvider: p, shutdown: p.shutdown}, m
}

func (m *InMemory) export(_ context.Context, _ []attribute.KeyValue, spans []*SpanData) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spans = append(m.spans, spans...)
	return nil
}

// Spans returns the spans exported so far, in the order they ended.
func (m *InMemory) Spans() []*SpanData {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*SpanData(nil), m.spans...)
}
