package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
)

// localCmd runs the serverless topology on this machine: the submit,
// worker, sweeper and dlq function binaries under the Runtime Interface
// Emulator, with the glue AWS provides around them emulated by package
// localcloud (API Gateway front, SQS event source mappings, EventBridge
// schedule), and, for the history function, the execution table's stream
// fed in this process.
//
//	qasync local [config flags] [--local-* flags]
//
// The configuration is read like `qasync serve` reads it and handed to
// every function (environment and config flags alike); it must name the
// durable providers, tables and queues, as `qasync provision` prints
// them. The poison queue is found through the work queue's redrive
// policy. The harness's own settings are the --local-* flags, each also
// read from an environment variable (see localUsage).
func localCmd(args []string) int {
	own, cfgArgs, err := splitLocalFlags(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	cfg, rest, err := config.Load(os.LookupEnv, cfgArgs)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(localUsage)
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected arguments %q", rest)
	}
	if err == nil {
		err = durableConfig(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	flagEnv, err := configFlagEnv(cfgArgs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	lo, err := loadLocalOptions(own, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}

	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	clients, err := awsclient.Load(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	poison, err := sqsbackend.RedriveTargetURL(ctx, clients.SQS, cfg.QueueURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %squeue-url: %v\n", config.KeyPrefix, err)
		return 1
	}
	if poison == "" {
		log.Warn("poison_queue_missing", slog.String("event", "poison_queue_missing"), slog.String("queue_url", cfg.QueueURL))
	}

	opts := localcloud.Options{
		RIE:    lo.rie,
		BinDir: lo.binDir,
		Functions: map[string]localcloud.FunctionOptions{
			localcloud.Worker:  {Timeout: lo.workerTimeout, Concurrency: lo.workerConcurrency},
			localcloud.History: {Disabled: true}, // fed in this process below
		},
		Env:               append(localcloud.ForwardEnv(os.Environ()), flagEnv...),
		Addr:              lo.addr,
		IAMAccountID:      lo.iamAccountID,
		SQS:               clients.SQS,
		WorkQueueURL:      cfg.QueueURL,
		DLQQueueURL:       cfg.DLQURL,
		PoisonQueueURL:    poison,
		VisibilityTimeout: lo.visibility,
		SweepEvery:        lo.sweepEvery,
		Logger:            log,
	}
	if opts.IAM, err = localIAM(lo.iamTemplate, cfg, poison); err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	if lo.logDir != "-" {
		opts.LogDir = lo.logDir
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := localcloud.Start(startCtx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	// The execution table's stream feeds the history table: in AWS the
	// history function's event source does it; here the same feed that
	// qasync serve runs, in this process.
	feedDone, err := runHistoryFeed(ctx, cfg, clients, log)
	if err != nil {
		_ = c.Close()
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	logs := "stderr"
	if opts.LogDir != "" {
		logs = filepath.Join(opts.LogDir, "<function>.log")
	}
	fmt.Fprintf(os.Stderr, `qasync local: the Lambda topology on %s
  functions under RIE: submit, worker (x%d, timeout %v), sweeper (every %v), dlq; their output: %s
  queues: work -> worker, dlq + poison -> dlq; the execution table's stream -> history (in this process)
`, c.URL(), lo.workerConcurrency, lo.workerTimeout, lo.sweepEvery, logs)
	if opts.IAM != nil {
		fmt.Fprintf(os.Stderr, "  IAM enforced: each function's AWS calls are checked against its role in %s (denials: event iam_denied)\n", lo.iamTemplate)
	}
	if keys, _ := testkeys.Load(os.LookupEnv); keys.Diag.Enabled {
		fmt.Fprintf(os.Stderr, `try:
  curl -si -X POST %s/v1/pipelines/diag.drill/executions -H 'Content-Type: application/json' -d '{"echo":"hello"}'
  curl -s %s/v1/executions/<executionId>
`, c.URL(), c.URL())
	}

	<-ctx.Done()
	stop()
	<-feedDone
	fmt.Fprintln(os.Stderr, "qasync local: stopping")
	if err := c.Close(); err != nil {
		log.Warn("shutdown_failed", slog.String("event", "shutdown_failed"), slog.String("error", err.Error()))
	}
	return 0
}

// runHistoryFeed reads the execution table's stream into the history
// table until ctx ends (the returned channel closes then).
func runHistoryFeed(ctx context.Context, cfg config.Config, clients awsclient.Clients, log *slog.Logger) (<-chan struct{}, error) {
	state, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: cfg.ExecutionTable})
	if err != nil {
		return nil, err
	}
	h, err := dynamo.NewHistory(clients.DynamoDB, state, dynamo.HistoryOptions{Table: cfg.HistoryTable, Logger: log,
		Retention: time.Duration(cfg.ExecutionTTLDays) * 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	feed, err := dynamo.NewStreamFeed(clients.DynamoDBStreams, clients.DynamoDB, h,
		dynamo.StreamOptions{ExecutionTable: cfg.ExecutionTable, Interval: cfg.HistoryPollInterval, Logger: log})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = feed.Run(ctx) }()
	return done, nil
}

const localUsage = `usage: qasync local [config flags] [--local-* flags]

Runs functions/{submit,worker,sweeper,dlq} (host builds in BIN_DIR/<fn>/bootstrap)
under aws-lambda-rie, with an API Gateway HTTP API front, SQS event source
mappings and an EventBridge schedule emulated around them. The configuration
(see 'qasync keys') must name the durable providers, tables and queues:
eval "$(qasync provision local)" prints them. 'make local-cloud' does it all.

  --local-bin-dir DIR            QASYNC_LOCAL_BIN_DIR            the bootstraps (default .cache/local)
  --local-rie PATH               QASYNC_LOCAL_RIE                aws-lambda-rie (default .cache/bin/aws-lambda-rie)
  --local-addr HOST:PORT         QASYNC_LOCAL_ADDR               the HTTP front (default: http.addr, 127.0.0.1:8080)
  --local-sweep-every DURATION   QASYNC_LOCAL_SWEEP_EVERY        the sweeper's schedule (default 1m)
  --local-log-dir DIR            QASYNC_LOCAL_LOG_DIR            the functions' output, DIR/<fn>.log; - for stderr (default BIN_DIR/logs)
  --local-visibility-timeout D   QASYNC_LOCAL_VISIBILITY_TIMEOUT requested on every receive (default 0: the queue's own)
  --local-worker-concurrency N   QASYNC_LOCAL_WORKER_CONCURRENCY worker processes (default 2)
  --local-worker-timeout D       QASYNC_LOCAL_WORKER_TIMEOUT     the worker's timeout (default 2 x lease-ms, at least 30s)
  --local-iam-account-id ID      QASYNC_LOCAL_IAM_ACCOUNT_ID     requestContext.authorizer.iam.accountId (default none)
  --local-iam-template PATH      QASYNC_LOCAL_IAM_TEMPLATE       enforce this synthesized template's IAM policies on the functions' AWS calls (default none)
`

// localOptions are the harness's own settings.
type localOptions struct {
	binDir, rie, addr, logDir, iamAccountID string
	iamTemplate                             string
	sweepEvery, visibility, workerTimeout   time.Duration
	workerConcurrency                       int
}

// localFlagNames are the --local-* flags, each with its environment
// variable QASYNC_LOCAL_<NAME>.
var localFlagNames = []string{"bin-dir", "rie", "addr", "sweep-every", "log-dir", "visibility-timeout",
	"worker-concurrency", "worker-timeout", "iam-account-id", "iam-template"}

// splitLocalFlags separates the --local-* flags (with their values) from
// the configuration flags.
func splitLocalFlags(args []string) (map[string]string, []string, error) {
	own := map[string]string{}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, ok := strings.CutPrefix(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "local-")
		if !ok || !strings.HasPrefix(a, "-") {
			rest = append(rest, a)
			continue
		}
		name, value, hasValue := strings.Cut(name, "=")
		known := false
		for _, n := range localFlagNames {
			known = known || n == name
		}
		if !known {
			return nil, nil, fmt.Errorf("unknown flag --local-%s (see qasync local -h)", name)
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("flag --local-%s needs a value", name)
			}
			i++
			value = args[i]
		}
		own[name] = value
	}
	return own, rest, nil
}

// loadLocalOptions applies defaults, then QASYNC_LOCAL_* variables, then
// the --local-* flags.
func loadLocalOptions(own map[string]string, cfg config.Config) (localOptions, error) {
	get := func(name, def string) string {
		if v, ok := own[name]; ok {
			return v
		}
		env := "QASYNC_LOCAL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && v != "" {
			return v
		}
		return def
	}
	lo := localOptions{
		binDir:       get("bin-dir", filepath.Join(".cache", "local")),
		rie:          get("rie", filepath.Join(".cache", "bin", "aws-lambda-rie")),
		addr:         get("addr", cfg.HTTPAddr),
		iamAccountID: get("iam-account-id", ""),
		iamTemplate:  get("iam-template", ""),
	}
	lo.logDir = get("log-dir", filepath.Join(lo.binDir, "logs"))
	var errs []error
	dur := func(name, def string) time.Duration {
		s := get(name, def)
		d, err := config.ParseDuration(s)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("--local-%s: %q is not a duration", name, s))
			return -1
		}
		return d
	}
	lo.sweepEvery = dur("sweep-every", "1m")
	lo.visibility = dur("visibility-timeout", "0s")
	lo.workerTimeout = dur("worker-timeout", max(30*time.Second, 2*cfg.Lease).String())
	if lo.sweepEvery == 0 {
		errs = append(errs, errors.New("--local-sweep-every must be greater than 0"))
	}
	if lo.workerTimeout > 0 && lo.workerTimeout <= cfg.Lease {
		errs = append(errs, fmt.Errorf("--local-worker-timeout (%v) must exceed %slease-ms (%v): the worker starts a step only with a lease of time left",
			lo.workerTimeout, config.KeyPrefix, cfg.Lease))
	}
	n := get("worker-concurrency", "2")
	if _, err := fmt.Sscan(n, &lo.workerConcurrency); err != nil || lo.workerConcurrency < 1 || lo.workerConcurrency > 64 {
		errs = append(errs, fmt.Errorf("--local-worker-concurrency: %q is not a number from 1 to 64", n))
	}
	return lo, errors.Join(errs...)
}

// durableConfig checks that cfg can run as separate functions: they share
// state only through DynamoDB and SQS.
func durableConfig(cfg config.Config) error {
	if cfg.StateProvider != "dynamo" || cfg.DispatcherProvider != "sqs" || cfg.DLQProvider != "sqs" {
		return fmt.Errorf("the functions share state only through DynamoDB and SQS: set %sstate-provider=dynamo, dispatcher-provider=sqs and dlq-provider=sqs "+
			`(eval "$(qasync provision local)" prints them with the tables and queues)`, config.KeyPrefix)
	}
	return nil
}

// configFlagEnv turns the configuration flags in args (already accepted
// by config.Load) into the environment entries that set the same keys, so
// that the functions see what the command line said.
func configFlagEnv(args []string) ([]string, error) {
	fs := flag.NewFlagSet("qasync local", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var env []string
	add := func(name, envName string, isBool bool) {
		fs.Var(&envFlag{env: &env, name: envName, isBool: isBool}, name, "")
	}
	aliases := map[string]string{"http.addr": "addr", "state-provider": "state", "dispatcher-provider": "dispatcher", "dlq-provider": "dlq"}
	for _, k := range config.Keys() {
		name := k.Flag
		isBool := k.Default == "true" || k.Default == "false"
		add(name, k.Env, isBool)
		if alias, ok := aliases[name]; ok {
			add(alias, k.Env, isBool)
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%v (set that key through its environment variable instead)", err)
	}
	return env, nil
}

// envFlag records a flag's value as an environment entry.
type envFlag struct {
	env    *[]string
	name   string
	isBool bool
}

func (f *envFlag) String() string { return "" }

func (f *envFlag) Set(s string) error {
	*f.env = append(*f.env, f.name+"="+s)
	return nil
}

func (f *envFlag) IsBoolFlag() bool { return f.isBool }

// localIAM returns the IAM enforcement of a template (nil without one):
// its tables and queues are the configured ones (the poison queue found
// through the work queue), the functions the stack's.
func localIAM(template string, cfg config.Config, poison string) (*localcloud.IAMOptions, error) {
	if template == "" {
		return nil, nil
	}
	tpl, err := iamcheck.LoadTemplate(template)
	if err != nil {
		return nil, fmt.Errorf("--local-iam-template: %w", err)
	}
	names := schema.Names{ExecutionTable: cfg.ExecutionTable, PayloadTable: cfg.PayloadTable, DeadLetterTable: cfg.DeadLetterTable,
		EffectTable: cfg.EffectTable, HistoryTable: cfg.HistoryTable}
	urls := map[string]string{}
	for _, q := range []struct {
		name *string
		url  string
	}{{&names.WorkQueue, cfg.QueueURL}, {&names.DLQQueue, cfg.DLQURL}, {&names.PoisonQueue, poison}, {&names.RejectQueue, cfg.ItemRejectQueueURL}} {
		if q.url != "" {
			*q.name = path.Base(q.url)
			urls[*q.name] = q.url
		}
	}
	return &localcloud.IAMOptions{Template: tpl, Local: iamcheck.LocalNames(names, urls, "", "")}, nil
}
