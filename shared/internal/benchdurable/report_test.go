package benchdurable

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportPerStepFiguresAndRatio: the per-step figures group the
// counted operations into DynamoDB writes, reads and SQS requests, the
// ratio is burst steps/s x write requests per step / ceiling, and the
// Markdown table and the JSON carry them.
func TestReportPerStepFiguresAndRatio(t *testing.T) {
	burst := Phase{Executions: 100, Steps: 300, Seconds: 2, StepsPerSec: 150, Counts: map[string]OpCount{
		"DynamoDB.UpdateItem":         {Requests: 600, Errors: 30, Units: 600},
		"DynamoDB.TransactWriteItems": {Requests: 100, Units: 400},
		"DynamoDB.GetItem":            {Requests: 300, Units: 300},
		"DynamoDB.DescribeTable":      {Requests: 3},
		"SQS.SendMessage":             {Requests: 300},
		"SQS.ReceiveMessage":          {Requests: 60},
	}}
	burst.derive()
	if burst.WriteReqPerStep != 700.0/300 || burst.ReadReqPerStep != 1 || burst.SQSReqPerStep != 1.2 || burst.WriteUnitsPerStep != 1000.0/300 {
		t.Fatalf("per step: %+v", burst)
	}
	steady := burst
	steady.P50Ms, steady.P99Ms = 42, 99
	r := &Report{Ceiling: 1000, CeilingViaProxy: 800, Units: true, Config: DefaultConfig(),
		Runs: []ProcessRun{{Processes: 1, Burst: burst, Steady: steady}, {Processes: 2, Burst: burst, Steady: steady}}}
	md := r.Markdown()
	if want := 150 * (700.0 / 300) / 1000; r.Runs[0].Ratio != want {
		t.Errorf("ratio %v, want %v", r.Runs[0].Ratio, want)
	}
	for _, want := range []string{
		"| ceiling: conditional UpdateItem, 8 goroutines, warmed | 1000 writes/s (800 through the counting proxy) |",
		"| 1 process | 150.0 | 42 | 99 | 2.33 / 2.33 | 1.00 / 1.00 | 1.20 / 1.20 | 3.33 / 3.33 | 0.35 |",
		"| 2 processes | 150.0 |",
		"| DynamoDB.UpdateItem | 2.00 (0.10) / 2.00 (0.10) |",
		"| SQS.ReceiveMessage | 0.20 / 0.20 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	// Writes, then reads, then other DynamoDB operations, then SQS.
	if i, j, k := strings.Index(md, "| DynamoDB.TransactWriteItems"), strings.Index(md, "| DynamoDB.GetItem"), strings.Index(md, "| DynamoDB.DescribeTable"); !(i < j && j < k) {
		t.Errorf("operations out of order:\n%s", md)
	}
	b, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Runs[1].Ratio != r.Runs[1].Ratio || back.Runs[0].Burst.Counts["DynamoDB.UpdateItem"].Errors != 30 {
		t.Errorf("JSON round trip: %v %+v", err, back.Runs)
	}
	r.Units = false
	if md := r.Markdown(); !strings.Contains(md, "| skipped / skipped |") || strings.Contains(md, "write units: table + index") {
		t.Errorf("without units the units column must say skipped:\n%s", md)
	}
}

// TestReportWhereTheTimeGoes: the report carries each operation's mean
// latency at the server, the CPU per step of each process, the
// connections the proxies accepted, the CPU ratio and the critical path;
// what was not measured shows as "-".
func TestReportWhereTheTimeGoes(t *testing.T) {
	burst := Phase{Executions: 100, Steps: 300, StepsPerSec: 200, Counts: map[string]OpCount{
		"DynamoDB.UpdateItem": {Requests: 400, Nanos: 400 * int64(2500*time.Microsecond)},
		"DynamoDB.PutItem":    {Requests: 200, Nanos: 200 * int64(time.Millisecond)},
	}, Connections: map[string]int{"DynamoDB": 3, "SQS": 1},
		CPUMsPerStep: map[string]float64{CPUServe: 1.5, CPUDynamo: 3, CPUSQS: 0.25}}
	burst.derive() // 2 write requests per step
	steady := burst
	steady.Counts = map[string]OpCount{"DynamoDB.UpdateItem": {Requests: 10, Nanos: 10 * int64(time.Millisecond)}}
	path := &Path{Requests: []PathRequest{{Op: "DynamoDB.PutItem", Target: "execution table", StartMs: 1, EndMs: 2, Status: 200}},
		AnsweredMs: 3, SucceededMs: 9}
	r := &Report{Ceiling: 1000, CeilingCPUMsPerWrite: 0.6, Config: DefaultConfig(),
		Runs: []ProcessRun{{Processes: 1, Burst: burst, Steady: steady, Path: path}}}
	md := r.Markdown()
	if want := 0.6 * 2 / 3; math.Abs(r.Runs[0].CPURatio-want) > 1e-9 {
		t.Errorf("CPU ratio %v, want %v", r.Runs[0].CPURatio, want)
	}
	for _, want := range []string{
		"0.60 DynamoDB Local CPU ms/write |",
		"| 1 process | 200.0 |", "| 0.40 | 0.40 |",
		"| DynamoDB.UpdateItem | 2.5 / 1.0 |", "| DynamoDB.PutItem | 1.0 / - |",
		"| serve | 1.50 / 1.50 |", "| DynamoDB Local | 3.00 / 3.00 |", "| bench (proxies, submitters) | - / - |",
		"| connections to the DynamoDB proxy | 3 / 3 |",
		"Critical path of one execution, 1 process", "| 1 | DynamoDB.PutItem | execution table | 1.0 | 2.0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	r.CeilingCPUMsPerWrite = 0
	if md := r.Markdown(); !strings.Contains(md, "| 0.40 | - |") {
		t.Errorf("without the ceiling's CPU the CPU ratio must say -:\n%s", md)
	}
}

func TestReportWithoutUnitsSaysSkipped(t *testing.T) {
	r := &Report{Config: DefaultConfig(), Runs: []ProcessRun{{Processes: 1, Burst: Phase{Steps: 3}, Steady: Phase{Steps: 3}}}}
	if md := r.Markdown(); !strings.Contains(md, "| skipped / skipped |") || strings.Contains(md, "write units: table + index") {
		t.Errorf("without units the units column must say skipped:\n%s", md)
	}
}

// TestPercentileIsNearestRank: p50 and p99 of 1..100 ms are 50 and 99 ms.
func TestPercentileIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p50, p99, p100 := Percentile(ds, 0.5), Percentile(ds, 0.99), Percentile(ds, 1); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond || p100 != 100*time.Millisecond {
		t.Errorf("p50 %v p99 %v p100 %v", p50, p99, p100)
	}
	if Percentile(nil, 0.5) != 0 || Percentile(ds[:1], 0.99) != 100*time.Millisecond {
		t.Error("empty or single-element percentiles")
	}
}

// TestConfigFromEnvNamesTheVariableAtFault: the BENCH_* knobs apply, and
// a bad value is refused with the variable's name.
func TestConfigFromEnvNamesTheVariableAtFault(t *testing.T) {
	t.Setenv("BENCH_EXECUTIONS", "50")
	t.Setenv("BENCH_RATE", "2.5")
	t.Setenv("BENCH_DURATION", "5s")
	t.Setenv("BENCH_PROCESSES", "2, 3")
	t.Setenv("BENCH_WARMUP", "0")
	t.Setenv("BENCH_WARMUP_DURATION", "2s")
	t.Setenv("BENCH_SERVE_SETTINGS", "worker-concurrency=32, history.stream-poller=false")
	c, err := ConfigFromEnv()
	if err != nil || c.Executions != 50 || c.Rate != 2.5 || c.Duration != 5*time.Second || len(c.Processes) != 2 || c.Processes[1] != 3 ||
		c.Warmup != 0 || c.WarmupDuration != 2*time.Second || len(c.ServeSettings) != 2 ||
		c.ServeSettings["worker-concurrency"] != "32" || c.ServeSettings["history.stream-poller"] != "false" {
		t.Fatalf("%+v %v", c, err)
	}
	for k, v := range map[string]string{"BENCH_EXECUTIONS": "0", "BENCH_RATE": "x", "BENCH_DURATION": "30", "BENCH_PROCESSES": "1,,2",
		"BENCH_WARMUP": "-1", "BENCH_WARMUP_DURATION": "15", "BENCH_SERVE_SETTINGS": "worker-concurrency"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%s=%s: %v, want an error naming %s", k, v, err, k)
			}
		})
	}
}

// TestTailReturnsOnlyCompletedLines: a line still being written is kept
// for the next poll, and the latency field is read in both of slog's
// forms (JSON nanoseconds, text duration string).
func TestTailReturnsOnlyCompletedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tl := &tail{path: path}
	f.WriteString("qasync serve banner\n{\"event\":\"execution_succeeded\",\"latency\":1500000,\"time\":\"2026-01-01T00:00:00.123Z\"}\n{\"event\":\"execution_")
	evs, err := tl.poll()
	if err != nil || len(evs) != 1 {
		t.Fatalf("first poll: %v %v", evs, err)
	}
	if d, ok := latencyField(evs[0]); !ok || d != 1500*time.Microsecond {
		t.Errorf("latency %v %v, want 1.5ms", d, ok)
	}
	if at, ok := eventTime(evs[0]); !ok || at.Nanosecond() != 123_000_000 {
		t.Errorf("time %v %v", at, ok)
	}
	f.WriteString("succeeded\",\"latency\":\"2.5ms\"}\n")
	evs, err = tl.poll()
	if err != nil || len(evs) != 1 || evs[0].Name() != "execution_succeeded" {
		t.Fatalf("second poll: %v %v", evs, err)
	}
	if d, ok := latencyField(evs[0]); !ok || d != 2500*time.Microsecond {
		t.Errorf("latency %v %v, want 2.5ms", d, ok)
	}
}
