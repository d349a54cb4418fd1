package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/metrics"
	"github.com/qasync/qasync/shared/store"
)

type emfLine struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string              `json:"Namespace"`
			Dimensions [][]string          `json:"Dimensions"`
			Metrics    []map[string]string `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
	Pipeline                string  `json:"Pipeline"`
	Succeeded               float64 `json:"Succeeded"`
	SubmitToTerminalLatency float64 `json:"SubmitToTerminalLatency"`
}

func TestTerminalEventsBecomeEMFLines(t *testing.T) {
	var buf bytes.Buffer
	m := metrics.New(&buf, "qasync-test")
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	m.Observe(context.Background(), engine.Event{Kind: engine.EventSucceeded, At: at, Latency: 1500 * time.Millisecond,
		Execution: store.Execution{PipelineID: "checkout.deliver-order"}})
	m.Observe(context.Background(), engine.Event{Kind: engine.EventSweepCompleted, At: at}) // nothing to report: no line
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var l emfLine
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	cw := l.AWS.CloudWatchMetrics
	if l.AWS.Timestamp != at.UnixMilli() || len(cw) != 1 || cw[0].Namespace != "qasync-test" ||
		len(cw[0].Dimensions) != 1 || cw[0].Dimensions[0][0] != "Pipeline" || len(cw[0].Metrics) != 2 {
		t.Fatalf("EMF envelope = %+v", l.AWS)
	}
	if l.Pipeline != "checkout.deliver-order" || l.Succeeded != 1 || l.SubmitToTerminalLatency != 1500 {
		t.Fatalf("values = %+v", l)
	}
	for _, def := range cw[0].Metrics {
		if def["Name"] == metrics.SubmitToTerminalLatency && def["Unit"] != "Milliseconds" {
			t.Errorf("latency unit %q", def["Unit"])
		}
	}
}

func TestNilEMFIsANoOp(t *testing.T) {
	var m *metrics.EMF
	m.Emit(time.Now(), nil, metrics.Datum{Name: "X", Value: 1, Unit: "Count"})
}

// TestCancelledExecutionsAreCounted: a cancel is a terminal event with its
// own counter and the submit-to-terminal latency.
func TestCancelledExecutionsAreCounted(t *testing.T) {
	var buf bytes.Buffer
	m := metrics.New(&buf, "qasync-test")
	m.Observe(context.Background(), engine.Event{Kind: engine.EventCancelled, At: time.Now(), Latency: 250 * time.Millisecond,
		Execution: store.Execution{PipelineID: "p.cancel", Status: store.Cancelled}})
	var l map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &l); err != nil {
		t.Fatalf("one EMF line expected: %v (%q)", err, buf.String())
	}
	if l[metrics.Cancelled] != 1.0 || l[metrics.SubmitToTerminalLatency] != 250.0 || l["Pipeline"] != "p.cancel" {
		t.Fatalf("EMF line %v, want Cancelled 1 and the latency under the pipeline", l)
	}
}
