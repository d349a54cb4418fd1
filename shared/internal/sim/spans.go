package sim

import (
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"

	"github.com/qasync/qasync/shared/internal/tracing"
)

// invSpans: every committed step attempt is in its execution's trace
// under the queue hop that brought it (docs/tracing.md).
const invSpans = "every committed attempt has its span under its queue hop"

// newSpans is the run's tracer: every process traces into one in-memory
// exporter, with ids from a source of the seed's own (the runtime's
// random draws stay as they were without tracing).
func newSpans(seed uint64) (*tracing.Provider, *tracing.InMemory) {
	return tracing.NewInMemory(&lockedReader{r: rand.New(rand.NewChaCha8(seedBytes(seed ^ 0x7472616365)))})
}

// checkSpans holds the spans the run exported against the tree of
// docs/tracing.md: every commit span (a committed attempt) is the child
// of a step span (its attempt) of the same trace and execution, whose
// parent is a receive span (the worker's handling of the work item), whose
// parent is the dispatch or redispatch span that sent the item. Only the
// embedded store may deliver an item without trace context (its hand-over
// entries get theirs in memory, best effort): there a receive may be a
// root. Spans of crashed processes end too (a crash here fails the I/O,
// the code around it runs on), so none is missing.
func (w *world) checkSpans() {
	if w.spans == nil {
		return
	}
	spans := w.spans.Spans()
	byID := make(map[trace.SpanID]*tracing.SpanData, len(spans))
	for _, s := range spans {
		byID[s.Context.SpanID()] = s
	}
	attr := func(s *tracing.SpanData, key string) string {
		for _, kv := range s.Attributes {
			if string(kv.Key) == key {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	parent := func(s *tracing.SpanData) *tracing.SpanData {
		if !s.Parent.IsValid() {
			return nil
		}
		p := byID[s.Parent.SpanID()]
		if p != nil && p.Context.TraceID() != s.Context.TraceID() {
			return nil
		}
		return p
	}
	commits := 0
	for _, c := range spans {
		if c.Name != "qasync.commit" {
			continue
		}
		commits++
		w.check(invSpans)
		exec := attr(c, "qasync.execution_id")
		st := parent(c)
		if st == nil || st.Name != "qasync.step" || attr(st, "qasync.execution_id") != exec {
			w.violate(invSpans, exec, "commit span %s (%s) is not under its attempt's span in the same trace", c.Context.SpanID(), attr(c, "qasync.status"))
			continue
		}
		recv := parent(st)
		if recv == nil || recv.Name != "qasync.receive" {
			w.violate(invSpans, exec, "attempt span %s (step %s, attempt %s) is not under a receive span", st.Context.SpanID(), attr(st, "qasync.step"), attr(st, "qasync.attempt"))
			continue
		}
		if !recv.Parent.IsValid() && w.o.Store == StoreEmbedded {
			continue
		}
		if hop := parent(recv); hop == nil || hop.Name != "qasync.dispatch" && hop.Name != "qasync.redispatch" {
			w.violate(invSpans, exec, "receive span %s of step %s is under no exported dispatch span of its trace (parent %s)", recv.Context.SpanID(), attr(st, "qasync.step"), recv.Parent.SpanID())
		}
	}
	if commits == 0 && len(w.incList) > 0 {
		w.check(invSpans)
		w.violate(invSpans, "", "no commit span exported in a run of %d executions", len(w.incList))
	}
}
