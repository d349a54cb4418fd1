// Command bench is qasync's peer benchmark: the same 3-step durable
// pipeline on qasync, on River (SQLite, Postgres) and on Temporal's dev
// server, side by side, each system in a child process of its own (so CPU
// and memory are not mixed), printed as one Markdown table with the ratios
// to qasync. See docs/embedded-store.md ("Against its peers").
//
// It is informational: nothing gates on its figures.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// resultPrefix starts the child's result line on its stdout.
const resultPrefix = "BENCH_RESULT "

// Result is one system's row.
type Result struct {
	Key      string `json:"key"`
	System   string `json:"system"`
	Settings string `json:"settings"`
	Baseline bool   `json:"baseline,omitempty"`
	// Status is ok, failed (Reason says why; the phases that worked keep
	// their figures) or skipped.
	Status     string        `json:"status"`
	Reason     string        `json:"reason,omitempty"`
	Burst      *BurstResult  `json:"burst,omitempty"`
	Steady     *SteadyResult `json:"steady,omitempty"`
	PeakRSSMiB float64       `json:"peak_rss_mib,omitempty"`
}

// Machine describes where the figures were taken.
type Machine struct {
	NumCPU     int    `json:"nproc"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
	OS         string `json:"os"`
	CPU        string `json:"cpu,omitempty"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1-minute figures: other
	// work on the machine makes the run noisy.
	LoadBefore string `json:"load_before,omitempty"`
	LoadAfter  string `json:"load_after,omitempty"`
}

// Settings are the workload's knobs as reported.
type Settings struct {
	Workers    int     `json:"workers"`
	Executions int     `json:"burst_executions"`
	Steps      int     `json:"burst_steps"`
	Submitters int     `json:"burst_submitters"`
	Rate       float64 `json:"steady_rate_per_s"`
	Duration   string  `json:"steady_duration"`
}

// Report is the whole run (-o json prints it).
type Report struct {
	Machine  Machine  `json:"machine"`
	Settings Settings `json:"settings"`
	Results  []Result `json:"results"`
}

func main() {
	var (
		o       Options
		child   = flag.String("child", "", "internal: run one system and print its result line")
		dir     = flag.String("dir", "", "internal: the child's directory for its systems' files")
		systems = flag.String("systems", "", "comma-separated systems to run (default all: "+strings.Join(specKeys(), ",")+")")
		out     = flag.String("o", "table", "output: table (Markdown) or json")
		verbose = flag.Bool("v", false, "pass the children's logs through to stderr")
	)
	flag.IntVar(&o.Workers, "workers", 32, "concurrent steps per system (River MaxWorkers)")
	flag.IntVar(&o.Executions, "executions", 3000, "burst: executions submitted at once (3 steps each)")
	flag.IntVar(&o.Submitters, "submitters", 8, "burst: goroutines submitting")
	flag.Float64Var(&o.Rate, "rate", 10, "steady: executions per second")
	flag.DurationVar(&o.Duration, "duration", 30*time.Second, "steady: how long to submit")
	flag.DurationVar(&o.StartTimeout, "start-timeout", time.Minute, "bound on a system's start and stop")
	flag.DurationVar(&o.BurstTimeout, "burst-timeout", 5*time.Minute, "bound on the burst (first submit to last step done)")
	flag.DurationVar(&o.DrainTimeout, "drain-timeout", time.Minute, "steady: bound on the wait after the last submit")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *child != "" {
		o.Dir = *dir
		os.Exit(runChild(ctx, *child, o))
	}
	if *out != "table" && *out != "json" {
		fmt.Fprintf(os.Stderr, "bench: -o %q: want table or json\n", *out)
		os.Exit(2)
	}
	selected, err := selectSpecs(*systems)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	rep := Report{Machine: machine(), Settings: o.settings()}
	for _, spec := range selected {
		if ctx.Err() != nil {
			rep.Results = append(rep.Results, Result{Key: spec.Key, System: spec.Label, Settings: spec.Settings,
				Baseline: spec.Baseline, Status: "skipped", Reason: "interrupted"})
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", spec.Label)
		r := runParent(ctx, spec, o, *verbose)
		fmt.Fprintf(os.Stderr, "bench: %s: %s %s\n", spec.Label, r.Status, r.Reason)
		rep.Results = append(rep.Results, r)
	}
	rep.Machine.LoadAfter = loadavg()
	if *out == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		renderTable(os.Stdout, rep)
	}
	if ctx.Err() != nil {
		os.Exit(1)
	}
}

func (o Options) validate() error {
	switch {
	case o.Workers < 1, o.Executions < 1, o.Submitters < 1:
		return fmt.Errorf("-workers, -executions and -submitters must be at least 1")
	case o.Rate <= 0, o.Duration <= 0, int(o.Rate*o.Duration.Seconds()) < 1:
		return fmt.Errorf("-rate and -duration must give at least one steady execution")
	case o.StartTimeout <= 0, o.BurstTimeout <= 0, o.DrainTimeout <= 0:
		return fmt.Errorf("-start-timeout, -burst-timeout and -drain-timeout must be positive")
	}
	return nil
}

func (o Options) settings() Settings {
	return Settings{Workers: o.Workers, Executions: o.Executions, Steps: o.Executions * len(StepNames),
		Submitters: o.Submitters, Rate: o.Rate, Duration: o.Duration.String()}
}

// args are the flags that give a child the same options.
func (o Options) args() []string {
	return []string{
		"-workers", strconv.Itoa(o.Workers), "-executions", strconv.Itoa(o.Executions),
		"-submitters", strconv.Itoa(o.Submitters), "-rate", strconv.FormatFloat(o.Rate, 'g', -1, 64),
		"-duration", o.Duration.String(), "-start-timeout", o.StartTimeout.String(),
		"-burst-timeout", o.BurstTimeout.String(), "-drain-timeout", o.DrainTimeout.String(),
	}
}

// childTimeout bounds a child: both phases' bounds, two starts and two
// stops each, and a margin.
func (o Options) childTimeout() time.Duration {
	return o.BurstTimeout + o.Duration + o.DrainTimeout + 4*o.StartTimeout + time.Minute
}

func specKeys() []string {
	var keys []string
	for _, s := range sortedSpecs() {
		keys = append(keys, s.Key)
	}
	return keys
}

func selectSpecs(list string) ([]Spec, error) {
	if list == "" {
		return sortedSpecs(), nil
	}
	want := map[string]bool{}
	for _, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		if _, ok := specs[k]; !ok {
			return nil, fmt.Errorf("-systems: unknown system %q (known: %s)", k, strings.Join(specKeys(), ", "))
		}
		want[k] = true
	}
	var out []Spec
	for _, s := range sortedSpecs() {
		if want[s.Key] {
			out = append(out, s)
		}
	}
	return out, nil
}

// runParent prepares a system (a Postgres, say), runs its child process
// and reads its result line. Whatever goes wrong becomes the row's reason.
func runParent(ctx context.Context, spec Spec, o Options, verbose bool) Result {
	// Pdeathsig fires when the thread that started the child exits: keep
	// this goroutine on its thread until the child is done.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	res := Result{Key: spec.Key, System: spec.Label, Settings: spec.Settings, Baseline: spec.Baseline, Status: "failed"}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench: "+f+"\n", a...) }
	var env []string
	if spec.Prepare != nil {
		pctx, cancel := context.WithTimeout(ctx, 3*o.StartTimeout)
		e, cleanup, skip, err := spec.Prepare(pctx, logf)
		cancel()
		if cleanup != nil {
			defer cleanup()
		}
		switch {
		case err != nil:
			res.Reason = "prepare: " + err.Error()
			return res
		case skip != "":
			res.Status, res.Reason = "skipped", skip
			return res
		}
		env = e
	}
	self, err := os.Executable()
	if err != nil {
		res.Reason = err.Error()
		return res
	}
	// The child's files go under a directory the parent removes, however
	// the child ends.
	dir, err := os.MkdirTemp("", "qasync-bench-"+spec.Key+"-")
	if err != nil {
		res.Reason = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	cctx, cancel := context.WithTimeoutCause(ctx, o.childTimeout(), fmt.Errorf("child timeout %s", o.childTimeout()))
	defer cancel()
	cmd := exec.CommandContext(cctx, self, append([]string{"-child", spec.Key, "-dir", dir}, o.args()...)...)
	cmd.Env = append(os.Environ(), env...)
	// A child outliving its parent is killed; one whose run is cancelled
	// (timeout, signal) gets SIGTERM to close its system and report what
	// it has, then SIGKILL after WaitDelay.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if verbose {
		cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
	}
	runErr := cmd.Run()
	got, found := parseResult(stdout.Bytes())
	if !found {
		reason := "no result"
		if runErr != nil {
			reason = runErr.Error()
			if c := context.Cause(cctx); c != nil {
				reason = c.Error()
			}
		}
		if tail := strings.TrimSpace(lastLines(stderr.String(), 3)); tail != "" {
			reason += ": " + tail
		}
		res.Reason = reason
		return res
	}
	got.Baseline = spec.Baseline
	return got
}

// parseResult finds the child's result line.
func parseResult(stdout []byte) (Result, bool) {
	var r Result
	found := false
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), resultPrefix); ok {
			if json.Unmarshal([]byte(line), &r) == nil {
				found = true
			}
		}
	}
	return r, found
}

// runChild runs both phases of one system and prints its result line.
func runChild(ctx context.Context, key string, o Options) int {
	spec, ok := specs[key]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: unknown system %q\n", key)
		return 2
	}
	res := Result{Key: spec.Key, System: spec.Label, Settings: spec.Settings, Status: "ok"}
	var reasons []string
	if b, err := runBurst(ctx, spec, o); err != nil {
		reasons = append(reasons, "burst: "+err.Error())
	} else {
		res.Burst = &b
	}
	if ctx.Err() == nil {
		s, err := runSteady(ctx, spec, o)
		if err != nil {
			reasons = append(reasons, "steady: "+err.Error())
		}
		if err == nil || s.Completed > 0 {
			res.Steady = &s
		}
	} else {
		reasons = append(reasons, "steady: not run: "+context.Cause(ctx).Error())
	}
	if len(reasons) > 0 {
		res.Status, res.Reason = "failed", strings.Join(reasons, "; ")
	}
	res.PeakRSSMiB = peakRSSMiB()
	line, _ := json.Marshal(res)
	fmt.Printf("%s%s\n", resultPrefix, line)
	return 0
}

func machine() Machine {
	m := Machine{NumCPU: goruntime.NumCPU(), GOMAXPROCS: goruntime.GOMAXPROCS(0), Go: goruntime.Version(),
		OS: goruntime.GOOS + "/" + goruntime.GOARCH, LoadBefore: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadavg is the 1-minute load average ("" where unknown).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
