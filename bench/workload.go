package main

// The two phases every system runs (in its own child process): the burst
// and the steady stream, each on a fresh System.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options are the workload's knobs (the command's flags).
type Options struct {
	// Workers is how many steps may run at once.
	Workers int
	// Executions is the burst's size (3 steps each).
	Executions int
	// Submitters is how many goroutines submit the burst.
	Submitters int
	// Rate is the steady phase's executions per second.
	Rate float64
	// Duration is how long the steady phase submits.
	Duration time.Duration
	// StartTimeout bounds a System's Start and Close.
	StartTimeout time.Duration
	// BurstTimeout bounds the burst, from the first submit to the last
	// step done.
	BurstTimeout time.Duration
	// DrainTimeout bounds the wait for the steady phase's executions after
	// its last submit.
	DrainTimeout time.Duration
	// Dir is where the phases' directories are made ("" for the system's
	// temp dir).
	Dir string
}

// BurstResult is what the burst measured.
type BurstResult struct {
	Executions int     `json:"executions"`
	Steps      int     `json:"steps"`
	Seconds    float64 `json:"seconds"`
	StepsPerS  float64 `json:"steps_per_s"`
	// CPUMsPerStep is ProcessCPUMs (+ ServerCPUMs when known) / Steps.
	CPUMsPerStep float64 `json:"cpu_ms_per_step"`
	ProcessCPUMs float64 `json:"process_cpu_ms"`
	// ServerCPUMs is the database server's CPU (River on a local Postgres).
	ServerCPUMs    float64 `json:"server_cpu_ms,omitempty"`
	ServerCPUKnown bool    `json:"server_cpu_known,omitempty"`
}

// SteadyResult is what the steady phase measured: submit -> last step done.
type SteadyResult struct {
	Rate      float64 `json:"rate_per_s"`
	Seconds   float64 `json:"seconds"`
	Submitted int     `json:"submitted"`
	Completed int     `json:"completed"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// tracker records the submit and done time of each execution.
type tracker struct {
	n         int
	submitted []atomic.Int64 // unix ns
	done      []atomic.Int64 // unix ns, 0 until done
	count     atomic.Int64
	bad       atomic.Int64 // completions with a wrong document or id
	badDoc    atomic.Value // string: the first wrong document
	all       chan struct{}
	once      sync.Once
}

func newTracker(n int) *tracker {
	t := &tracker{n: n, submitted: make([]atomic.Int64, n), done: make([]atomic.Int64, n), all: make(chan struct{})}
	if n == 0 {
		close(t.all)
	}
	return t
}

// complete is Env.Done.
func (t *tracker) complete(c Completion) {
	now := time.Now().UnixNano()
	if c.ID < 0 || c.ID >= t.n || c.Doc.ID != c.ID || !slices.Equal(c.Doc.Path, StepNames) {
		if t.bad.Add(1) == 1 {
			t.badDoc.Store(fmt.Sprintf("id %d: %+v", c.ID, c.Doc))
		}
		return
	}
	if !t.done[c.ID].CompareAndSwap(0, now) {
		return // a duplicate delivery
	}
	if t.count.Add(1) == int64(t.n) {
		t.once.Do(func() { close(t.all) })
	}
}

// wait waits for every execution, until ctx ends.
func (t *tracker) wait(ctx context.Context) error {
	select {
	case <-t.all:
	case <-ctx.Done():
		return fmt.Errorf("%d of %d executions done: %w", t.count.Load(), t.n, context.Cause(ctx))
	}
	if n := t.bad.Load(); n > 0 {
		return fmt.Errorf("%d completions carried a wrong document (first: %v)", n, t.badDoc.Load())
	}
	return nil
}

// lastDone is when the last execution finished.
func (t *tracker) lastDone() time.Time {
	var last int64
	for i := range t.done {
		last = max(last, t.done[i].Load())
	}
	return time.Unix(0, last)
}

// latencies are submit -> done of the finished executions.
func (t *tracker) latencies() []time.Duration {
	var out []time.Duration
	for i := range t.done {
		if d := t.done[i].Load(); d != 0 {
			out = append(out, time.Duration(d-t.submitted[i].Load()))
		}
	}
	return out
}

// percentile is the nearest-rank percentile p (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(float64(len(s))*p/100+0.9999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// processCPU is this process's user+sys CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSMiB is this process's peak resident set.
func peakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

// phase starts a fresh system, runs fn on it and closes it. The system's
// directory is removed afterwards.
func phase(ctx context.Context, spec Spec, o Options, t *tracker, fn func(System) error) (err error) {
	sys, err := spec.New()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.Dir, "qasync-bench-"+spec.Key+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := Env{Workers: o.Workers, Dir: dir, Done: t.complete, Logf: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, spec.Key+": "+f+"\n", a...)
	}}
	sctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	err = sys.Start(sctx, env)
	cancel()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), o.StartTimeout)
		defer cancel()
		if cerr := sys.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return fn(sys)
}

// runBurst submits o.Executions executions from o.Submitters goroutines as
// fast as they go and measures steps/s and CPU from the first submit to
// the last step done.
func runBurst(ctx context.Context, spec Spec, o Options) (BurstResult, error) {
	t := newTracker(o.Executions)
	var res BurstResult
	err := phase(ctx, spec, o, t, func(sys System) error {
		srv, hasSrv := sys.(ServerCPU)
		var srv0 time.Duration
		if hasSrv {
			srv0, hasSrv = srv.ServerCPU()
		}
		bctx, cancel := context.WithTimeoutCause(ctx, o.BurstTimeout, fmt.Errorf("burst timeout %s", o.BurstTimeout))
		defer cancel()
		cpu0 := processCPU()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		var submitErr atomic.Value
		for range o.Submitters {
			wg.Go(func() {
				for {
					id := int(next.Add(1) - 1)
					if id >= o.Executions || bctx.Err() != nil {
						return
					}
					t.submitted[id].Store(time.Now().UnixNano())
					if err := sys.Submit(bctx, id); err != nil {
						submitErr.CompareAndSwap(nil, fmt.Errorf("submit %d: %w", id, err))
						cancel()
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := submitErr.Load().(error); err != nil {
			return err
		}
		if err := t.wait(bctx); err != nil {
			return err
		}
		cpu := processCPU() - cpu0
		elapsed := t.lastDone().Sub(start)
		steps := o.Executions * len(StepNames)
		res = BurstResult{Executions: o.Executions, Steps: steps, Seconds: elapsed.Seconds(),
			StepsPerS: float64(steps) / elapsed.Seconds(), ProcessCPUMs: ms(cpu)}
		total := cpu
		if hasSrv {
			if srv1, ok := srv.ServerCPU(); ok {
				res.ServerCPUMs, res.ServerCPUKnown = ms(srv1-srv0), true
				total += srv1 - srv0
			}
		}
		res.CPUMsPerStep = ms(total) / float64(steps)
		return nil
	})
	return res, err
}

// runSteady submits o.Rate executions per second for o.Duration, each on
// its own goroutine at its scheduled time (a slow submit does not delay
// the next), and measures submit -> last step done.
func runSteady(ctx context.Context, spec Spec, o Options) (SteadyResult, error) {
	n := int(o.Rate * o.Duration.Seconds())
	t := newTracker(n)
	res := SteadyResult{Rate: o.Rate, Seconds: o.Duration.Seconds(), Submitted: n}
	err := phase(ctx, spec, o, t, func(sys System) error {
		sctx, cancel := context.WithTimeoutCause(ctx, o.Duration+o.DrainTimeout,
			fmt.Errorf("steady timeout: %s of submits + %s drain", o.Duration, o.DrainTimeout))
		defer cancel()
		start := time.Now()
		interval := time.Duration(float64(time.Second) / o.Rate)
		var wg sync.WaitGroup
		var submitErr atomic.Value
		timer := time.NewTimer(0)
		defer timer.Stop()
		for i := range n {
			timer.Reset(time.Until(start.Add(time.Duration(i) * interval)))
			select {
			case <-timer.C:
			case <-sctx.Done():
				return context.Cause(sctx)
			}
			if submitErr.Load() != nil {
				break
			}
			wg.Go(func() {
				t.submitted[i].Store(time.Now().UnixNano())
				if err := sys.Submit(sctx, i); err != nil {
					submitErr.CompareAndSwap(nil, fmt.Errorf("submit %d: %w", i, err))
				}
			})
		}
		wg.Wait()
		if err, _ := submitErr.Load().(error); err != nil {
			return err
		}
		werr := t.wait(sctx)
		lat := t.latencies()
		res.Completed = len(lat)
		res.P50Ms, res.P99Ms, res.MaxMs = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100))
		return werr
	})
	return res, err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
