// Package metrics writes the runtime's metrics to stdout in CloudWatch
// Embedded Metric Format (EMF): one JSON log line per data point, which
// CloudWatch Logs turns into metrics with no API calls from the function.
//
// Metrics, each with the dimension Pipeline:
// Transitions, Retries, DeadLetters, Succeeded, OutcomeUnknown, Cancelled,
// LeaseTakeovers (Count) and SubmitToTerminalLatency (Milliseconds); SweepRedispatches and
// SweepDeadLettersPublished (Count, dimension Component=sweeper); and any
// counter a function adds with Count.
package metrics

import (
	"context"
	"encoding/json"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
)

// Metric names.
const (
	Transitions               = "Transitions"
	Retries                   = "Retries"
	DeadLetters               = "DeadLetters"
	Succeeded                 = "Succeeded"
	Rejected                  = "Rejected"
	OutcomeUnknown            = "OutcomeUnknown"
	Cancelled                 = "Cancelled"
	LeaseTakeovers            = "LeaseTakeovers"
	SubmitToTerminalLatency   = "SubmitToTerminalLatency"
	SweepRedispatches         = "SweepRedispatches"
	SweepDeadLettersPublished = "SweepDeadLettersPublished"
)

// EMF writes metrics as EMF lines. It is safe for concurrent use and
// implements engine.Observer.
type EMF struct {
	namespace string
	mu        sync.Mutex
	w         io.Writer
}

var _ engine.Observer = (*EMF)(nil)

// New returns an EMF writer to w under namespace.
func New(w io.Writer, namespace string) *EMF { return &EMF{namespace: namespace, w: w} }

// Datum is one metric value.
type Datum struct {
	Name  string
	Value float64
	// Unit is a CloudWatch unit: Count, Milliseconds, ...
	Unit string
}

// Observe implements engine.Observer.
func (m *EMF) Observe(_ context.Context, ev engine.Event) {
	pipeline := map[string]string{"Pipeline": ev.Execution.PipelineID}
	at := ev.At
	switch ev.Kind {
	case engine.EventTransitionCommitted:
		m.Emit(at, pipeline, Datum{Transitions, 1, "Count"})
	case engine.EventRetryScheduled:
		m.Emit(at, pipeline, Datum{Retries, 1, "Count"})
	case engine.EventLeaseTakeover:
		m.Emit(at, pipeline, Datum{LeaseTakeovers, 1, "Count"})
	case engine.EventSucceeded:
		m.Emit(at, pipeline, Datum{Succeeded, 1, "Count"}, latency(ev))
	case engine.EventDeadLettered:
		m.Emit(at, pipeline, Datum{DeadLetters, 1, "Count"}, latency(ev))
	case engine.EventRejected:
		m.Emit(at, pipeline, Datum{Rejected, 1, "Count"}, latency(ev))
	case engine.EventOutcomeUnknown:
		m.Emit(at, pipeline, Datum{OutcomeUnknown, 1, "Count"}, latency(ev))
	case engine.EventCancelled:
		m.Emit(at, pipeline, Datum{Cancelled, 1, "Count"}, latency(ev))
	case engine.EventSweepCompleted:
		if ev.Sweep.Redispatched > 0 || ev.Sweep.DeadLettersPublished > 0 {
			m.Emit(at, map[string]string{"Component": "sweeper"},
				Datum{SweepRedispatches, float64(ev.Sweep.Redispatched), "Count"},
				Datum{SweepDeadLettersPublished, float64(ev.Sweep.DeadLettersPublished), "Count"})
		}
	}
}

func latency(ev engine.Event) Datum {
	return Datum{SubmitToTerminalLatency, float64(ev.Latency.Milliseconds()), "Milliseconds"}
}

// Count emits one counter with the given dimensions.
func (m *EMF) Count(name string, value float64, dims map[string]string) {
	m.Emit(time.Now(), dims, Datum{name, value, "Count"})
}

// Emit writes one EMF line holding data under dims (one dimension set
// with every key of dims).
func (m *EMF) Emit(at time.Time, dims map[string]string, data ...Datum) {
	if m == nil || len(data) == 0 {
		return
	}
	keys := make([]string, 0, len(dims))
	line := map[string]any{}
	for k, v := range dims {
		keys = append(keys, k)
		line[k] = v
	}
	sort.Strings(keys)
	defs := make([]map[string]string, len(data))
	for i, d := range data {
		defs[i] = map[string]string{"Name": d.Name, "Unit": d.Unit}
		line[d.Name] = d.Value
	}
	line["_aws"] = map[string]any{
		"Timestamp": at.UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace": m.namespace, "Dimensions": [][]string{keys}, "Metrics": defs,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return // only plain values go in: cannot happen
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(append(b, '\n'))
}
