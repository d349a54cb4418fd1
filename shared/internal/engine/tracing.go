package engine

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/tracing"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Span names of an execution's trace (docs/tracing.md).
const (
	spanSubmit     = "qasync.submit"
	spanDispatch   = "qasync.dispatch"
	spanRedispatch = "qasync.redispatch"
	spanReceive    = "qasync.receive"
	spanStep       = "qasync.step"
	spanCommit     = "qasync.commit"
)

// The runtime traces only when Deps.TracerProvider is set (r.tracer is
// then not nil): every hook below starts with that nil check and costs
// nothing more when tracing is off. Spans carry the execution's ids,
// names and counts (tracing.Execution), never payload bytes nor error
// messages: a failed attempt records its error code.

// execAttrs are the span attributes of a row.
func execAttrs(e *store.Execution, step string) []attribute.KeyValue {
	return tracing.Execution(e.ExecutionID, e.TenantID, e.PipelineID, step, e.Attempt, e.TransitionKey())
}

// endSpan ends sp, with an error status naming code when err is set.
func endSpan(sp trace.Span, err error, code string) {
	if err != nil {
		if code == "" {
			code = "error"
		}
		sp.SetAttributes(tracing.AttrErrorCode.String(code))
		sp.SetStatus(codes.Error, code)
	}
	sp.End()
}

// tracedSubmit is Submit under a submit span: the root of the execution's
// trace, or a child of the caller's span.
func (r *Runtime) tracedSubmit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = tracing.Extract(ctx, req.TraceParent)
	}
	ctx, sp := r.tracer.Start(ctx, spanSubmit, trace.WithAttributes(
		tracing.Execution("", req.TenantID, req.PipelineID, "", 0, "")...))
	res, err := r.submit(ctx, req)
	if err == nil {
		sp.SetAttributes(tracing.AttrExecutionID.String(res.Execution.ExecutionID), attribute.Bool("qasync.duplicate", res.Duplicate))
	}
	endSpan(sp, err, "submit_refused")
	return res, err
}

// startDispatch starts the producer span of a work item's queue hop and
// writes its traceparent into the item; sp is nil when tracing is off.
func (r *Runtime) startDispatch(ctx context.Context, name string, e *store.Execution, item *dispatch.WorkItem) (trace.Span, context.Context) {
	if r.tracer == nil {
		return nil, ctx
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(execAttrs(e, e.StepName)...)}
	if name == spanRedispatch {
		// The sweeper has no live parent: a new trace, found by the
		// execution id attribute.
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, sp := r.tracer.Start(ctx, name, opts...)
	item.TraceParent = tracing.Inject(ctx)
	return sp, ctx
}

// redispatchSpans starts a redispatch span per message of a sweep; the
// caller ends them with endSpans.
func (r *Runtime) redispatchSpans(ctx context.Context, msgs []dispatch.Message, rows []store.Execution) []trace.Span {
	if r.tracer == nil {
		return nil
	}
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		spans[i], _ = r.startDispatch(ctx, spanRedispatch, &rows[i], &msgs[i].Item)
	}
	return spans
}

// endSpans ends spans with err's status.
func endSpans(spans []trace.Span, err error) {
	for _, sp := range spans {
		endSpan(sp, err, "dispatch_failed")
	}
}

// tracedProcess is Process under a consumer span, the child of the
// producer span whose traceparent the item carries (a redelivery after a
// crash carries the same one: the takeover joins the same trace).
func (r *Runtime) tracedProcess(ctx context.Context, item dispatch.WorkItem) error {
	ctx = tracing.Extract(ctx, item.TraceParent)
	ctx, sp := r.tracer.Start(ctx, spanReceive, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		tracing.Execution(item.ExecutionID, item.TenantID, item.PipelineID, "", 0, "")...))
	err := r.process(ctx, item)
	spanErr := err
	if ra, ok := dispatch.AsRetryAfter(err); ok {
		// A deferral is no failure of the span, but the transport must
		// still see it: it keeps the item until it is due.
		sp.SetAttributes(attribute.String("qasync.deferred", ra.Reason))
		spanErr = nil
	}
	endSpan(sp, spanErr, "process_failed")
	return err
}

// runTraced runs the transition under a step attempt span.
func (t *transition) runTraced(ctx context.Context, takeover bool) error {
	if t.r.tracer == nil {
		return t.run(ctx, takeover)
	}
	name := ""
	if i := t.row.StepIndex; i < len(t.p.Steps) {
		name = t.p.Steps[i].Name
	}
	ctx, sp := t.r.tracer.Start(ctx, spanStep, trace.WithAttributes(append(execAttrs(&t.row, name),
		tracing.AttrTakeover.Bool(takeover))...))
	t.span, t.stepName = sp, name
	err := t.run(ctx, takeover)
	if err != nil {
		endSpan(sp, err, "transition_failed")
		return err
	}
	endSpan(sp, t.stepErr, t.stepCode)
	return nil
}

// traceOutcome records a step's outcome on its attempt span: the error
// code of a failed attempt, lease_lost or cancelled when the renewer
// stopped it.
func (t *transition) traceOutcome(cause, stepErr error) {
	if t.span == nil {
		return
	}
	switch {
	case errors.Is(cause, ErrCancelled):
		t.stepErr, t.stepCode = cause, "cancelled"
	case cause != nil:
		t.stepErr, t.stepCode = cause, "lease_lost"
	case stepErr != nil:
		code, _, _ := pipeline.Classify(stepErr)
		t.stepErr, t.stepCode = stepErr, code
	}
}

// tracedCommit is commit under a commit span, the child of the attempt's.
func (t *transition) tracedCommit(ctx context.Context, commit func(context.Context) (*store.Execution, error)) (*store.Execution, error) {
	ctx, sp := t.r.tracer.Start(ctx, spanCommit, trace.WithAttributes(execAttrs(&t.row, t.stepName)...))
	got, err := commit(ctx)
	if got != nil {
		sp.SetAttributes(tracing.AttrStatus.String(string(got.Status)))
	} else if err == nil {
		sp.SetAttributes(attribute.Bool("qasync.refused", true))
	}
	endSpan(sp, err, "commit_failed")
	return got, err
}
