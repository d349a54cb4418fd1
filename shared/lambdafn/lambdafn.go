// Package lambdafn runs a registry of pipelines as the five AWS Lambda
// functions of the serverless deployment. Each function is a package of
// its own under this one, so that its bundle links only what it runs:
//
//   - submit: API Gateway HTTP API (payload 2.0) -> the HTTP API (submit,
//     status, result, re-drive, await completion) and the web console
//     under /console.
//   - worker: the SQS work queue -> one transition per record, reporting
//     partial batch failures.
//   - sweeper: an EventBridge schedule -> sweeps of the sweep index until
//     drained or out of time, then the bulk re-drive jobs.
//   - dlq: the dead-letter queue and the work queue's poison queue ->
//     durable dead-letter records, alerts and metrics.
//   - history: the execution table's DynamoDB stream -> the executions'
//     history (pages of events in the history table).
//
// A function's main is one line, the same shape as server.Main's:
//
//	func main() { lambdafn.Main(worker.Function, myapp.Registry()) }
//
// Boot builds what a function needs from the environment (the same
// configuration keys as qasync serve, which the CDK construct sets) and
// Env.Handler returns its handler for lambda.Start. The backend is the
// one state-provider names (dynamo, or memory to try a function out), or
// one of your own (WithBackend). Logs are JSON lines (see NewLogger) with
// snake_case keys and an "event" key naming what happened; message bodies
// and payload bytes are never logged.
package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsbackend"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/lambdafn/internal/role"
	"github.com/qasync/qasync/shared/pipeline"
)

// Function names one of the five Lambda functions. Each function's
// package defines its value (submit.Function, worker.Function,
// sweeper.Function, dlq.Function, history.Function); importing that
// package is what makes Boot able to run it.
type Function string

// Main boots fn for reg (Boot) and starts its handler with lambda.Start;
// it does not return. When Boot fails (logged as boot_failed) the process
// exits with status 1, so Lambda reports the init error.
func Main(fn Function, reg *pipeline.Registry, opts ...Option) {
	env, err := Boot(context.Background(), fn, reg, opts...)
	if err != nil {
		os.Exit(1)
	}
	lambda.Start(env.handler)
}

// Env is what Boot builds for one function: the configuration, the
// logger, the runtime on its backend, and the function's handler.
type Env struct {
	// Function is the function Boot booted.
	Function Function
	// Config is the effective configuration (defaults, then environment).
	Config config.Config
	// Logger is the function's logger (NewLogger on stdout).
	Logger *slog.Logger

	process *wiring.Process
	handler any
}

// Handler returns the function's handler for lambda.Start:
//
//   - submit: func(ctx, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
//   - worker: func(ctx, events.SQSEvent) (events.SQSEventResponse, error); it
//     stops starting records when less than a lease of time is left, and
//     hands a record that is not due yet back to the queue until it is,
//     as a fresh message that does not count towards the poison queue
//   - sweeper: func(ctx, events.EventBridgeEvent) (report, error), the
//     report the JSON object of the invocation's sweep counts
//   - dlq: func(ctx, events.SQSEvent) (events.SQSEventResponse, error)
//   - history: func(ctx, events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
func (e *Env) Handler() (any, error) {
	if e == nil || e.handler == nil {
		return nil, errors.New("lambdafn: Handler of an Env that did not boot")
	}
	return e.handler, nil
}

// Close releases what Boot started (the in-process dispatcher of a local
// configuration; nothing for SQS).
func (e *Env) Close(ctx context.Context) error {
	if e == nil || e.process == nil {
		return nil
	}
	return e.process.Close(ctx)
}

// Option adjusts Boot (and Main).
type Option func(*options)

type options struct {
	pipelines func(config.Config) (*pipeline.Registry, error)
	backend   backend.Backend
	logOut    io.Writer
	lookupEnv func(string) (string, bool)
	secrets   SecretsManager
}

// WithPipelines makes Boot build the registry from the configuration it
// loaded (for pipelines that depend on settings), instead of taking Boot's
// reg (pass nil).
func WithPipelines(p func(config.Config) (*pipeline.Registry, error)) Option {
	return func(o *options) { o.pipelines = p }
}

// WithBackend runs the function on b instead of the backend that
// state-provider names (dynamo, or memory). The function's event source
// still delivers its events (the worker's work items come from SQS
// records, for example); b serves the seams behind them.
func WithBackend(b backend.Backend) Option { return func(o *options) { o.backend = b } }

// WithLogOutput sends the logs to w instead of stdout (tests).
func WithLogOutput(w io.Writer) Option { return func(o *options) { o.logOut = w } }

// WithLookupEnv reads the environment through lookup instead of
// os.LookupEnv (tests).
func WithLookupEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookupEnv = lookup }
}

// SecretsManager is the one Secrets Manager call Boot makes, to read the
// resume-token secret of await.resume-token-secret-arn
// (*secretsmanager.Client implements it).
type SecretsManager interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// WithSecretsManager makes Boot read the resume-token secret through sm
// instead of a client from the SDK's default configuration (tests).
func WithSecretsManager(sm SecretsManager) Option {
	return func(o *options) { o.secrets = sm }
}

// ErrNoHistory is returned by Boot of the history function when the
// backend keeps no history fed by the execution table's stream
// (state-provider is not dynamo).
var ErrNoHistory = fmt.Errorf("lambdafn: the history function needs %sstate-provider=dynamo and %sdynamo.history-table", config.KeyPrefix, config.KeyPrefix)

// ErrNoRecorder is returned by Boot of the dlq function when the backend
// keeps no dead-letter records.
var ErrNoRecorder = errors.New("lambdafn: no dead-letter recorder configured (the dlq function needs one)")

// errHeaderTenantInLambda refuses, in Lambda, the tenant source any
// caller controls.
var errHeaderTenantInLambda = fmt.Errorf("%s: header takes the tenant from X-Tenant-Id, which any caller of the API can send: use iam or jwt (or none), "+
	"or set %s=true for a development deployment", config.FullKey("http.tenant-source"), config.FullKey("http.allow-header-tenant"))

// errEmbeddedInFunction refuses the embedded store in a function: it is
// one process's data directory, and the functions share state only
// through DynamoDB and SQS.
var errEmbeddedInFunction = fmt.Errorf("%s: embedded keeps every execution in one process's data directory; the functions share state only through DynamoDB: set dynamo (and %s=sqs)",
	config.FullKey("state-provider"), config.FullKey("dispatcher-provider"))

// Boot reads the configuration from the environment (config.Load with no
// flags), builds the logger (NewLogger on stdout, level from
// AWS_LAMBDA_LOG_LEVEL when Lambda sets it, else from the log-level key)
// and assembles fn on its backend with reg, the caller's pipelines (or
// those WithPipelines builds): the submit and worker functions first
// resolve the await resume-token secret from Secrets Manager when only
// its ARN is configured (a failure names the key). In Lambda
// (AWS_LAMBDA_FUNCTION_NAME set) it refuses http.tenant-source=header
// unless http.allow-header-tenant=true. A failure is logged as event
// "boot_failed" and returned; the returned Env then has at least its
// Logger. A configuration whose providers are not durable (memory state,
// in-process dispatcher) is allowed, for trying a function out, with a
// "boot_not_durable" warning. fn's package must be linked (imported by
// the main), or Boot fails naming it.
func Boot(ctx context.Context, fn Function, reg *pipeline.Registry, opts ...Option) (*Env, error) {
	o := options{logOut: os.Stdout, lookupEnv: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	// The functions never default to the embedded store (qasync serve's
	// default): unset, the state is in memory, with a boot_not_durable
	// warning.
	stateVar := config.EnvName(config.FullKey("state-provider"))
	lookup := func(name string) (string, bool) {
		v, ok := o.lookupEnv(name)
		if name == stateVar && !ok {
			return "memory", true
		}
		return v, ok
	}
	cfg, _, cfgErr := config.Load(lookup, nil)
	level := slog.LevelInfo
	if cfgErr == nil {
		level = configLevel(cfg.LogLevel)
	}
	if l, ok := lambdaLevel(o.lookupEnv); ok {
		level = l
	}
	log := NewLogger(o.logOut, level)
	if name, ok := o.lookupEnv("AWS_LAMBDA_FUNCTION_NAME"); ok && name != "" {
		log = log.With(slog.String("function", name))
	}
	env := &Env{Function: fn, Config: cfg, Logger: log}
	fail := func(err error) (*Env, error) {
		log.LogAttrs(ctx, slog.LevelError, "boot_failed", slog.String("event", "boot_failed"), slog.String("error", err.Error()))
		return env, err
	}
	r, ok := role.Lookup(string(fn))
	if !ok {
		return fail(fmt.Errorf("lambdafn: no function %q is linked: import its package (submit, worker, sweeper, dlq or history under shared/lambdafn) and pass its Function", fn))
	}
	if cfgErr != nil {
		return fail(cfgErr)
	}
	if cfg.StateProvider == "embedded" && o.backend == nil {
		return fail(errEmbeddedInFunction)
	}
	if name, _ := o.lookupEnv("AWS_LAMBDA_FUNCTION_NAME"); name != "" && cfg.TenantSource == "header" && !cfg.AllowHeaderTenant {
		return fail(errHeaderTenantInLambda)
	}
	if o.pipelines != nil {
		var err error
		if reg, err = o.pipelines(cfg); err != nil {
			return fail(err)
		}
	}
	if reg == nil {
		return fail(errors.New("lambdafn: Boot needs a pipeline registry"))
	}
	keys, err := testkeys.Load(o.lookupEnv)
	if err != nil {
		return fail(err)
	}
	sess := awsclient.NewEnvSession()
	wo := wiring.Options{
		Backends: map[string]backend.Backend{"memory": memory.Backend(), "dynamo": awsbackend.New(sess)},
		Backend:  o.backend, Logger: log, AWS: sess, Faults: keys.Faults,
		// A function is frozen between invocations: spans go out as they end.
		TracingSync: true,
	}
	if r.Parts != nil {
		r.Parts(&wo, sess)
	}
	if o.secrets != nil && wo.Secrets != nil {
		wo.Secrets = wiring.Secrets(func(context.Context) (wiring.SecretGetter, error) { return o.secrets, nil })
	}
	p, err := wiring.Assemble(ctx, cfg, reg, wo)
	if err != nil {
		return fail(err)
	}
	env.Config, env.process = p.Config, p
	h, err := r.Handler(p)
	if err != nil {
		_ = p.Close(ctx)
		env.process = nil
		return fail(err)
	}
	env.handler = h
	if o.backend == nil && (cfg.StateProvider != "dynamo" || p.Config.DispatcherProvider != "sqs") {
		log.LogAttrs(ctx, slog.LevelWarn, "boot_not_durable", slog.String("event", "boot_not_durable"),
			slog.String("state_provider", cfg.StateProvider), slog.String("dispatcher_provider", p.Config.DispatcherProvider))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "boot_completed", slog.String("event", "boot_completed"), slog.Any("config", p.Config))
	return env, nil
}

// NewLogger returns the functions' logger: JSON lines on w at level, with
// the record keys Lambda's JSON log format uses ("timestamp", "level",
// "message", via lambdacontext.ReplaceAttr) so that Lambda's log-level
// filtering applies, and with "request_id" (the Lambda request id) added
// to every record logged with an invocation's context.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: lambdacontext.ReplaceAttr})
	return slog.New(requestIDHandler{h})
}

// requestIDHandler adds the Lambda request id of the record's context.
type requestIDHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		r.AddAttrs(slog.String("request_id", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

// configLevel maps the log-level key's values.
func configLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// lambdaLevel reads AWS_LAMBDA_LOG_LEVEL, which Lambda sets from the
// function's application log level (JSON log format).
func lambdaLevel(lookup func(string) (string, bool)) (slog.Level, bool) {
	v, _ := lookup("AWS_LAMBDA_LOG_LEVEL")
	switch v {
	case "TRACE", "DEBUG":
		return slog.LevelDebug, true
	case "INFO":
		return slog.LevelInfo, true
	case "WARN":
		return slog.LevelWarn, true
	case "ERROR", "FATAL":
		return slog.LevelError, true
	}
	return 0, false
}
