// Package benchdurable measures the durable runtime on the local AWS
// stack (make bench-durable): the conditional-write ceiling of DynamoDB
// Local, then a burst and a steady load of diag.drill executions through
// one and through two real `qasync serve` processes, with every request
// they send to DynamoDB Local and the SQS server counted by a reverse
// proxy on loopback (Proxy), outside the process under test. It prints
// one table (Report.Markdown, or Report JSON) and asserts nothing about
// the figures: they depend on the machine.
//
// The entry point is TestBenchDurable, which runs only with
// BENCH_DURABLE=1 (make bench-durable sets it), so `make test` never runs
// the benchmark; the package's other tests check the proxy and the report.
package benchdurable

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/schema"
)

// Pipeline is the measured pipeline, StepsPerExecution its steps and
// Input the body of every submit.
const (
	Pipeline          = "diag.drill"
	StepsPerExecution = 3
	Input             = `{}`
)

// Config are a run's settings.
type Config struct {
	// Executions is the size of the burst (BENCH_EXECUTIONS).
	Executions int `json:"executions"`
	// Submitters is how many goroutines submit the burst.
	Submitters int `json:"submitters"`
	// Rate is the steady load in submits per second (BENCH_RATE), for
	// Duration (BENCH_DURATION).
	Rate     float64       `json:"rate"`
	Duration time.Duration `json:"duration_ns"`
	// Processes are the numbers of serve processes measured, one row each
	// (BENCH_PROCESSES, "1,2").
	Processes []int `json:"processes"`
	// Warmup executions run on fresh processes before the burst, not
	// measured: bursts of Executions until at least Warmup executions
	// and WarmupDuration have passed (BENCH_WARMUP,
	// BENCH_WARMUP_DURATION). DynamoDB Local warms up on the ceiling's
	// plain table, not on the execution table's paths (its stream, its
	// indexes, the runtime's expressions): after 20 executions it still
	// spent twice the CPU per step it spends once warm, and the burst
	// measured its warm-up rather than the runtime.
	Warmup         int           `json:"warmup"`
	WarmupDuration time.Duration `json:"warmup_duration_ns"`
	// CeilingWorkers goroutines measure the ceiling for CeilingDuration
	// after CeilingWarmup.
	CeilingWorkers  int           `json:"ceiling_workers"`
	CeilingWarmup   time.Duration `json:"ceiling_warmup_ns"`
	CeilingDuration time.Duration `json:"ceiling_duration_ns"`
	// Timeout bounds the wait for one phase's executions to succeed.
	Timeout time.Duration `json:"timeout_ns"`
	// ServeSettings are extra configuration keys of the serve processes
	// by short name (BENCH_SERVE_SETTINGS, "worker-concurrency=32,
	// history.stream-poller=false"), applied over the benchmark's own.
	ServeSettings map[string]string `json:"serve_settings,omitempty"`
}

// DefaultConfig is the run make bench-durable does without knobs: a
// burst of 300, 10 submits/s for 30 s, through 1 and then 2 processes,
// each after 15 s of warm-up bursts.
func DefaultConfig() Config {
	return Config{Executions: 300, Submitters: 4, Rate: 10, Duration: 30 * time.Second, Processes: []int{1, 2},
		Warmup: 20, WarmupDuration: 15 * time.Second, CeilingWorkers: 8, CeilingWarmup: 15 * time.Second, CeilingDuration: 5 * time.Second,
		Timeout: 5 * time.Minute}
}

// ConfigFromEnv is DefaultConfig with the BENCH_* variables applied.
func ConfigFromEnv() (Config, error) {
	c := DefaultConfig()
	var err error
	if v := os.Getenv("BENCH_EXECUTIONS"); v != "" {
		if c.Executions, err = strconv.Atoi(v); err != nil || c.Executions < 1 {
			return c, fmt.Errorf("benchdurable: BENCH_EXECUTIONS=%q: want a positive integer", v)
		}
	}
	if v := os.Getenv("BENCH_RATE"); v != "" {
		if c.Rate, err = strconv.ParseFloat(v, 64); err != nil || c.Rate <= 0 {
			return c, fmt.Errorf("benchdurable: BENCH_RATE=%q: want a positive number of submits per second", v)
		}
	}
	if v := os.Getenv("BENCH_DURATION"); v != "" {
		if c.Duration, err = time.ParseDuration(v); err != nil || c.Duration <= 0 {
			return c, fmt.Errorf("benchdurable: BENCH_DURATION=%q: want a positive Go duration such as 30s", v)
		}
	}
	if v := os.Getenv("BENCH_WARMUP"); v != "" {
		if c.Warmup, err = strconv.Atoi(v); err != nil || c.Warmup < 0 {
			return c, fmt.Errorf("benchdurable: BENCH_WARMUP=%q: want a number of executions", v)
		}
	}
	if v := os.Getenv("BENCH_WARMUP_DURATION"); v != "" {
		if c.WarmupDuration, err = time.ParseDuration(v); err != nil || c.WarmupDuration < 0 {
			return c, fmt.Errorf("benchdurable: BENCH_WARMUP_DURATION=%q: want a Go duration such as 15s", v)
		}
	}
	if v := os.Getenv("BENCH_SERVE_SETTINGS"); v != "" {
		c.ServeSettings = map[string]string{}
		for f := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(f), "=")
			if !ok || k == "" {
				return c, fmt.Errorf("benchdurable: BENCH_SERVE_SETTINGS=%q: want key=value pairs separated by commas", v)
			}
			c.ServeSettings[k] = val
		}
	}
	if v := os.Getenv("BENCH_PROCESSES"); v != "" {
		c.Processes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return c, fmt.Errorf("benchdurable: BENCH_PROCESSES=%q: want process counts such as 1,2", v)
			}
			c.Processes = append(c.Processes, n)
		}
	}
	return c, nil
}

// Run measures everything the Report holds, on the local stack the test
// environment points at (awstest): the ceiling on a table of its own,
// then, for each process count, fresh tables and queues
// (crashtest.NewStack) and that many `qasync serve` processes reaching
// the stack through the counting proxies.
func Run(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx := context.Background()
	bin, err := crashtest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("benchdurable: the qasync binary (QASYNC_BIN, an absolute path: the test runs in its package's directory): %v", err)
	}
	clients, _ := awstest.Clients(t)
	dynamoURL, sqsURL, s3URL := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), os.Getenv("AWS_ENDPOINT_URL_SQS"), os.Getenv("AWS_ENDPOINT_URL_S3")
	rep := &Report{Binary: bin, Nproc: runtime.NumCPU(), LoadAverage: loadAverage(), Config: cfg,
		Latency: "submit -> SUCCEEDED: from the submit request's start (client clock) to the time of the serve " +
			"process's execution_succeeded log line, written after the last commit; no status polling"}

	// Capacity units need request bodies changed, which only a server
	// that ignores SigV4 signatures allows.
	rep.Units, err = SignaturesUnverified(ctx, dynamoURL)
	switch {
	case err != nil:
		rep.UnitsNote = "units skipped: signature check failed: " + err.Error()
	case !rep.Units:
		rep.UnitsNote = "units skipped: DynamoDB verifies SigV4 signatures, a changed body would be refused"
	default:
		rep.UnitsNote = "units: the proxy adds ReturnConsumedCapacity=INDEXES to data-plane requests lacking it " +
			"(DynamoDB Local accepted a request with a wrong signature); failed conditional writes report none"
	}
	dp, err := NewProxy(dynamoURL, ProxyOptions{Capacity: rep.Units})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	sp, err := NewProxy(sqsURL, ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	proxies := []*Proxy{dp, sp}
	s3Proxy := sp.URL // the stack's SQS server also serves S3
	if s3URL != "" && s3URL != sqsURL {
		p, err := NewProxy(s3URL, ProxyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies, s3Proxy = append(proxies, p), p.URL
	}

	// The CPU time of the processes on the path, per phase: the stack's
	// servers are found by their listening ports (none found: not
	// measured).
	var cpu cpuWatch
	cpu.add(CPUBench, os.Getpid())
	var dynamoCPU cpuWatch
	for label, u := range map[string]string{CPUDynamo: dynamoURL, CPUSQS: sqsURL} {
		pid, err := ListenerPID(u)
		if err != nil {
			t.Logf("benchdurable: %s CPU not measured: %v", label, err)
			continue
		}
		cpu.add(label, pid)
		if label == CPUDynamo {
			dynamoCPU.add(label, pid)
		}
	}

	table := awstest.Name(t, "ceiling")
	awstest.Tables(t, clients, schema.Table{Name: table, PartitionKey: schema.Attr{Name: "pk", Type: schema.String}})
	// DynamoDB Local's CPU time over the ceiling's measured window (from
	// the warm-up's end to the last write's answer).
	warm := make(chan struct{})
	time.AfterFunc(cfg.CeilingWarmup, func() { dynamoCPU.mark(); close(warm) })
	if rep.Ceiling, err = UpdateItemCeiling(ctx, clients.DynamoDB, table, cfg.CeilingWorkers, cfg.CeilingWarmup, cfg.CeilingDuration, nil); err != nil {
		t.Fatal(err)
	}
	<-warm
	if d, ok := dynamoCPU.since()[CPUDynamo]; ok && rep.Ceiling > 0 {
		rep.CeilingCPUMsPerWrite = ms(d) / (rep.Ceiling * cfg.CeilingDuration.Seconds())
	}
	viaProxy := dynamodb.NewFromConfig(clients.Config, func(o *dynamodb.Options) {
		o.BaseEndpoint, o.DisableValidateResponseChecksum = aws.String(dp.URL), true
	})
	if rep.CeilingViaProxy, err = UpdateItemCeiling(ctx, viaProxy, table, cfg.CeilingWorkers, time.Second, cfg.CeilingDuration, nil); err != nil {
		t.Fatal(err)
	}

	conns := map[string]*Proxy{"DynamoDB": dp, "SQS": sp}

	endpoints := []string{"AWS_ENDPOINT_URL_DYNAMODB=" + dp.URL, "AWS_ENDPOINT_URL_SQS=" + sp.URL, "AWS_ENDPOINT_URL_S3=" + s3Proxy}
	for _, k := range cfg.Processes {
		t.Run(fmt.Sprintf("processes=%d", k), func(t *testing.T) {
			rep.Runs = append(rep.Runs, runProcesses(t, cfg, k, endpoints, proxies, conns, cpu))
		})
	}
	return rep
}

// runProcesses measures the burst and the steady load through k serve
// processes on fresh tables and queues.
func runProcesses(t *testing.T, cfg Config, k int, endpoints []string, proxies []*Proxy, conns map[string]*Proxy, cpu cpuWatch) ProcessRun {
	st := crashtest.NewStack(t)
	// Info level: execution_succeeded is an info event. Later entries
	// win in a process's environment: the proxies replace the stack's
	// endpoints.
	env := append(st.Env(crashtest.Settings{"log-level": "info"}, cfg.ServeSettings), endpoints...)
	dir := t.TempDir()
	if keep := os.Getenv("BENCH_LOG_DIR"); keep != "" {
		dir = filepath.Join(keep, fmt.Sprintf("processes-%d", k))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := &bench{t: t, cfg: cfg, proxies: proxies, conns: conns, cpu: cpu, names: st.Names}
	for i := range k {
		s, err := crashtest.StartServer(env, dir, "serve-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Kill() })
		b.servers = append(b.servers, s)
		b.tails = append(b.tails, &tail{path: s.LogPath})
		b.cpu.add(CPUServe, s.PID())
	}
	b.warmup()
	run := ProcessRun{Processes: k}
	run.Burst = b.phase("burst", submitBurst(cfg.Executions, cfg.Submitters))
	run.Steady = b.phase("steady", submitSteady(cfg.Rate, cfg.Duration))
	run.Path = b.path()
	for _, s := range b.servers {
		if err := s.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
	}
	return run
}

// warmup runs bursts (of Executions, the first at least Warmup) until
// Warmup executions and WarmupDuration have passed.
func (b *bench) warmup() {
	start, done := time.Now(), 0
	for round := 0; done < b.cfg.Warmup || time.Since(start) < b.cfg.WarmupDuration; round++ {
		n := max(b.cfg.Executions, b.cfg.Warmup-done)
		b.phase("warmup"+strconv.Itoa(round), submitBurst(n, b.cfg.Submitters))
		done += n
	}
}

// bench is one process count's run.
type bench struct {
	t       *testing.T
	cfg     Config
	servers []*crashtest.Server
	tails   []*tail
	proxies []*Proxy
	conns   map[string]*Proxy // by service, for Phase.Connections
	cpu     cpuWatch
	names   schema.Names
}

// submitted is one submit: its execution and when the request started.
type submitted struct {
	id string
	at time.Time
}

// submitter submits executions through submit (which spreads them over
// the servers) and returns them.
type submitter func(submit func(i int) (submitted, error)) ([]submitted, error)

// submitBurst submits n executions from workers goroutines as fast as
// they are answered.
func submitBurst(n, workers int) submitter {
	return func(submit func(int) (submitted, error)) ([]submitted, error) {
		out := make([]submitted, n)
		next := make(chan int)
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range next {
					s, err := submit(i)
					if err != nil {
						errs <- err
						return
					}
					out[i] = s
				}
			})
		}
		for i := range n {
			select {
			case next <- i:
			case err := <-errs:
				close(next)
				wg.Wait()
				return nil, err
			}
		}
		close(next)
		wg.Wait()
		close(errs)
		return out, <-errs
	}
}

// submitSteady submits rate executions per second for d, each on time
// whatever the previous submits' answers take.
func submitSteady(rate float64, d time.Duration) submitter {
	return func(submit func(int) (submitted, error)) ([]submitted, error) {
		n := int(rate * d.Seconds())
		out := make([]submitted, n)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			wg.Go(func() {
				s, err := submit(i)
				if err != nil {
					errs <- err
				}
				out[i] = s
			})
		}
		wg.Wait()
		close(errs)
		return out, <-errs
	}
}

// settle is how long a phase waits after its last success before the
// counts are read, for the requests that follow the last commit: the
// work item's delete, and the history feed's pages of the phase's last
// writes (the serve processes' stream poller reads a second's records at
// a time); idle polling in it is counted too.
const settle = 1500 * time.Millisecond

// phase runs one phase: the proxies' counts are zeroed, the executions
// submitted, and the serve logs read until every one has succeeded.
func (b *bench) phase(name string, submit submitter) Phase {
	t := b.t
	for _, p := range b.proxies {
		p.Reset()
	}
	b.cpu.mark()
	subs, err := submit(func(i int) (submitted, error) {
		s := b.servers[i%len(b.servers)]
		at := time.Now()
		code, ans, err := crashtest.Submit(s.Addr, Pipeline, name+"-"+strconv.Itoa(i), []byte(Input))
		if err != nil {
			return submitted{}, fmt.Errorf("benchdurable: %s submit %d to %s: %w", name, i, s.Name, err)
		}
		if code != http.StatusAccepted {
			return submitted{}, fmt.Errorf("benchdurable: %s submit %d to %s: HTTP %d, want 202", name, i, s.Name, code)
		}
		return submitted{id: ans.ExecutionID, at: at}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done, err := b.await(subs)
	if err != nil {
		t.Fatalf("benchdurable: %s: %v", name, err)
	}
	time.Sleep(settle)
	var snaps []map[string]OpCount
	for _, p := range b.proxies {
		snaps = append(snaps, p.Snapshot())
	}
	ph := Phase{Executions: len(subs), Steps: len(subs) * StepsPerExecution, Counts: mergeCounts(snaps...),
		Connections: map[string]int{}, CPUMsPerStep: map[string]float64{}}
	for svc, p := range b.conns {
		ph.Connections[svc] = p.Conns()
	}
	for label, d := range b.cpu.since() {
		ph.CPUMsPerStep[label] = ms(d) / float64(ph.Steps)
	}
	first, last := subs[0].at, time.Time{}
	var lat, field []time.Duration
	for _, s := range subs {
		first = minTime(first, s.at)
		ev := done.succeeded[s.id]
		at, _ := eventTime(ev)
		if at.After(last) {
			last = at
		}
		lat = append(lat, at.Sub(s.at))
		if d, ok := latencyField(ev); ok {
			field = append(field, d)
		}
	}
	ph.Seconds = last.Sub(first).Seconds()
	ph.StepsPerSec = float64(ph.Steps) / ph.Seconds
	ph.P50Ms, ph.P99Ms = ms(Percentile(lat, 0.50)), ms(Percentile(lat, 0.99))
	ph.LatencyFieldP50Ms, ph.LatencyFieldP99Ms = ms(Percentile(field, 0.50)), ms(Percentile(field, 0.99))
	ph.Commits, ph.Chained = done.commits, done.chained
	ph.derive()
	return ph
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// outcome is what the logs said about a phase's executions.
type outcome struct {
	succeeded        map[string]crashtest.Event
	commits, chained int
}

// await reads the serve logs until every execution of subs has logged
// execution_succeeded; a dead-lettered execution or the timeout is an
// error.
func (b *bench) await(subs []submitted) (outcome, error) {
	want := make(map[string]bool, len(subs))
	for _, s := range subs {
		want[s.id] = true
	}
	o := outcome{succeeded: map[string]crashtest.Event{}}
	deadline := time.Now().Add(b.cfg.Timeout)
	for {
		for _, tl := range b.tails {
			evs, err := tl.poll()
			if err != nil {
				return o, err
			}
			for _, e := range evs {
				id := e.Str("execution_id")
				if !want[id] {
					continue
				}
				switch e.Name() {
				case "execution_succeeded":
					o.succeeded[id] = e
				case "transition_committed":
					o.commits++
					if e.Bool("chained") {
						o.chained++
					}
				case "execution_dead_lettered":
					return o, fmt.Errorf("execution %s dead-lettered: %v", id, e)
				}
			}
		}
		if len(o.succeeded) == len(want) {
			return o, nil
		}
		if time.Now().After(deadline) {
			return o, fmt.Errorf("%d of %d executions not SUCCEEDED within %s", len(want)-len(o.succeeded), len(want), b.cfg.Timeout)
		}
		for _, s := range b.servers {
			if s.Exited() {
				return o, fmt.Errorf("%s exited:\n%s", s.Name, s.Tail(20))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Percentile is the nearest-rank p-quantile (0 < p <= 1) of ds; 0 when
// ds is empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(float64(len(s))*p-1e-9)) - 1
	return s[max(0, min(i, len(s)-1))]
}

// loadAverage is /proc/loadavg's first three fields ("" elsewhere).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
