package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/internal/tracing"
)

// TestCheckSpansFindsABrokenTree: checkSpans passes a commit under its
// attempt under a receive under a dispatch, and flags an attempt whose
// receive has no dispatch (the item lost its trace context) and a commit
// with no attempt span; on the embedded store a receive may be a root.
func TestCheckSpansFindsABrokenTree(t *testing.T) {
	for _, st := range []string{StoreMemory, StoreEmbedded} {
		tp, mem := tracing.NewInMemory(nil)
		w := &world{o: Options{Store: st}, start: time.Now(), trace: newTraceLog(false), reported: map[string]bool{},
			report: Report{Checks: map[string]int{}}, tracer: tp, spans: mem}
		tr := tracing.Tracer(tp)
		attempt := func(ctx context.Context, exec string) {
			attrs := trace.WithAttributes(tracing.Execution(exec, "t", "p", "a", 1, "")...)
			ctx, recv := tr.Start(ctx, "qasync.receive", attrs)
			ctx, step := tr.Start(ctx, "qasync.step", attrs)
			_, commit := tr.Start(ctx, "qasync.commit", attrs)
			commit.End()
			step.End()
			recv.End()
		}
		ctx, disp := tr.Start(context.Background(), "qasync.dispatch")
		attempt(ctx, "good")
		disp.End()
		attempt(context.Background(), "orphan") // no traceparent
		_, lone := tr.Start(context.Background(), "qasync.commit", trace.WithAttributes(tracing.Execution("lone", "t", "p", "a", 1, "")...))
		lone.End()
		w.checkSpans()
		var got []string
		for _, v := range w.report.Violations {
			got = append(got, v.Execution)
		}
		want := "orphan,lone"
		if st == StoreEmbedded {
			want = "lone"
		}
		if strings.Join(got, ",") != want || w.report.Checks[invSpans] != 3 {
			t.Errorf("%s: violations of %v (%d checks), want %s", st, got, w.report.Checks[invSpans], want)
		}
	}
}
