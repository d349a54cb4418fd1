package main

// Temporal: the Temporal CLI's dev server (`temporal server start-dev`),
// one server process per phase, persisting to a SQLite file in the phase's
// directory, and a worker on the Go SDK in the benchmark's process. The
// pipeline is a workflow that runs three activities in sequence (step1 ->
// step2 -> step3); Temporal records each activity's result in the
// workflow's history before the workflow schedules the next one.
//
// The parent only finds the CLI (BENCH_TEMPORAL_BIN, next to the benchmark's
// binary, .cache/bin/temporal above the working directory, or PATH); the
// child starts and stops the server in each phase's Start and Close, with
// bounded waits, and stops it on every path.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const (
	// envTemporalBin names the temporal CLI binary (the parent sets it for
	// the child; set it to use another binary).
	envTemporalBin = "BENCH_TEMPORAL_BIN"
	// skipNoTemporal is the row when no temporal CLI is found.
	skipNoTemporal = "skipped: no temporal CLI (make temporal-cli)"

	temporalTaskQueue = "bench"
	temporalWorkflow  = "bench.three-steps"
	// temporalPollers is the worker's number of workflow-task pollers and
	// of activity-task pollers (the SDK's default is 2 of each). Each
	// poller holds one long poll and brings back one task at a time; 8
	// keep the 32 slots fed on the burst without idle polls dominating
	// the steady phase.
	temporalPollers = 8
	// temporalMaxWatchers bounds the WorkflowRun.Get long polls in flight.
	// The server refuses long polls beyond frontend.namespaceCount (1200
	// per namespace and method by default) with ResourceExhausted, which
	// the SDK retries after a backoff: staying below it keeps the watchers
	// from adding refusals and retries to the measurement.
	temporalMaxWatchers = 1000
)

func init() {
	register(Spec{
		Key:   "temporal-dev",
		Label: "Temporal dev server v1.5.1 (SQLite file)",
		Settings: "temporal CLI v1.5.1 (Server 1.29.1) `server start-dev --headless --db-filename`, a server process per phase: " +
			"SQLite file with the dev server's defaults (rollback journal, synchronous=FULL, 1 connection, 1 history shard); " +
			"Go SDK v1.51.0 worker: a workflow of 3 activities, MaxConcurrentActivityExecutionSize = MaxConcurrentWorkflowTaskExecutionSize = workers, " +
			"8 workflow-task + 8 activity-task pollers, sticky cache (SDK default), no eager activities (the server's default); " +
			"done = WorkflowRun.Get of each execution (at most 1000 in flight)",
		Order:   30,
		Prepare: prepareTemporal,
		New: func() (System, error) {
			bin := os.Getenv(envTemporalBin)
			if bin == "" {
				return nil, fmt.Errorf("%s is not set", envTemporalBin)
			}
			return &temporalSystem{bin: bin}, nil
		},
	})
}

// prepareTemporal implements Spec.Prepare: find the CLI and check that it
// runs. The server itself is started per phase, in the child.
func prepareTemporal(ctx context.Context, logf func(string, ...any)) ([]string, func(), string, error) {
	bin, err := findTemporalBin()
	if err != nil {
		return nil, func() {}, "", err
	}
	if bin == "" {
		return nil, func() {}, skipNoTemporal, nil
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(vctx, bin, "--version")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, func() {}, "", fmt.Errorf("%s --version: %w: %s", bin, err, strings.TrimSpace(lastLines(string(out), 3)))
	}
	logf("temporal: %s (%s)", bin, strings.TrimSpace(string(out)))
	return []string{envTemporalBin + "=" + bin}, func() {}, "", nil
}

// findTemporalBin returns the temporal CLI: BENCH_TEMPORAL_BIN (an error
// when it names no file), else `temporal` next to this executable (make
// builds the benchmark into .cache/bin), else .cache/bin/temporal in the
// working directory or above it, else `temporal` on PATH; "" when none.
func findTemporalBin() (string, error) {
	isFile := func(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() }
	if p := os.Getenv(envTemporalBin); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil || !isFile(abs) {
			return "", fmt.Errorf("%s=%s: no such file", envTemporalBin, p)
		}
		return abs, nil
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "temporal"); isFile(p) {
			return p, nil
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, ".cache", "bin", "temporal"); isFile(p) {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	return "", nil
}

// temporalSystem is a dev server, a client and a worker.
type temporalSystem struct {
	bin    string
	srv    *temporalServer
	client client.Client
	worker worker.Worker
	done   func(Completion)
	logf   func(string, ...any)
	// watchCtx bounds the watchers; Close cancels it.
	watchCtx  context.Context
	stopWatch context.CancelFunc
	watchers  sync.WaitGroup
	// slots bounds the watchers' long polls (temporalMaxWatchers).
	slots chan struct{}
	// getFailed counts executions whose result could not be had.
	getFailed atomic.Int64
}

// Start implements System: start the server on a file in env.Dir, connect,
// and start a worker with env.Workers slots for activities and for
// workflow tasks.
func (s *temporalSystem) Start(ctx context.Context, env Env) error {
	s.done, s.logf = env.Done, env.Logf
	s.watchCtx, s.stopWatch = context.WithCancel(context.Background())
	s.slots = make(chan struct{}, temporalMaxWatchers)
	logger := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	var err error
	s.srv, s.client, err = startTemporalServer(ctx, s.bin, env.Dir, logger, env.Logf)
	if err != nil {
		return err
	}
	s.worker = worker.New(s.client, temporalTaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: env.Workers,
		// The SDK refuses 1 (its pollers alternate between the sticky and
		// the normal queue).
		MaxConcurrentWorkflowTaskExecutionSize: max(env.Workers, 2),
		MaxConcurrentWorkflowTaskPollers:       temporalPollers,
		MaxConcurrentActivityTaskPollers:       temporalPollers,
	})
	s.worker.RegisterWorkflowWithOptions(temporalPipeline, workflow.RegisterOptions{Name: temporalWorkflow})
	for _, name := range StepNames {
		s.worker.RegisterActivityWithOptions(func(_ context.Context, in Doc) (Doc, error) {
			return work(in, name), nil
		}, activity.RegisterOptions{Name: name})
	}
	if err := s.worker.Start(); err != nil {
		s.worker = nil
		return fmt.Errorf("temporal worker: %w", err)
	}
	return nil
}

// temporalPipeline is the workflow: the three steps as activities, each
// started once the previous one's result is in the history.
func temporalPipeline(ctx workflow.Context, d Doc) (Doc, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for _, step := range StepNames {
		if err := workflow.ExecuteActivity(ctx, step, d).Get(ctx, &d); err != nil {
			return Doc{}, err
		}
	}
	return d, nil
}

// Submit implements System: start the workflow (its id is the execution's,
// unique in the phase: each phase has a fresh server), then watch it.
//
// Env.Done must mean durably done, so it is called when the client sees the
// workflow completed: WorkflowRun.Get, Temporal's ordinary way of awaiting
// a result, one long poll on the server per execution (woken as the
// workflow's history grows), on a goroutine of its own so that one slow
// execution delays no other's report. The last activity calling Done
// would come before Temporal has recorded its result. The long poll is
// what any Temporal caller pays to learn a result, so its server CPU is
// counted; reporting instead from the worker when its final workflow task
// completion is answered (a gRPC interceptor, no extra call) measured the
// same within this machine's noise. At most temporalMaxWatchers run at
// once; the others wait for a slot, in order (in the burst only), and a
// finished execution's Get answers at once, so the wait adds little to
// when the last one is seen.
func (s *temporalSystem) Submit(ctx context.Context, id int) error {
	if err := s.srv.exitErr(); err != nil {
		return err
	}
	run, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        "bench-" + strconv.Itoa(id),
		TaskQueue: temporalTaskQueue,
	}, temporalWorkflow, Doc{ID: id})
	if err != nil {
		return err
	}
	s.watchers.Go(func() { s.watch(run, id) })
	return nil
}

// watch reports execution id done once its workflow has completed.
func (s *temporalSystem) watch(run client.WorkflowRun, id int) {
	select {
	case s.slots <- struct{}{}:
	case <-s.watchCtx.Done():
		return
	}
	defer func() { <-s.slots }()
	var d Doc
	if err := run.Get(s.watchCtx, &d); err != nil {
		if s.watchCtx.Err() == nil && s.getFailed.Add(1) <= 3 {
			s.logf("temporal: execution %d: %v", id, err)
		}
		return
	}
	s.done(Completion{ID: id, Doc: d})
}

// ServerCPU implements ServerCPU: the dev server process's CPU.
func (s *temporalSystem) ServerCPU() (time.Duration, bool) {
	if s.srv == nil || s.srv.exitErr() != nil {
		return 0, false
	}
	d, err := processTreeCPU(s.srv.pid)
	return d, err == nil
}

// Close implements System: the watchers, the worker, the client, then the
// server, each bounded by ctx.
func (s *temporalSystem) Close(ctx context.Context) error {
	var errs []error
	if s.stopWatch != nil {
		s.stopWatch()
	}
	if s.worker != nil {
		if err := within(ctx, s.worker.Stop); err != nil {
			errs = append(errs, fmt.Errorf("temporal worker stop: %w", err))
		}
	}
	if err := within(ctx, s.watchers.Wait); err != nil {
		errs = append(errs, fmt.Errorf("temporal watchers: %w", err))
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.srv != nil {
		if err := s.srv.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if n := s.getFailed.Load(); n > 0 && s.logf != nil {
		s.logf("temporal: %d executions' results could not be had", n)
	}
	return errors.Join(errs...)
}

// within runs fn and waits for it until ctx ends.
func within(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// temporalServer is a `temporal server start-dev` process.
type temporalServer struct {
	pid     int
	logPath string
	// exited is closed once the process has been waited for; err is then
	// its exit error.
	exited chan struct{}
	err    error
	// stopping is set by stop: the exit that follows is expected.
	stopping atomic.Bool
	logf     func(string, ...any)
}

// startTemporalServer starts a dev server on a SQLite file in dir and waits
// (bounded by ctx) until a client connects. A server that exits before
// that, as when another process took one of its ports, is tried again on
// new ports and a new file, three times in all.
func startTemporalServer(ctx context.Context, bin, dir string, logger tlog.Logger, logf func(string, ...any)) (*temporalServer, client.Client, error) {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var srv *temporalServer
		var c client.Client
		var exitedEarly bool
		srv, c, exitedEarly, err = startTemporalOnce(ctx, bin, filepath.Join(dir, fmt.Sprintf("temporal-%d", attempt)), logger, logf)
		if err == nil {
			return srv, c, nil
		}
		if !exitedEarly || ctx.Err() != nil {
			break
		}
		logf("temporal: server attempt %d: %v", attempt, err)
	}
	return nil, nil, err
}

// startTemporalOnce is one attempt: exitedEarly says the server exited by
// itself before it answered. On error the server is stopped.
func startTemporalOnce(ctx context.Context, bin, dir string, logger tlog.Logger, logf func(string, ...any)) (srv *temporalServer, c client.Client, exitedEarly bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, false, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, nil, false, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	srv = &temporalServer{logPath: filepath.Join(dir, "server.log"), exited: make(chan struct{}), logf: logf}
	logFile, err := os.Create(srv.logPath)
	if err != nil {
		return nil, nil, false, err
	}
	args := []string{"server", "start-dev", "--headless",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
		"--http-port", strconv.Itoa(ports[1]), "--metrics-port", strconv.Itoa(ports[2]),
		"--db-filename", filepath.Join(dir, "temporal.sqlite"),
		"--namespace", "default", "--log-level", "error",
		"--disable-config-file", "--disable-config-env"}
	// The server is started and waited for on a goroutine locked to its
	// thread: Pdeathsig fires when the thread that started the process
	// exits, and this one lives as long as the server.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logFile.Close()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logFile, logFile
		// Its own process group (a terminal's ^C reaches the benchmark,
		// which stops the server itself), killed if the benchmark dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			close(srv.exited)
			return
		}
		srv.pid = cmd.Process.Pid
		started <- nil
		srv.err = cmd.Wait()
		if srv.err == nil {
			srv.err = errors.New("exit status 0")
		}
		close(srv.exited)
		if !srv.stopping.Load() {
			logf("temporal: server exited unexpectedly: %v: %s", srv.err, srv.logTail())
		}
	}()
	if err := <-started; err != nil {
		return nil, nil, false, fmt.Errorf("temporal server: %w", err)
	}
	defer func() {
		if err != nil {
			if c != nil {
				c.Close()
				c = nil
			}
			_ = srv.stop(context.Background())
		}
	}()
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err = client.DialContext(actx, client.Options{HostPort: addr, Namespace: "default", Logger: logger})
		cancel()
		if err == nil {
			return srv, c, false, nil
		}
		if xerr := srv.exitErr(); xerr != nil {
			return srv, nil, true, withTail(xerr, srv.logTail())
		}
		if ctx.Err() != nil {
			return srv, nil, false, withTail(fmt.Errorf("temporal server on %s not answering: %w", addr, err), srv.logTail())
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		case <-srv.exited:
		}
	}
}

// exitErr is the server's exit error once it has exited, nil while it runs.
func (t *temporalServer) exitErr() error {
	select {
	case <-t.exited:
		return fmt.Errorf("temporal server exited: %v", t.err)
	default:
		return nil
	}
}

// withTail adds the end of the server's output, when there is one, to err.
func withTail(err error, tail string) error {
	if tail == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, tail)
}

// logTail is the end of the server's output.
func (t *temporalServer) logTail() string {
	b, _ := os.ReadFile(t.logPath)
	return strings.TrimSpace(lastLines(string(bytes.TrimSpace(b)), 3))
}

// stop sends SIGTERM (the CLI then stops the server cleanly, in about 2 s),
// waits until ctx ends (at most 15 s), then kills the process group and
// waits 10 s more.
func (t *temporalServer) stop(ctx context.Context) error {
	t.stopping.Store(true)
	if t.exitErr() != nil {
		return nil
	}
	_ = syscall.Kill(t.pid, syscall.SIGTERM)
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	select {
	case <-t.exited:
		return nil
	case <-tctx.Done():
	}
	_ = syscall.Kill(-t.pid, syscall.SIGKILL)
	select {
	case <-t.exited:
		return fmt.Errorf("temporal server did not stop on SIGTERM: killed")
	case <-time.After(10 * time.Second):
		return fmt.Errorf("temporal server (pid %d) did not exit after SIGKILL", t.pid)
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. Each was
// bound, connected to and closed, so it sits in TIME_WAIT: the kernel does
// not hand it out again for a while, and the server (SO_REUSEADDR) can
// still bind it (the dev server picks its own internal ports this way).
func freePorts(n int) ([]int, error) {
	var ports []int
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { _ = l.Close() })
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		r, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return nil, err
		}
		a, err := l.Accept()
		if err != nil {
			_ = r.Close()
			return nil, err
		}
		// The accepted side closes first, so the TIME_WAIT is on the
		// listening port.
		_ = a.Close()
		closers = append(closers, func() { _ = r.Close() })
	}
	return ports, nil
}
