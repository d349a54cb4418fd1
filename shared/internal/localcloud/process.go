package localcloud

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/config"
)

// markerEnv carries a token unique to one emulator process start. The
// emulator passes its environment on to the function process, so the
// harness can find (and kill) a function process whose emulator died.
const markerEnv = "QASYNC_LOCALCLOUD_INSTANCE"

// invokePath is RIE's invoke endpoint.
const invokePath = "/2015-03-31/functions/function/invocations"

// maxResponseBytes bounds a function response read by the harness
// (Lambda's own limit for a synchronous response is 6 MB).
const maxResponseBytes = 32 << 20

// Kinds of InvokeError.
const (
	// FailTransport: the emulator could not be reached or the connection
	// broke (for example its process was killed).
	FailTransport = "transport"
	// FailStatus: the emulator answered with a non-2xx status (a runtime
	// crash or a panic is a 502).
	FailStatus = "status"
	// FailTimeout: the function ran past its timeout.
	FailTimeout = "timeout"
	// FailFunction: the handler returned an error: HTTP 200 with an
	// errorType/errorMessage body (RIE does not set X-Amz-Function-Error).
	FailFunction = "function"
)

// InvokeError is the error of a failed invocation.
type InvokeError struct {
	// Function is the function's key (Submit, Worker, ...).
	Function string
	// Kind is FailTransport, FailStatus, FailTimeout or FailFunction.
	Kind string
	// StatusCode is the emulator's HTTP status (0 for FailTransport).
	StatusCode int
	// ErrorType and ErrorMessage come from the error body, when there is
	// one.
	ErrorType    string
	ErrorMessage string
	// Err is the transport error, for FailTransport.
	Err error
}

// Error implements error.
func (e *InvokeError) Error() string {
	switch e.Kind {
	case FailTransport:
		return fmt.Sprintf("localcloud: invoke %s: %v", e.Function, e.Err)
	case FailTimeout:
		return fmt.Sprintf("localcloud: invoke %s: function timed out", e.Function)
	case FailStatus:
		if e.ErrorType != "" {
			return fmt.Sprintf("localcloud: invoke %s: HTTP %d: %s: %s", e.Function, e.StatusCode, e.ErrorType, e.ErrorMessage)
		}
		return fmt.Sprintf("localcloud: invoke %s: HTTP %d", e.Function, e.StatusCode)
	}
	return fmt.Sprintf("localcloud: invoke %s: %s: %s", e.Function, e.ErrorType, e.ErrorMessage)
}

// Unwrap returns the transport error.
func (e *InvokeError) Unwrap() error { return e.Err }

// function is one function's pool of emulator processes.
type function struct {
	c         *Cloud
	name      string
	opts      FunctionOptions
	out       *lockedWriter
	instances []*instance
	idle      chan *instance // instances not serving an invocation
}

// lockedWriter serialises whole lines onto one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) line(prefix string, b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, prefix)
	_, _ = l.w.Write(b)
	_, _ = l.w.Write([]byte{'\n'})
}

func newFunction(c *Cloud, name string, fo FunctionOptions, out *lockedWriter) *function {
	f := &function{c: c, name: name, opts: fo, out: out, idle: make(chan *instance, fo.Concurrency)}
	for i := range fo.Concurrency {
		in := &instance{f: f, idx: i, up: make(chan struct{}), startErr: make(chan error, 1)}
		f.instances = append(f.instances, in)
		f.idle <- in
	}
	return f
}

// start starts every instance's supervisor.
func (f *function) start() {
	for _, in := range f.instances {
		f.c.procs.Go(func() { in.supervise(f.c.procCtx) })
	}
}

// waitUp waits until every instance accepts connections, or one failed
// to start at its first attempt.
func (f *function) waitUp(ctx context.Context) error {
	for _, in := range f.instances {
		in.mu.Lock()
		up := in.up
		in.mu.Unlock()
		select {
		case <-up:
		case err := <-in.startErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// env is the environment of f's emulator processes.
func (f *function) env(marker string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TZ=:UTC", "LANG=en_US.UTF-8",
		// A development topology: the functions may take the tenant from
		// X-Tenant-Id (lambdafn.Boot refuses it in Lambda otherwise).
		// Options.Env can set it false.
		config.EnvName(config.FullKey("http.allow-header-tenant")) + "=true",
		// There is no EventBridge here: the sink stands for it.
		"AWS_ENDPOINT_URL_EVENTBRIDGE=" + f.c.sink.URL + "/" + f.name}
	env = append(env, f.opts.TemplateEnv...)
	env = append(env, f.c.opts.Env...)
	env = append(env, f.opts.Env...)
	if envValue(env, "AWS_REGION") == "" {
		env = append(env, "AWS_REGION="+f.c.opts.Region)
	}
	return append(env,
		"AWS_LAMBDA_FUNCTION_NAME="+f.opts.Name,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(f.opts.Timeout/time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(f.opts.MemoryMB),
		markerEnv+"="+marker,
	)
}

// instance is one emulator process slot, restarted when its process
// exits.
type instance struct {
	f   *function
	idx int

	mu       sync.Mutex
	pid      int
	addr     string
	client   *http.Client
	up       chan struct{} // closed while the current process accepts connections
	startErr chan error    // the first start's failure, for Start
	gen      int           // process starts so far
	restarts int
	marker   string     // the current process's markerEnv value
	started  time.Time  // the current process's start
	cold     *ColdStart // of the current process, until its first invocation
}

func (in *instance) currentPID() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pid
}

func (in *instance) restartCount() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.restarts
}

func (in *instance) attrs() []slog.Attr {
	return []slog.Attr{slog.String("function", in.f.name), slog.Int("instance", in.idx)}
}

// supervise runs the instance's process until ctx ends, starting it
// again RestartDelay after it exits.
func (in *instance) supervise(ctx context.Context) {
	log := in.f.c.log
	for attempt := 0; ; attempt++ {
		cmd, started, done, err := in.startProcess()
		if err != nil {
			log.LogAttrs(ctx, slog.LevelError, "function_start_failed", append(in.attrs(),
				slog.String("event", "function_start_failed"), slog.String("error", err.Error()))...)
			if attempt == 0 {
				in.startErr <- err
			}
		} else {
			ev := "function_started"
			if attempt > 0 {
				ev = "function_restarted"
			}
			log.LogAttrs(ctx, slog.LevelInfo, ev, append(in.attrs(), slog.String("event", ev),
				slog.Int("pid", cmd.Process.Pid), slog.String("addr", in.address()), slog.Int("restarts", in.restartCount()))...)
			var werr error
			select {
			case werr = <-done:
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				<-done
			}
			in.exited(cmd, ctx.Err() == nil)
			if ctx.Err() != nil {
				return
			}
			attrs := append(in.attrs(), slog.String("event", "function_exited"), slog.Int("pid", cmd.Process.Pid),
				slog.Float64("uptime_ms", msf(time.Since(started))))
			if werr != nil {
				attrs = append(attrs, slog.String("error", werr.Error()))
			}
			log.LogAttrs(ctx, slog.LevelWarn, "function_exited", attrs...)
		}
		t := time.NewTimer(in.f.c.opts.RestartDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		in.mu.Lock()
		in.restarts++
		in.mu.Unlock()
	}
}

// startProcess starts the emulator on fresh loopback ports. done receives
// the process's exit.
func (in *instance) startProcess() (*exec.Cmd, time.Time, <-chan error, error) {
	opts := in.f.c.opts
	rieAddr, err := freeAddr()
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	bootstrap, err := filepath.Abs(in.f.opts.Bootstrap)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	marker := randomHex(12)
	// RIE's default address is 0.0.0.0:8080 and its runtime API's
	// 127.0.0.1:9001: always pass both.
	cmd := exec.Command(opts.RIE, "--runtime-interface-emulator-address", rieAddr,
		"--runtime-api-address", apiAddr, bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = in.f.env(marker)
	cmd.SysProcAttr = sysProcAttr()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	started := time.Now()
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, time.Time{}, nil, fmt.Errorf("start %s: %w", opts.RIE, err)
	}
	_ = w.Close()

	in.mu.Lock()
	in.gen++
	gen := in.gen
	in.pid = cmd.Process.Pid
	in.addr = rieAddr
	in.marker = marker
	in.started = started
	in.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}
	cs := &ColdStart{Function: in.f.name, Instance: in.idx, PID: cmd.Process.Pid}
	in.cold = cs
	up := in.up
	in.mu.Unlock()

	prefix := fmt.Sprintf("%s[%d] ", in.f.name, in.idx)
	in.f.c.readers.Go(func() { in.copyOutput(r, prefix, cs) })

	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(exited)
		done <- err
	}()
	go in.awaitReady([]string{rieAddr, apiAddr}, gen, up, exited, cmd.Process)
	return cmd, started, done, nil
}

// exited cleans up after the process: it kills the function process the
// emulator may have left behind (it would otherwise finish its
// invocation, unlike a Lambda execution environment that died; logged
// when the exit was unexpected) and prepares a fresh readiness channel
// for the next process.
func (in *instance) exited(cmd *exec.Cmd, unexpected bool) {
	in.mu.Lock()
	marker := in.marker
	in.pid = 0
	select {
	case <-in.up:
		in.up = make(chan struct{})
	default:
	}
	client := in.client
	in.mu.Unlock()
	if n := killMarked(markerEnv + "=" + marker); n > 0 && unexpected {
		in.f.c.log.LogAttrs(context.Background(), slog.LevelInfo, "function_leftovers_killed", append(in.attrs(),
			slog.String("event", "function_leftovers_killed"), slog.Int("pid", cmd.Process.Pid), slog.Int("processes", n))...)
	}
	if client != nil {
		client.CloseIdleConnections()
	}
}

func (in *instance) address() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.addr
}

// readyTimeout bounds how long a new emulator may take to listen.
const readyTimeout = 10 * time.Second

// awaitReady closes up once every address (the emulator's invoke API and
// its runtime API, which it starts concurrently and the function process
// dials at once on the first invoke) accepts connections, unless the
// process exits first. A process not ready within readyTimeout (say, a
// port taken meanwhile) is killed, to be started again on fresh ports.
func (in *instance) awaitReady(addrs []string, gen int, up chan struct{}, exited <-chan struct{}, p *os.Process) {
	deadline := time.Now().Add(readyTimeout)
	for len(addrs) > 0 {
		conn, err := net.DialTimeout("tcp", addrs[0], 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			addrs = addrs[1:]
			continue
		}
		if time.Now().After(deadline) {
			in.f.c.log.LogAttrs(context.Background(), slog.LevelWarn, "function_not_ready", append(in.attrs(),
				slog.String("event", "function_not_ready"), slog.Int("pid", p.Pid), slog.String("addr", addrs[0]))...)
			_ = p.Kill()
			return
		}
		select {
		case <-exited:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The ports answering may be another process that took them between
	// their choice and this one's bind (which then exits at once): give it
	// a moment to fail before declaring it up.
	select {
	case <-exited:
		return
	case <-time.After(bindSettle):
	}
	in.mu.Lock()
	if in.gen == gen && in.up == up {
		close(up)
	}
	in.mu.Unlock()
}

// bindSettle is how long a process whose ports answer must stay alive
// before it counts as up.
const bindSettle = 50 * time.Millisecond

var (
	rapidInit    = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	reportedInit = regexp.MustCompile(`^REPORT RequestId: .*Init Duration: ([0-9.]+) ms`)
)

// copyOutput copies the process's output line by line, prefixed, and
// notes the init durations the emulator reports.
func (in *instance) copyOutput(r *os.File, prefix string, cs *ColdStart) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	start := true
	var pending []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(chunk) > 0 || (err == nil && !isPrefix) {
			if start {
				in.noteInit(chunk, cs)
			}
			if isPrefix {
				pending = append(pending, chunk...)
				if len(pending) >= 64<<10 { // flush very long lines in parts
					in.f.out.line(prefix, pending)
					pending = pending[:0]
				}
			} else {
				in.f.out.line(prefix, append(pending, chunk...))
				pending = pending[:0]
			}
			start = !isPrefix
		}
		if err != nil {
			if len(pending) > 0 {
				in.f.out.line(prefix, pending)
			}
			return
		}
	}
}

func (in *instance) noteInit(line []byte, cs *ColdStart) {
	c := in.f.c
	if m := rapidInit.FindSubmatch(line); m != nil {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		c.mu.Lock()
		cs.Init = time.Duration(ms * float64(time.Millisecond))
		c.mu.Unlock()
		return
	}
	if m := reportedInit.FindSubmatch(line); m != nil {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		c.mu.Lock()
		cs.ReportedInit = time.Duration(ms * float64(time.Millisecond))
		init := cs.Init
		c.mu.Unlock()
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "function_init_reported", append(in.attrs(),
			slog.String("event", "function_init_reported"), slog.Int("pid", cs.PID),
			slog.Float64("init_ms", msf(init)), slog.Float64("reported_init_ms", ms))...)
	}
}

// Invoke invokes fn (Submit, Worker, Sweeper or DLQ) with payload, as a
// synchronous (RequestResponse) Lambda invocation, and returns the
// function's response. It waits for a free emulator process of fn. A
// transport failure, a non-2xx status, a timeout and a handler error
// (HTTP 200 with an errorType/errorMessage body) are all returned as an
// *InvokeError. When ctx ends first, Invoke returns ctx's error while
// the invocation itself runs on (as on AWS), its process staying busy
// until it ends.
func (c *Cloud) Invoke(ctx context.Context, fn string, payload []byte) ([]byte, error) {
	f := c.fns[fn]
	if f == nil {
		return nil, fmt.Errorf("localcloud: unknown or disabled function %q", fn)
	}
	select {
	case <-c.closing:
		return nil, ErrClosed
	default:
	}
	var in *instance
	select {
	case in = <-f.idle:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-c.closing:
		return nil, ErrClosed
	}
	type result struct {
		body []byte
		err  error
	}
	res := make(chan result, 1)
	go func() {
		defer func() { f.idle <- in }()
		body, err := in.invoke(payload)
		res <- result{body, err}
	}()
	select {
	case r := <-res:
		return r.body, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// invoke posts payload to the instance's emulator once it accepts
// connections.
func (in *instance) invoke(payload []byte) ([]byte, error) {
	c := in.f.c
	in.mu.Lock()
	up := in.up
	in.mu.Unlock()
	select {
	case <-up:
	case <-c.procCtx.Done():
		return nil, ErrClosed
	}
	in.mu.Lock()
	addr, client, pid, gen, cs, started := in.addr, in.client, in.pid, in.gen, in.cold, in.started
	in.mu.Unlock()

	ctx, cancel := context.WithTimeout(c.procCtx, in.f.opts.Timeout+10*time.Second)
	defer cancel()
	start := time.Now()
	body, status, err := post(ctx, client, "http://"+addr+invokePath, payload)
	took := time.Since(start)
	ierr := classify(in.f.name, body, status, err)
	if ierr == nil || ierr.Kind == FailFunction {
		// The function initialised and its handler ran.
		in.noteFirstInvoke(gen, cs, started, took)
	}
	if ierr != nil {
		attrs := append(in.attrs(), slog.String("event", "invoke_failed"), slog.Int("pid", pid),
			slog.String("kind", ierr.Kind), slog.Float64("duration_ms", msf(took)))
		if ierr.StatusCode != 0 {
			attrs = append(attrs, slog.Int("status", ierr.StatusCode))
		}
		if ierr.ErrorType != "" {
			attrs = append(attrs, slog.String("error_type", ierr.ErrorType), slog.String("error_message", truncate(ierr.ErrorMessage, 300)))
		}
		if ierr.Err != nil {
			attrs = append(attrs, slog.String("error", ierr.Err.Error()))
		}
		c.log.LogAttrs(ctx, slog.LevelWarn, "invoke_failed", attrs...)
		return nil, ierr
	}
	return body, nil
}

// noteFirstInvoke records the cold start of process generation gen at
// its first invocation that reached the handler.
func (in *instance) noteFirstInvoke(gen int, cs *ColdStart, started time.Time, took time.Duration) {
	c := in.f.c
	in.mu.Lock()
	first := in.gen == gen && in.cold == cs && cs != nil
	if first {
		in.cold = nil
	}
	in.mu.Unlock()
	if !first {
		return
	}
	c.mu.Lock()
	cs.Invoke = took
	cs.Ready = time.Since(started)
	c.colds = append(c.colds, *cs)
	idx := len(c.colds) - 1
	c.mu.Unlock()
	in.coldLog(cs, idx)
}

// coldLog logs a cold start once the emulator's init report had a moment
// to arrive, and completes the recorded copy with it.
func (in *instance) coldLog(cs *ColdStart, idx int) {
	c := in.f.c
	c.bg.Go(func() {
		time.Sleep(50 * time.Millisecond)
		c.mu.Lock()
		c.colds[idx].Init, c.colds[idx].ReportedInit = cs.Init, cs.ReportedInit
		got := c.colds[idx]
		c.mu.Unlock()
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "function_cold_start", append(in.attrs(),
			slog.String("event", "function_cold_start"), slog.Int("pid", got.PID),
			slog.Float64("ready_ms", msf(got.Ready)), slog.Float64("invoke_ms", msf(got.Invoke)),
			slog.Float64("init_ms", msf(got.Init)), slog.Float64("reported_init_ms", msf(got.ReportedInit)))...)
	})
}

// post sends one invocation.
func post(ctx context.Context, client *http.Client, url string, payload []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, 0, err
	}
	return body, resp.StatusCode, nil
}

// classify turns an emulator answer into an *InvokeError, or nil for a
// successful invocation.
func classify(fn string, body []byte, status int, err error) *InvokeError {
	if err != nil {
		return &InvokeError{Function: fn, Kind: FailTransport, Err: err}
	}
	typ, msg, isErr := errorShape(body)
	switch {
	case status < 200 || status > 299:
		return &InvokeError{Function: fn, Kind: FailStatus, StatusCode: status, ErrorType: typ, ErrorMessage: msg}
	case bytes.HasPrefix(body, []byte("Task timed out after")):
		return &InvokeError{Function: fn, Kind: FailTimeout, StatusCode: status, ErrorType: "Sandbox.Timedout", ErrorMessage: string(body)}
	case isErr:
		return &InvokeError{Function: fn, Kind: FailFunction, StatusCode: status, ErrorType: typ, ErrorMessage: msg}
	}
	return nil
}

// errorShape reports whether body is a Lambda error document: a JSON
// object with string errorType and errorMessage.
func errorShape(body []byte) (typ, msg string, ok bool) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"errorType"`)) {
		return "", "", false
	}
	var e struct {
		ErrorType    *string `json:"errorType"`
		ErrorMessage *string `json:"errorMessage"`
	}
	if json.Unmarshal(b, &e) != nil || e.ErrorType == nil || e.ErrorMessage == nil {
		return "", "", false
	}
	return *e.ErrorType, *e.ErrorMessage, true
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
