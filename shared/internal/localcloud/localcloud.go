// Package localcloud runs a serverless topology on one machine: the real
// Lambda function binaries (submit, worker, sweeper, dlq, history), each
// under the AWS Lambda Runtime Interface Emulator (RIE), and the managed
// glue that AWS would otherwise provide around them. TopologyOf reads that
// topology from a synthesized CloudFormation template and Apply hands it
// to Options, so that local-cloud runs what the stack declares and nothing
// written a second time:
//
//   - an HTTP front emulating an API Gateway HTTP API (payload format 2.0,
//     stage $default): its routes (Options.Routes; by default one
//     $default route to submit) selected as API Gateway does, and the
//     AWS_IAM routes' SigV4 authentication and execute-api:Invoke
//     authorization of Options.Callers;
//   - SQS event source mappings (Options.Queues) that long-poll, gather a
//     batch within its batching window, build an events.SQSEvent like
//     Lambda does, and honour ReportBatchItemFailures when the mapping
//     has it (and only then, as Lambda);
//   - DynamoDB stream event source mappings (Options.Streams, e.g. the
//     execution table's stream -> history) that read every shard in
//     lineage order, build an events.DynamoDBEvent like Lambda does, and
//     follow Lambda's retry, bisection, batch item failure and on-failure
//     destination rules (see StreamMapping);
//   - EventBridge scheduled rules (Options.Schedules) with their targets'
//     retry policy;
//   - an event sink standing for EventBridge's PutEvents (the functions'
//     lifecycle events; Cloud.Events);
//   - with Options.IAM, an enforcing proxy per function in front of
//     DynamoDB Local, the SQS server and the event sink, which checks
//     every call against the function's role in the template.
//
// Each function runs Concurrency RIE processes (RIE handles one invocation
// at a time), each on free loopback ports. A supervisor restarts a process
// that exits (for example one a test SIGKILLed), after RestartDelay, and
// kills what the dead emulator left running, as Lambda discards a failed
// execution environment.
//
// Logged events (JSON, snake_case keys, an "event" key naming each):
// cloud_started, cloud_stopped, function_started, function_exited (warn),
// function_restarted, function_start_failed (error), function_not_ready
// (warn), function_leftovers_killed, function_cold_start,
// function_init_reported, invoke_failed (warn), http_request (debug),
// route_denied (warn), sqs_receive_failed (warn), sqs_batch_handled,
// sqs_batch_failed (warn), sqs_delete_failed (warn), stream_batch_handled,
// stream_batch_failed (warn), stream_batch_bisected (warn),
// stream_batch_discarded (error), stream_read_failed (warn),
// schedule_invoked (debug), schedule_dropped (warn), event_put (debug);
// with Options.IAM, iam_denied (warn) and iam_allowed (debug) of package
// iamcheck. Message bodies, stream records, event details and HTTP bodies
// are never logged; the functions' own output goes to LogDir or Output.
package localcloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// The functions of qasync's topology.
const (
	// Submit serves the HTTP API behind API Gateway.
	Submit = "submit"
	// Worker consumes the work queue.
	Worker = "worker"
	// Sweeper runs on the EventBridge schedule.
	Sweeper = "sweeper"
	// DLQ consumes the DLQ queue and the work queue's poison queue.
	DLQ = "dlq"
	// History consumes the execution table's DynamoDB stream.
	History = "history"
)

// Functions lists the functions in start order.
var Functions = []string{Submit, Worker, Sweeper, DLQ, History}

// Defaults of Options and FunctionOptions.
const (
	DefaultAddr         = "127.0.0.1:8080"
	DefaultTimeout      = 30 * time.Second
	DefaultSweepTimeout = 60 * time.Second
	DefaultMemoryMB     = 256
	DefaultRestartDelay = time.Second
	DefaultSweepEvery   = time.Minute
	DefaultBatchSize    = 10
	DefaultWaitSeconds  = 20
	DefaultRegion       = "us-east-1"
	DefaultAccountID    = "000000000000"
	DefaultMaxBodyBytes = 10 << 20
	DefaultDrainTimeout = 10 * time.Second
	// DefaultStartTimeout bounds how long Start waits for every emulator
	// to accept connections.
	DefaultStartTimeout = 15 * time.Second
	// DefaultAPIID is the HTTP API's id (iamcheck.DefaultAPIID).
	DefaultAPIID = iamcheck.DefaultAPIID
)

// FunctionOptions configure one function. Zero values take the defaults.
type FunctionOptions struct {
	// Disabled leaves the function (and whatever triggers it) off.
	Disabled bool
	// Bootstrap is the function binary. Default: BinDir/<fn>/bootstrap.
	Bootstrap string
	// Name is AWS_LAMBDA_FUNCTION_NAME. Default: "qasync-<fn>".
	Name string
	// Timeout is AWS_LAMBDA_FUNCTION_TIMEOUT, in whole seconds (rounded
	// up). Default 30 s, 60 s for the sweeper. The worker's must exceed
	// the lease (lease-ms, default 30 s): the worker function starts a
	// record only with at least a lease of time left.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Default 256.
	MemoryMB int
	// Concurrency is how many emulator processes serve the function, that
	// is how many invocations run at once. Default 2 for the worker, 1
	// for the others.
	Concurrency int
	// TemplateEnv is the function's environment as its template declares
	// it (Topology.Apply sets it): before Options.Env and Env, which a
	// caller uses for local overrides.
	TemplateEnv []string
	// Env is added to Options.Env for this function (later entries win).
	Env []string
}

// Options configure a Cloud. Zero values take the defaults.
type Options struct {
	// RIE is the aws-lambda-rie binary. Required.
	RIE string
	// BinDir holds the bootstraps as BinDir/<fn>/bootstrap. Default
	// .cache/local.
	BinDir string
	// Functions overrides settings per function, keyed by Submit, Worker,
	// Sweeper and DLQ.
	Functions map[string]FunctionOptions
	// Env is every function's environment: the configuration
	// (PIPELINE_ORCHESTRATOR_*) and the AWS SDK settings (AWS_REGION,
	// AWS_ENDPOINT_URL_*, credentials). See ForwardEnv. The harness adds
	// AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_FUNCTION_TIMEOUT,
	// AWS_LAMBDA_FUNCTION_MEMORY_SIZE and, if missing, AWS_REGION; and,
	// before Env (which may override it), http.allow-header-tenant=true:
	// this is a development topology, where the functions may take the
	// tenant from X-Tenant-Id.
	Env []string

	// Addr is the HTTP front's listen address (a loopback host:port;
	// port 0 picks a free one). Default 127.0.0.1:8080. The front runs
	// when Routes is set, or the submit function is enabled.
	Addr string
	// Routes are the HTTP API's routes (see Route), selected as API
	// Gateway does. Nil: one $default route to the submit function,
	// without authorization. Start refuses a bad route key, an unknown
	// or disabled function, two routes of the same method and path.
	Routes []Route
	// Callers are the IAM principals whose SigV4-signed requests the
	// AWS_IAM routes accept (see Caller); a request signed with any other
	// key is refused.
	Callers []Caller
	// APIID is the HTTP API's id: requestContext.apiId of the events and
	// the <apiId> of the execute-api ARNs the callers' policies are
	// evaluated on (iamcheck.Local's APIID, for policies resolved from
	// the template). Default DefaultAPIID.
	APIID string
	// IAMAccountID is the development shortcut of the default front
	// (Routes nil): when set, every request gets a fixed IAM identity
	// (requestContext.authorizer.iam, account IAMAccountID, user
	// "local") without signing, as if the $default route had IAM
	// authorization. With Routes, use AWS_IAM routes and Callers instead
	// (Start refuses both).
	IAMAccountID string
	// MaxBodyBytes is the largest request body the front accepts (413
	// above it). Default 10 MiB, API Gateway's limit.
	MaxBodyBytes int64

	// SQS is the client the event source mappings use. Required when
	// there is a queue mapping.
	SQS *sqs.Client
	// Queues are the SQS event source mappings (Topology.Apply sets them
	// from a template). A mapping of a disabled function is left out.
	Queues []QueueMapping
	// WorkQueueURL, DLQQueueURL and PoisonQueueURL are a shorthand for
	// Queues: the work queue consumed by the worker, the DLQ and poison
	// queues by the dlq function, with BatchSize and
	// ReportBatchItemFailures; empty: no mapping.
	WorkQueueURL   string
	DLQQueueURL    string
	PoisonQueueURL string
	// BatchSize is the batch size of the shorthand mappings and of Queues
	// entries without one, 1 to 10. Default 10.
	BatchSize int
	// WaitTimeSeconds is the long-poll wait, 1 to 20. Default 20.
	WaitTimeSeconds int
	// VisibilityTimeout, when set, is requested on every receive (whole
	// seconds); zero keeps the queue's own setting, as a Lambda event
	// source mapping does. A failed invocation's messages, and the
	// batch item failures, come back when it ends.
	VisibilityTimeout time.Duration

	// Streams are the DynamoDB stream event source mappings; a mapping of
	// a disabled function is left out.
	Streams []StreamMapping
	// DynamoDB (DescribeTable: a table's LatestStreamArn) and
	// DynamoDBStreams (the stream's reads) are the clients the stream
	// mappings use. Required when Streams is not empty.
	DynamoDB        *dynamodb.Client
	DynamoDBStreams *dynamodbstreams.Client

	// Schedules are the scheduled rules (Topology.Apply sets them from a
	// template). Without any, and with the sweeper enabled, the sweeper
	// runs every SweepEvery.
	Schedules []Schedule
	// SweepEvery is the sweeper's rate when Schedules is empty. Default 1
	// minute.
	SweepEvery time.Duration
	// RestartDelay is how long after an emulator process exits it is
	// started again. Default 1 s.
	RestartDelay time.Duration
	// DrainTimeout bounds how long Close waits for invocations in flight.
	// Default 10 s.
	DrainTimeout time.Duration

	// Region and AccountID fill ARNs and events. Defaults us-east-1 (or
	// AWS_REGION in Env) and 000000000000.
	Region    string
	AccountID string

	// LogDir, when set, receives each function's output (emulator and
	// function, stdout and stderr) in LogDir/<fn>.log (truncated at
	// Start), every line prefixed with "<fn>[<instance>] ". Otherwise the
	// lines go to Output (default os.Stderr).
	LogDir string
	Output io.Writer
	// Logger receives the harness's events. Default: discarded.
	Logger *slog.Logger

	// IAM, when set, enforces a synthesized template's IAM policies on
	// every AWS call of the functions and on the event source mappings
	// (see IAMOptions); the refused calls are in Denials, the allowed
	// ones in IAMCalls.
	IAM *IAMOptions
}

// ErrClosed is returned by Invoke once Close has begun.
var ErrClosed = errors.New("localcloud: closed")

// Cloud is a running local topology. Its methods are safe for concurrent
// use.
type Cloud struct {
	opts  Options
	log   *slog.Logger
	fns   map[string]*function
	order []string
	ln    net.Listener
	srv   *http.Server
	// httpFront serves ln.
	httpFront *httpFront
	closing   chan struct{}

	pollCtx    context.Context // pollers and schedule
	stopPoll   context.CancelFunc
	invokeCtx  context.Context // invocations made by the glue
	stopInvoke context.CancelFunc
	procCtx    context.Context // supervisors
	stopProc   context.CancelFunc
	glue       sync.WaitGroup // pollers, schedule
	procs      sync.WaitGroup // supervisors
	readers    sync.WaitGroup // output copiers
	bg         sync.WaitGroup // deferred logging
	served     chan struct{}
	closeOnce  sync.Once
	closeErr   error
	logFiles   []*os.File
	out        *lockedWriter // Output, when there is no LogDir

	mu             sync.Mutex
	colds          []ColdStart
	mappingDenials []iamcheck.Denial // under mu

	policies map[string]*iamcheck.Policy // by function, with Options.IAM
	proxies  map[string]*iamcheck.Proxy
	sink     *eventSink // EventBridge's stand-in
}

// Start starts the emulator processes, waits until each accepts
// connections, then starts the HTTP front, the event source mappings and
// the schedule. On error everything started is stopped again. ctx bounds
// the start only; call Close to stop. The stream mappings' functions' roles
// are checked (with Options.IAM) and their tables' streams resolved
// before any function starts.
func Start(ctx context.Context, opts Options) (*Cloud, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	c := &Cloud{opts: opts, log: opts.Logger, fns: map[string]*function{}, closing: make(chan struct{}), served: make(chan struct{})}
	c.pollCtx, c.stopPoll = context.WithCancel(context.Background())
	c.invokeCtx, c.stopInvoke = context.WithCancel(context.Background())
	c.procCtx, c.stopProc = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			close(c.served)
			_ = c.Close()
		}
	}()

	for _, name := range Functions {
		fo := opts.Functions[name]
		if fo.Disabled {
			continue
		}
		out, err := c.output(name)
		if err != nil {
			return nil, err
		}
		f := newFunction(c, name, fo, out)
		c.fns[name] = f
		c.order = append(c.order, name)
	}
	if len(c.order) == 0 {
		return nil, errors.New("localcloud: every function is disabled")
	}

	var err error
	if c.sink, err = startEventSink(c.log); err != nil {
		return nil, fmt.Errorf("localcloud: event sink: %w", err)
	}
	if opts.IAM != nil {
		if err := c.startIAM(); err != nil {
			return nil, err
		}
	}
	mappings, err := c.mappings(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkMappings(mappings); err != nil {
		return nil, err
	}
	streams, err := c.streamMappings(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkStreamMappings(streams); err != nil {
		return nil, err
	}
	if opts.Routes != nil || c.fns[Submit] != nil {
		enabled := func(fn string) bool { return c.fns[fn] != nil }
		f, err := newFront(&c.opts, c.log, enabled, c.Invoke)
		if err != nil {
			return nil, err
		}
		c.httpFront = f
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("localcloud: HTTP front: %w", err)
		}
		c.ln = ln
	}

	for _, name := range c.order {
		c.fns[name].start()
	}
	wctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	for _, name := range c.order {
		if err := c.fns[name].waitUp(wctx); err != nil {
			return nil, fmt.Errorf("localcloud: function %s did not start: %w", name, err)
		}
	}

	if c.ln != nil {
		c.srv = &http.Server{Handler: c.httpFront, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			defer close(c.served)
			_ = c.srv.Serve(c.ln)
		}()
	} else {
		close(c.served)
	}
	for _, m := range mappings {
		for range m.pollers {
			c.glue.Go(func() { c.poll(m) })
		}
	}
	for _, m := range streams {
		c.glue.Go(func() { c.pollStream(m) })
	}
	for _, s := range opts.Schedules {
		if c.fns[s.Function] != nil {
			c.glue.Go(func() { c.schedule(s) })
		}
	}
	ok = true
	queues := make([]string, 0, len(mappings)+len(streams))
	for _, m := range mappings {
		queues = append(queues, m.fn+"<-"+m.queueURL)
	}
	for _, m := range streams {
		queues = append(queues, m.Function+"<-"+m.streamARN)
	}
	c.log.LogAttrs(ctx, slog.LevelInfo, "cloud_started", slog.String("event", "cloud_started"),
		slog.String("url", c.URL()), slog.Any("functions", c.order), slog.Any("mappings", queues),
		slog.Any("schedules", scheduleNames(opts.Schedules)))
	return c, nil
}

// scheduleNames describes schedules for cloud_started.
func scheduleNames(ss []Schedule) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.Function+"<-"+s.Expression)
	}
	return out
}

func (o *Options) defaults() error {
	if o.RIE == "" {
		return errors.New("localcloud: Options.RIE (the aws-lambda-rie binary) is required")
	}
	if st, err := os.Stat(o.RIE); err != nil || st.IsDir() {
		return fmt.Errorf("localcloud: aws-lambda-rie not found at %s (make rie installs it)", o.RIE)
	}
	// Processes run in their bootstrap's directory: make paths absolute.
	rie, err := filepath.Abs(o.RIE)
	if err != nil {
		return err
	}
	o.RIE = rie
	if o.BinDir == "" {
		o.BinDir = filepath.Join(".cache", "local")
	}
	fns := map[string]FunctionOptions{}
	for name, fo := range o.Functions {
		if !slices.Contains(Functions, name) {
			return fmt.Errorf("localcloud: unknown function %q (want one of %v)", name, Functions)
		}
		fns[name] = fo
	}
	for _, name := range Functions {
		fo := fns[name]
		if fo.Bootstrap == "" {
			fo.Bootstrap = filepath.Join(o.BinDir, name, "bootstrap")
		}
		if fo.Name == "" {
			fo.Name = "qasync-" + name
		}
		if fo.Timeout <= 0 {
			fo.Timeout = DefaultTimeout
			if name == Sweeper {
				fo.Timeout = DefaultSweepTimeout
			}
		}
		fo.Timeout = max((fo.Timeout+time.Second-1)/time.Second, 1) * time.Second
		if fo.MemoryMB <= 0 {
			fo.MemoryMB = DefaultMemoryMB
		}
		if fo.Concurrency <= 0 {
			fo.Concurrency = 1
			if name == Worker {
				fo.Concurrency = 2
			}
		}
		if !fo.Disabled {
			if st, err := os.Stat(fo.Bootstrap); err != nil || st.IsDir() {
				return fmt.Errorf("localcloud: %s bootstrap not found at %s (build it with: go build -tags lambda.norpc -o %s ./functions/%s)",
					name, fo.Bootstrap, fo.Bootstrap, name)
			}
		}
		fns[name] = fo
	}
	o.Functions = fns
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	o.BatchSize = min(o.BatchSize, 10)
	if o.WaitTimeSeconds <= 0 {
		o.WaitTimeSeconds = DefaultWaitSeconds
	}
	o.WaitTimeSeconds = min(o.WaitTimeSeconds, 20)
	if o.VisibilityTimeout < 0 {
		o.VisibilityTimeout = 0
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = DefaultSweepEvery
	}
	if o.RestartDelay <= 0 {
		o.RestartDelay = DefaultRestartDelay
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Region == "" {
		o.Region = envValue(o.Env, "AWS_REGION")
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.AccountID == "" {
		o.AccountID = DefaultAccountID
	}
	if o.APIID == "" {
		o.APIID = DefaultAPIID
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Output == nil {
		o.Output = os.Stderr
	}
	return o.glueDefaults()
}

// glueDefaults checks the event source mappings and the schedules, and
// turns the shorthands into them.
func (o *Options) glueDefaults() error {
	queues := slices.Clone(o.Queues)
	for _, q := range []struct{ fn, url string }{{Worker, o.WorkQueueURL}, {DLQ, o.DLQQueueURL}, {DLQ, o.PoisonQueueURL}} {
		if q.url != "" {
			queues = append(queues, QueueMapping{Function: q.fn, QueueURL: q.url, ReportBatchItemFailures: true})
		}
	}
	var errs []error
	for i := range queues {
		q := &queues[i]
		if !slices.Contains(Functions, q.Function) {
			errs = append(errs, fmt.Errorf("localcloud: queue mapping %s: unknown function %q", q.QueueURL, q.Function))
		}
		if q.BatchSize <= 0 {
			q.BatchSize = o.BatchSize
		}
		if q.BatchSize > 10 && q.BatchingWindow <= 0 || q.BatchSize > 10000 {
			errs = append(errs, fmt.Errorf("localcloud: queue mapping %s: batch size %d: 1 to 10, or up to 10000 with a batching window", q.QueueURL, q.BatchSize))
		}
		if q.BatchingWindow < 0 || q.BatchingWindow > 300*time.Second {
			errs = append(errs, fmt.Errorf("localcloud: queue mapping %s: batching window %v: 0 to 300 s", q.QueueURL, q.BatchingWindow))
		}
	}
	o.Queues = queues
	if len(o.Queues) > 0 && o.SQS == nil {
		errs = append(errs, errors.New("localcloud: Options.SQS is required for the event source mappings"))
	}
	if len(o.Schedules) == 0 && !o.Functions[Sweeper].Disabled {
		o.Schedules = []Schedule{{ID: "SweeperSchedule", Function: Sweeper, Every: o.SweepEvery,
			Expression: "rate(" + o.SweepEvery.String() + ")", RetryAttempts: 2, MaxEventAge: max(o.SweepEvery, time.Minute)}}
	}
	for _, s := range o.Schedules {
		if !slices.Contains(Functions, s.Function) || s.Every <= 0 {
			errs = append(errs, fmt.Errorf("localcloud: schedule %s: want one of %v every positive period, not %q every %v", s.ID, Functions, s.Function, s.Every))
		}
	}
	if err := o.streamDefaults(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// output returns where fn's processes write: one writer shared by every
// function for Output, so that lines do not interleave, or fn's own file.
func (c *Cloud) output(fn string) (*lockedWriter, error) {
	if c.opts.LogDir == "" {
		if c.out == nil {
			c.out = &lockedWriter{w: c.opts.Output}
		}
		return c.out, nil
	}
	if err := os.MkdirAll(c.opts.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("localcloud: log dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(c.opts.LogDir, fn+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localcloud: log file: %w", err)
	}
	c.logFiles = append(c.logFiles, f)
	return &lockedWriter{w: f}, nil
}

// URL is the HTTP front's base URL (http://host:port), or "" when the
// submit function is disabled.
func (c *Cloud) URL() string {
	if c.ln == nil {
		return ""
	}
	return "http://" + c.ln.Addr().String()
}

// PID returns the process id of fn's first emulator process, or 0 when
// it is not running (or fn is unknown or disabled).
func (c *Cloud) PID(fn string) int {
	if pids := c.PIDs(fn); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// PIDs returns the process ids of fn's emulator processes, one per
// instance, 0 for an instance that is not running.
func (c *Cloud) PIDs(fn string) []int {
	f := c.fns[fn]
	if f == nil {
		return nil
	}
	pids := make([]int, len(f.instances))
	for i, in := range f.instances {
		pids[i] = in.currentPID()
	}
	return pids
}

// Restarts returns how many times fn's emulator processes were started
// again after exiting.
func (c *Cloud) Restarts(fn string) int {
	f := c.fns[fn]
	if f == nil {
		return 0
	}
	n := 0
	for _, in := range f.instances {
		n += in.restartCount()
	}
	return n
}

// ColdStart describes one emulator process's first invocation that
// reached the handler (a success or a handler error).
type ColdStart struct {
	// Function, Instance and PID name the emulator process.
	Function string
	Instance int
	PID      int
	// Ready is the time from the process's start to the end of that first
	// invocation, which includes the function's init.
	Ready time.Duration
	// Invoke is how long that first invocation took from the harness's
	// side (init included, as RIE initialises on the first invoke).
	Invoke time.Duration
	// Init is the init phase as the emulator's runtime logged it
	// ("INIT REPORT(durationMs: ...)"); zero if not seen.
	Init time.Duration
	// ReportedInit is the "Init Duration" of RIE's REPORT line; zero if
	// not seen.
	ReportedInit time.Duration
}

// ColdStarts returns the cold starts seen so far, in order.
func (c *Cloud) ColdStarts() []ColdStart {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.colds)
}

// Close stops the HTTP front (finishing requests in flight), the
// event source mappings and the schedule (waiting up to DrainTimeout for
// their invocations), then kills every emulator process and what it
// started, and waits for them. It is safe to call more than once.
func (c *Cloud) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.DrainTimeout)
		defer cancel()
		if c.srv != nil {
			if err := c.srv.Shutdown(ctx); err != nil {
				c.closeErr = fmt.Errorf("localcloud: HTTP front shutdown: %w", err)
				_ = c.srv.Close()
			}
		} else if c.ln != nil {
			_ = c.ln.Close()
		}
		<-c.served
		c.stopPoll()
		done := make(chan struct{})
		go func() { c.glue.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			c.stopInvoke()
			<-done
		}
		c.stopInvoke()
		c.stopProc()
		c.procs.Wait()
		// Output copiers end when the last process holding their pipe
		// is gone; do not wait forever for one that outlived its kill.
		copied := make(chan struct{})
		go func() { c.readers.Wait(); close(copied) }()
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		c.bg.Wait()
		for _, f := range c.logFiles {
			_ = f.Close()
		}
		c.closeIAM()
		if c.sink != nil {
			c.sink.close()
		}
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "cloud_stopped", slog.String("event", "cloud_stopped"))
	})
	return c.closeErr
}

// ForwardEnv returns the entries of environ (os.Environ form) that the
// functions need from the caller's environment: the configuration
// (PIPELINE_ORCHESTRATOR_*) and the AWS SDK settings (AWS_*, except the
// AWS_LAMBDA_* variables the harness sets itself).
func ForwardEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "AWS_LAMBDA_"):
		case strings.HasPrefix(k, "PIPELINE_ORCHESTRATOR_"), strings.HasPrefix(k, "PIPELINE_ITEM_REJECT_"), strings.HasPrefix(k, "AWS_"):
			out = append(out, kv)
		}
	}
	return out
}

// envValue returns the last value of key in env.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
