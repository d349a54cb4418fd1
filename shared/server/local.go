package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/devstack"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/schema"
)

// localCmd runs a synthesized stack's serverless topology on this
// machine: every function of the template under the Runtime Interface
// Emulator, with the glue AWS provides around them emulated by package
// localcloud as the template declares it (the HTTP API's routes, the SQS
// and DynamoDB stream event source mappings, the schedule), each
// function's AWS calls checked against its role in the template.
//
//	qasync local [config flags] [--local-* flags]
//
// Without --local-template it runs the qasync construct's dev stack (the
// template of package devstack, kept equal to a fresh synthesis by the
// CDK app's tests), which fits a service built on the construct's
// defaults. The functions' configuration is their environment in the
// template,
// resolved on the local tables and queues (named --local-prefix-*, as
// qasync provision names them; created when missing). Config flags on
// the command line override it for every function, and are listed at
// start; PIPELINE_ORCHESTRATOR_* variables of the caller's environment
// are not passed on (the template says what the functions run with). The
// harness's own settings are the --local-* flags, each also read from an
// environment variable (see localUsage).
func localCmd(args []string) int {
	own, cfgArgs, err := splitLocalFlags(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	cfg, rest, err := config.Load(func(string) (string, bool) { return "", false }, cfgArgs)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(localUsage)
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected arguments %q", rest)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	overrides, err := configFlagEnv(cfgArgs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	lo, err := loadLocalOptions(own)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 2
	}
	tpl, err := localTemplate(&lo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: --local-template: %v\n", err)
		return 2
	}
	names := schema.Prefixed(lo.prefix)

	if lo.printTopology {
		// The queue URLs are the local stack's; without one reachable,
		// print them as the SQS server would name them.
		urls := map[string]string{}
		for _, q := range schema.Queues(names) {
			urls[q.Name] = "${queue-url:" + q.Name + "}"
		}
		tp, err := localcloud.TopologyOf(tpl, iamcheck.LocalNames(names, urls, "", ""), nil)
		if err != nil {
			fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
			return 1
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(tp)
		return 0
	}

	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PIPELINE_ORCHESTRATOR_") || strings.HasPrefix(k, "PIPELINE_ITEM_REJECT_") {
			log.Warn("local_env_ignored", slog.String("event", "local_env_ignored"), slog.String("key", k),
				slog.String("why", "the functions run with the template's environment; override a key with its config flag"))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	clients, err := awsclient.Load(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	if _, err := provision.CreateTables(ctx, clients.DynamoDB, schema.Tables(names)); err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	urls, err := provision.CreateQueues(ctx, clients.SQS, schema.Queues(names))
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	local := iamcheck.LocalNames(names, urls, "", "")
	tp, err := localcloud.TopologyOf(tpl, local, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	if err := localcloud.ConfigureQueues(ctx, clients.SQS, tp.QueueSettings); err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}

	opts := localcloud.Options{
		RIE:               lo.rie,
		BinDir:            lo.binDir,
		Functions:         map[string]localcloud.FunctionOptions{},
		Env:               append(awsEnv(os.Environ()), overrides...),
		Addr:              lo.addr,
		SQS:               clients.SQS,
		DynamoDB:          clients.DynamoDB,
		DynamoDBStreams:   clients.DynamoDBStreams,
		VisibilityTimeout: lo.visibility,
		Logger:            log,
	}
	if err := tp.Apply(&opts); err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	w := opts.Functions[localcloud.Worker]
	w.Concurrency = lo.workerConcurrency
	opts.Functions[localcloud.Worker] = w
	if lo.sweepEvery > 0 {
		for i := range opts.Schedules {
			opts.Schedules[i].Every = lo.sweepEvery
		}
	}
	if lo.iam {
		opts.IAM = &localcloud.IAMOptions{Template: tpl, Local: local}
	}
	// The IAM routes take requests signed with the local credentials, as
	// an operator holding the stack's client and operator policies.
	creds, err := clients.Config.Credentials.Retrieve(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: the local AWS credentials (the IAM routes' caller): %v\n", err)
		return 1
	}
	caller, err := localcloud.TemplateOperator(tpl, local, creds.AccessKeyID, creds.SecretAccessKey, localCallerARN)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync local: %v\n", err)
		return 1
	}
	opts.Callers = []localcloud.Caller{caller}
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
	fmt.Fprint(os.Stderr, describeLocal(c.URL(), lo, tp, opts, overrides))
	if tp.Functions[localcloud.Submit].Env[config.EnvName(config.FullKey("diag.enabled"))] == "true" {
		fmt.Fprintf(os.Stderr, `try (signed with your AWS credentials, as API Gateway's IAM routes want):
  curl -si --aws-sigv4 aws:amz:%[2]s:execute-api --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -X POST %[1]s/v1/pipelines/diag.drill/executions -H 'Content-Type: application/json' -H 'Idempotency-Key: try-1' -d '{"echo":"hello"}'
  qasync --url %[1]s --sigv4 always status <executionId>
`, c.URL(), cmp.Or(clients.Config.Region, iamcheck.DefaultRegion))
	}

	<-ctx.Done()
	stop()
	fmt.Fprintln(os.Stderr, "qasync local: stopping")
	if err := c.Close(); err != nil {
		log.Warn("shutdown_failed", slog.String("event", "shutdown_failed"), slog.String("error", err.Error()))
	}
	return 0
}

// localCallerARN is the IAM identity of requests signed with the local
// credentials: the tenant of what they submit is local-operator.
const localCallerARN = "arn:aws:iam::000000000000:user/local-operator"

// builtInTemplate names the dev stack's template built into qasync.
const builtInTemplate = "the qasync construct's dev stack (built in)"

// localTemplate reads --local-template, or takes the dev stack's built-in
// template without one (the construct's default topology).
func localTemplate(lo *localOptions) (*iamcheck.Template, error) {
	if lo.template == "" {
		lo.template = builtInTemplate
		return iamcheck.ParseTemplate(devstack.Template)
	}
	return iamcheck.LoadTemplate(lo.template)
}

// awsEnv returns the AWS SDK settings of environ that the functions need
// on this machine (endpoints, credentials, region), without the
// AWS_LAMBDA_* variables the harness sets itself.
func awsEnv(environ []string) []string {
	var out []string
	for _, kv := range localcloud.ForwardEnv(environ) {
		if strings.HasPrefix(kv, "AWS_") {
			out = append(out, kv)
		}
	}
	return out
}

// describeLocal is what qasync local prints once the topology runs.
func describeLocal(url string, lo localOptions, tp *localcloud.Topology, opts localcloud.Options, overrides []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "qasync local: %s's topology on %s\n", lo.template, url)
	for _, name := range localcloud.Functions {
		fo := opts.Functions[name]
		if fo.Disabled {
			continue
		}
		fmt.Fprintf(&b, "  function %-8s %s: timeout %v, %d MB, %d emulator(s)\n", name, fo.Name, fo.Timeout, fo.MemoryMB, max(fo.Concurrency, 1))
	}
	for _, q := range opts.Queues {
		fmt.Fprintf(&b, "  queue    %s -> %s: batch %d, window %v, report item failures %v\n", path.Base(q.QueueURL), q.Function, q.BatchSize, q.BatchingWindow, q.ReportBatchItemFailures)
	}
	for _, s := range opts.Streams {
		fmt.Fprintf(&b, "  stream   %s -> %s: batch %d, window %v, bisect %v, retries %d, on failure %s\n", s.Table, s.Function, s.BatchSize, s.BatchingWindow,
			s.BisectOnError, s.MaxRetryAttempts, path.Base(s.OnFailureQueueURL))
	}
	for _, s := range opts.Schedules {
		fmt.Fprintf(&b, "  schedule %s -> %s: every %v\n", s.ID, s.Function, s.Every)
	}
	iam := 0
	for _, r := range opts.Routes {
		if r.Authorization == "AWS_IAM" {
			iam++
		}
	}
	fmt.Fprintf(&b, "  routes   %d (%d with IAM authorization)\n", len(opts.Routes), iam)
	for _, c := range opts.Callers {
		fmt.Fprintf(&b, "  IAM routes' caller: your AWS credentials (%s) as %s, holding %s\n", c.AccessKeyID, c.ARN, strings.Join(localcloud.OperatorPolicies, " and "))
	}
	if len(overrides) > 0 {
		keys := make([]string, len(overrides))
		for i, kv := range overrides {
			keys[i], _, _ = strings.Cut(kv, "=")
		}
		fmt.Fprintf(&b, "  overridden by the command line: %s\n", strings.Join(keys, ", "))
	}
	if opts.IAM != nil {
		b.WriteString("  IAM enforced: each function's AWS calls are checked against its role in the template (denials: event iam_denied)\n")
	}
	if opts.LogDir != "" {
		fmt.Fprintf(&b, "  the functions' output: %s\n", filepath.Join(opts.LogDir, "<function>.log"))
	}
	return b.String()
}

const localUsage = `usage: qasync local [config flags] [--local-* flags]

Runs a synthesized stack's functions (host builds in BIN_DIR/<fn>/bootstrap)
under aws-lambda-rie, with what the template declares around them emulated:
the HTTP API's routes and their authorization, the SQS and DynamoDB stream
event source mappings with their settings, the scheduled rules; each
function with the template's environment, timeout and memory, its AWS calls
checked against its role. Tables and queues are the local stack's, named
PREFIX-* (created when missing). Config flags override the template's
environment for every function. 'make local-cloud' synthesizes the stack and
does it all.

  --local-template PATH          QASYNC_LOCAL_TEMPLATE           the synthesized template (make synth: infra/cdk/cdk.out/qasync-dev.template.json; default: the qasync construct's dev stack, built in)
  --local-prefix NAME            QASYNC_LOCAL_PREFIX             the local tables' and queues' prefix (default local)
  --local-iam true|false         QASYNC_LOCAL_IAM                check the functions' AWS calls against their roles (default true)
  --local-bin-dir DIR            QASYNC_LOCAL_BIN_DIR            the bootstraps (default .cache/local)
  --local-rie PATH               QASYNC_LOCAL_RIE                aws-lambda-rie (default .cache/bin/aws-lambda-rie)
  --local-addr HOST:PORT         QASYNC_LOCAL_ADDR               the HTTP front (default 127.0.0.1:8080)
  --local-log-dir DIR            QASYNC_LOCAL_LOG_DIR            the functions' output, DIR/<fn>.log; - for stderr (default BIN_DIR/logs)
  --local-worker-concurrency N   QASYNC_LOCAL_WORKER_CONCURRENCY worker emulators (default 2)
  --local-sweep-every DURATION   QASYNC_LOCAL_SWEEP_EVERY        run the schedules this often instead of the template's rate
  --local-visibility-timeout D   QASYNC_LOCAL_VISIBILITY_TIMEOUT requested on every receive (default 0: the queue's own)
  --local-print-topology         print what the template declares, as JSON, and exit
`

// localOptions are the harness's own settings.
type localOptions struct {
	template, prefix, binDir, rie, addr, logDir string
	iam, printTopology                          bool
	sweepEvery, visibility                      time.Duration
	workerConcurrency                           int
}

// localFlagNames are the --local-* flags, each with its environment
// variable QASYNC_LOCAL_<NAME>; localBoolFlags take no value.
var (
	localFlagNames = []string{"template", "prefix", "iam", "bin-dir", "rie", "addr", "sweep-every", "log-dir", "visibility-timeout",
		"worker-concurrency", "print-topology"}
	localBoolFlags = []string{"print-topology"}
)

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
		if !hasValue && slices.Contains(localBoolFlags, name) {
			value, hasValue = "true", true
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
func loadLocalOptions(own map[string]string) (localOptions, error) {
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
		template: get("template", ""),
		prefix:   get("prefix", "local"),
		binDir:   get("bin-dir", filepath.Join(".cache", "local")),
		rie:      get("rie", filepath.Join(".cache", "bin", "aws-lambda-rie")),
		addr:     get("addr", localcloud.DefaultAddr),
	}
	lo.logDir = get("log-dir", filepath.Join(lo.binDir, "logs"))
	var errs []error
	boolean := func(name, def string) bool {
		s := get(name, def)
		b, err := strconv.ParseBool(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--local-%s: %q is not true or false", name, s))
		}
		return b
	}
	lo.iam = boolean("iam", "true")
	lo.printTopology = boolean("print-topology", "false")
	dur := func(name, def string) time.Duration {
		s := get(name, def)
		d, err := config.ParseDuration(s)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("--local-%s: %q is not a duration", name, s))
			return -1
		}
		return d
	}
	lo.sweepEvery = dur("sweep-every", "0s")
	lo.visibility = dur("visibility-timeout", "0s")
	n := get("worker-concurrency", "2")
	if _, err := fmt.Sscan(n, &lo.workerConcurrency); err != nil || lo.workerConcurrency < 1 || lo.workerConcurrency > 64 {
		errs = append(errs, fmt.Errorf("--local-worker-concurrency: %q is not a number from 1 to 64", n))
	}
	return lo, errors.Join(errs...)
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
