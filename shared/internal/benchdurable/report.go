package benchdurable

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Operations that count as DynamoDB writes and reads (the rest, such as
// DescribeTable, are listed by operation only).
var (
	WriteOps = []string{"UpdateItem", "PutItem", "TransactWriteItems", "BatchWriteItem", "DeleteItem"}
	ReadOps  = []string{"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
)

// Report is one run of the benchmark.
type Report struct {
	// Binary is the qasync binary measured.
	Binary string `json:"binary"`
	// Nproc is the number of CPUs; LoadAverage /proc/loadavg at the start.
	Nproc       int    `json:"nproc"`
	LoadAverage string `json:"load_average"`
	Config      Config `json:"config"`
	// Ceiling is DynamoDB Local's conditional UpdateItem rate (writes/s),
	// CeilingViaProxy the same through the counting proxy.
	Ceiling         float64 `json:"ceiling_writes_per_sec"`
	CeilingViaProxy float64 `json:"ceiling_via_proxy_writes_per_sec"`
	// CeilingCPUMsPerWrite is DynamoDB Local's CPU time per write of the
	// ceiling (0: not measured).
	CeilingCPUMsPerWrite float64 `json:"ceiling_cpu_ms_per_write,omitempty"`
	// Units is whether capacity units were collected; UnitsNote says how
	// or why not.
	Units     bool   `json:"units"`
	UnitsNote string `json:"units_note"`
	// Latency says how submit -> SUCCEEDED was measured.
	Latency string `json:"latency"`
	// Runs are the process counts measured.
	Runs []ProcessRun `json:"runs"`
}

// ProcessRun is the burst and the steady load through Processes serve
// processes.
type ProcessRun struct {
	Processes int   `json:"processes"`
	Burst     Phase `json:"burst"`
	Steady    Phase `json:"steady"`
	// Ratio is the burst's DynamoDB write request rate over the ceiling:
	// Burst.StepsPerSec x Burst.WriteReqPerStep / Report.Ceiling.
	Ratio float64 `json:"ratio"`
	// CPURatio is the same share counted in DynamoDB Local's CPU time,
	// which both the ceiling and the burst are bound by on a small
	// machine: Report.CeilingCPUMsPerWrite x Burst.WriteReqPerStep /
	// Burst.CPUMsPerStep[CPUDynamo]. It depends less than Ratio on how
	// much of the machine other processes took during the ceiling and
	// during the burst (a loaded machine still stretches the CPU time of
	// each request: hyperthreads and caches are shared) (0: not
	// measured).
	CPURatio float64 `json:"cpu_ratio,omitempty"`
	// Path is one execution's requests, run alone after the steady load
	// (nil when that run failed).
	Path *Path `json:"path,omitempty"`
}

// The processes whose CPU time a phase reports (Phase.CPUMsPerStep).
const (
	CPUServe  = "serve"
	CPUDynamo = "DynamoDB Local"
	CPUSQS    = "SQS server"
	// CPUBench is the benchmark's own process: the counting proxies, the
	// submitters and the log reader.
	CPUBench = "bench (proxies, submitters)"
)

// cpuLabels are the CPU labels in the report's order.
var cpuLabels = []string{CPUServe, CPUDynamo, CPUSQS, CPUBench}

// Phase is one load through the processes.
type Phase struct {
	Executions int `json:"executions"`
	Steps      int `json:"steps"`
	// Seconds is from the first submit to the last SUCCEEDED.
	Seconds     float64 `json:"seconds"`
	StepsPerSec float64 `json:"steps_per_sec"`
	// P50Ms and P99Ms are submit -> SUCCEEDED (Report.Latency);
	// LatencyField* the same quantiles of execution_succeeded's latency
	// field (row created -> the clock reading before the last commit).
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	LatencyFieldP50Ms float64 `json:"latency_field_p50_ms"`
	LatencyFieldP99Ms float64 `json:"latency_field_p99_ms"`
	// Commits are the transition_committed events of the phase's
	// executions, Chained those that claimed the next step too.
	Commits int `json:"commits"`
	Chained int `json:"chained"`
	// Counts are the proxies' counts by operation over the phase.
	Counts map[string]OpCount `json:"counts"`
	// Per step: all counted requests (or units) / Steps.
	WriteReqPerStep   float64 `json:"dynamodb_write_requests_per_step"`
	ReadReqPerStep    float64 `json:"dynamodb_read_requests_per_step"`
	SQSReqPerStep     float64 `json:"sqs_requests_per_step"`
	WriteUnitsPerStep float64 `json:"dynamodb_write_units_per_step"`
	ReadUnitsPerStep  float64 `json:"dynamodb_read_units_per_step"`
	// Connections are the client connections each counting proxy
	// accepted over the phase, by service ("DynamoDB", "SQS"): a handful
	// when the serve processes keep their connections, about one per
	// request when they close them.
	Connections map[string]int `json:"connections,omitempty"`
	// CPUMsPerStep is the CPU time each process (CPUServe, CPUDynamo,
	// CPUSQS, CPUBench; the serve processes summed) used over the phase,
	// in milliseconds per step: what a step costs each, and which one a
	// machine's cores run out on first.
	CPUMsPerStep map[string]float64 `json:"cpu_ms_per_step,omitempty"`
}

// derive sets the per-step figures from Counts and Steps.
func (p *Phase) derive() {
	if p.Steps == 0 {
		return
	}
	var writes, reads, sqs int
	var writeUnits, readUnits float64
	for op, c := range p.Counts {
		name, dynamo := strings.CutPrefix(op, "DynamoDB.")
		switch {
		case dynamo && slices.Contains(WriteOps, name):
			writes += c.Requests
			writeUnits += c.Units
		case dynamo && slices.Contains(ReadOps, name):
			reads += c.Requests
			readUnits += c.Units
		case strings.HasPrefix(op, "SQS."):
			sqs += c.Requests
		}
	}
	n := float64(p.Steps)
	p.WriteReqPerStep, p.ReadReqPerStep, p.SQSReqPerStep = float64(writes)/n, float64(reads)/n, float64(sqs)/n
	p.WriteUnitsPerStep, p.ReadUnitsPerStep = writeUnits/n, readUnits/n
}

// finish sets each run's ratio to the ceiling.
func (r *Report) finish() {
	for i := range r.Runs {
		run := &r.Runs[i]
		run.Ratio, run.CPURatio = 0, 0
		if r.Ceiling > 0 {
			run.Ratio = run.Burst.StepsPerSec * run.Burst.WriteReqPerStep / r.Ceiling
		}
		if c := run.Burst.CPUMsPerStep[CPUDynamo]; c > 0 && r.CeilingCPUMsPerWrite > 0 {
			run.CPURatio = r.CeilingCPUMsPerWrite * run.Burst.WriteReqPerStep / c
		}
	}
}

// JSON is the report as indented JSON.
func (r *Report) JSON() ([]byte, error) {
	r.finish()
	return json.MarshalIndent(r, "", "  ")
}

// operationTable writes a table of one row per operation and one column
// per run, each cell cell's figure of the burst and of the steady load.
// It leaves the table open for rows the caller appends.
func (r *Report) operationTable(b *strings.Builder, cell func(Phase, string) string) {
	b.WriteString("| operation |")
	for _, run := range r.Runs {
		b.WriteString(" " + processes(run.Processes) + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Runs)) + "\n")
	for _, op := range r.operations() {
		b.WriteString("| " + op + " |")
		for _, run := range r.Runs {
			fmt.Fprintf(b, " %s / %s |", cell(run.Burst, op), cell(run.Steady, op))
		}
		b.WriteString("\n")
	}
}

// Markdown is the report as one table, the requests per step by
// operation, and the settings.
func (r *Report) Markdown() string {
	r.finish()
	var b strings.Builder
	units := func(v float64) string {
		if !r.Units {
			return "skipped"
		}
		return f2(v)
	}
	b.WriteString("| run | burst steps/s | steady p50 ms | steady p99 ms | DynamoDB write req/step | DynamoDB read req/step | SQS req/step | DynamoDB write units/step | ratio | CPU ratio |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| ceiling: conditional UpdateItem, %d goroutines, warmed | %.0f writes/s (%.0f through the counting proxy) | | | | | | | | %s DynamoDB Local CPU ms/write |\n",
		r.Config.CeilingWorkers, r.Ceiling, r.CeilingViaProxy, optional(r.CeilingCPUMsPerWrite))
	for _, run := range r.Runs {
		bu, st := run.Burst, run.Steady
		fmt.Fprintf(&b, "| %s | %.1f | %.0f | %.0f | %s / %s | %s / %s | %s / %s | %s / %s | %.2f | %s |\n",
			processes(run.Processes), bu.StepsPerSec, st.P50Ms, st.P99Ms,
			f2(bu.WriteReqPerStep), f2(st.WriteReqPerStep), f2(bu.ReadReqPerStep), f2(st.ReadReqPerStep),
			f2(bu.SQSReqPerStep), f2(st.SQSReqPerStep), units(bu.WriteUnitsPerStep), units(st.WriteUnitsPerStep), run.Ratio, optional(run.CPURatio))
	}
	b.WriteString("\nPer step cells: burst / steady. Ratio: burst steps/s x burst DynamoDB write req/step / ceiling. " +
		"CPU ratio: the same in DynamoDB Local's CPU time (ceiling CPU ms/write x burst write req/step / burst DynamoDB Local CPU ms/step), " +
		"which depends less on the load other processes put on the machine during the ceiling and during the burst.\n\n")

	b.WriteString("Requests per step by operation (burst / steady; failed ones, such as lost conditional writes, in parentheses):\n\n")
	r.operationTable(&b, perStep)
	if r.Units {
		b.WriteString("| DynamoDB write units: table + index |")
		for _, run := range r.Runs {
			fmt.Fprintf(&b, " %s / %s |", writeUnitSplit(run.Burst), writeUnitSplit(run.Steady))
		}
		b.WriteString("\n| DynamoDB read units |")
		for _, run := range r.Runs {
			fmt.Fprintf(&b, " %s / %s |", f2(run.Burst.ReadUnitsPerStep), f2(run.Steady.ReadUnitsPerStep))
		}
		b.WriteString("\n")
	}
	b.WriteString("| commits per step (chained) |")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, " %s / %s |", commits(run.Burst), commits(run.Steady))
	}
	b.WriteString("\n\n")

	b.WriteString("Mean latency at the server by operation, ms (burst / steady; from the proxy's forwarding to the answer):\n\n")
	r.operationTable(&b, meanMs)
	b.WriteString("\nCPU ms per step by process, and client connections the proxies accepted (burst / steady):\n\n")
	b.WriteString("| process |")
	for _, run := range r.Runs {
		b.WriteString(" " + processes(run.Processes) + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Runs)) + "\n")
	for _, label := range cpuLabels {
		b.WriteString("| " + label + " |")
		for _, run := range r.Runs {
			fmt.Fprintf(&b, " %s / %s |", cpuMs(run.Burst, label), cpuMs(run.Steady, label))
		}
		b.WriteString("\n")
	}
	for _, svc := range []string{"DynamoDB", "SQS"} {
		b.WriteString("| connections to the " + svc + " proxy |")
		for _, run := range r.Runs {
			fmt.Fprintf(&b, " %s / %s |", connections(run.Burst, svc), connections(run.Steady, svc))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, run := range r.Runs {
		if run.Path == nil {
			continue
		}
		fmt.Fprintf(&b, "Critical path of one execution, %s (run alone after the steady load; ms from the submit request's start, as the proxies saw the requests):\n\n%s\n",
			processes(run.Processes), run.Path.Markdown())
	}

	fmt.Fprintf(&b, "Latency: %s. The log's latency field (row created -> clock read before the last commit), p50/p99 ms of the steady load:", r.Latency)
	for _, run := range r.Runs {
		fmt.Fprintf(&b, " %s %.0f/%.0f;", processes(run.Processes), run.Steady.LatencyFieldP50Ms, run.Steady.LatencyFieldP99Ms)
	}
	b.WriteString("\n")
	c := r.Config
	fmt.Fprintf(&b, "Settings: %s (input %s, diag.enabled=true) on fresh tables and queues per process count, durable providers (crashtest.Stack.Env: 1 s long polls, sweep every 1 s), log-level info; "+
		"burst %d executions from %d submitters; steady %g/s for %s; warm-up bursts first (at least %d executions and %s); ceiling %s warm-up then %s; "+
		"counts from the first submit to the last SUCCEEDED + %s (idle polls and sweeps included), per step = count / (executions x %d); %s.\n",
		Pipeline, Input, c.Executions, c.Submitters, c.Rate, c.Duration, c.Warmup, c.WarmupDuration, c.CeilingWarmup, c.CeilingDuration, settle, StepsPerExecution, r.UnitsNote)
	fmt.Fprintf(&b, "Machine: nproc=%d, load average at start %s (other processes may share the machine; DynamoDB Local, the SQS server, the proxies, the serve processes and the submitters all run on it); binary %s.\n",
		r.Nproc, r.LoadAverage, r.Binary)
	return b.String()
}

// operations lists every operation counted in any phase: DynamoDB writes,
// reads and others, then SQS, then the rest, each group sorted.
func (r *Report) operations() []string {
	set := map[string]bool{}
	for _, run := range r.Runs {
		for _, ph := range []Phase{run.Burst, run.Steady} {
			for op := range ph.Counts {
				set[op] = true
			}
		}
	}
	group := func(op string) int {
		name, dynamo := strings.CutPrefix(op, "DynamoDB.")
		switch {
		case dynamo && slices.Contains(WriteOps, name):
			return 0
		case dynamo && slices.Contains(ReadOps, name):
			return 1
		case dynamo:
			return 2
		case strings.HasPrefix(op, "SQS."):
			return 3
		}
		return 4
	}
	ops := make([]string, 0, len(set))
	for op := range set {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b string) int {
		if d := group(a) - group(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return ops
}

func perStep(p Phase, op string) string {
	c := p.Counts[op]
	if p.Steps == 0 {
		return "-"
	}
	s := f2(float64(c.Requests) / float64(p.Steps))
	if c.Errors > 0 {
		s += fmt.Sprintf(" (%s)", f2(float64(c.Errors)/float64(p.Steps)))
	}
	return s
}

// optional is v with two decimals, "-" for 0 (not measured).
func optional(v float64) string {
	if v == 0 {
		return "-"
	}
	return f2(v)
}

func meanMs(p Phase, op string) string {
	c, ok := p.Counts[op]
	if !ok || c.Requests == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", c.MeanMs())
}

func cpuMs(p Phase, label string) string {
	v, ok := p.CPUMsPerStep[label]
	if !ok {
		return "-"
	}
	return f2(v)
}

func connections(p Phase, svc string) string {
	v, ok := p.Connections[svc]
	if !ok {
		return "-"
	}
	return fmt.Sprint(v)
}

func writeUnitSplit(p Phase) string {
	if p.Steps == 0 {
		return "-"
	}
	var table, index float64
	for op, c := range p.Counts {
		if name, ok := strings.CutPrefix(op, "DynamoDB."); ok && slices.Contains(WriteOps, name) {
			table += c.TableUnits
			index += c.IndexUnits
		}
	}
	n := float64(p.Steps)
	return f2(table/n) + " + " + f2(index/n)
}

func commits(p Phase) string {
	if p.Steps == 0 {
		return "-"
	}
	n := float64(p.Steps)
	return fmt.Sprintf("%s (%s)", f2(float64(p.Commits)/n), f2(float64(p.Chained)/n))
}

func processes(k int) string {
	if k == 1 {
		return "1 process"
	}
	return fmt.Sprintf("%d processes", k)
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
