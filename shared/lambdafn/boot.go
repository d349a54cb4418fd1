// Package lambdafn runs a registry of pipelines as the five AWS Lambda
// functions of the serverless deployment:
//
//   - Submit: API Gateway HTTP API (payload 2.0) -> the HTTP API (submit,
//     status, result, re-drive, await completion) and the web console
//     under /console.
//   - Worker: the SQS work queue -> one transition per record, reporting
//     partial batch failures.
//   - Sweeper: an EventBridge schedule -> sweeps of the sweep index until
//     drained or out of time.
//   - DLQ: the dead-letter queue and the work queue's poison queue ->
//     durable dead-letter records, alerts and metrics.
//   - History: the execution table's DynamoDB stream -> the executions'
//     history (pages of events in the history table).
//
// A function's main is one line:
//
//	func main() { lambdafn.Main(lambdafn.Worker, myapp.Registry()) }
//
// Boot builds what a function needs from the environment (the same
// configuration keys as qasync serve, which the CDK construct sets) and
// Env.Handler returns its handler for lambda.Start. Logs are JSON lines
// (see NewLogger) with snake_case keys and an "event" key naming what
// happened; message bodies and payload bytes are never logged.
package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/apigw"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/pipeline"
)

// Function names one of the five Lambda functions.
type Function string

// The five functions (the CDK construct deploys one of each).
const (
	Submit  Function = "submit"
	Worker  Function = "worker"
	Sweeper Function = "sweeper"
	DLQ     Function = "dlq"
	History Function = "history"
)

// Main boots fn for reg (Boot, with RequireRecorder for DLQ) and starts
// its handler with lambda.Start; it does not return. When Boot fails
// (logged as boot_failed) the process exits with status 1, so Lambda
// reports the init error.
func Main(fn Function, reg *pipeline.Registry, opts ...BootOption) {
	if fn == DLQ {
		opts = append(opts, RequireRecorder())
	}
	env, err := Boot(context.Background(), reg, opts...)
	if err != nil {
		os.Exit(1)
	}
	h, err := env.Handler(fn)
	if err != nil {
		env.Logger.Error("boot_failed", slog.String("event", "boot_failed"), slog.String("error", err.Error()))
		os.Exit(1)
	}
	lambda.Start(h)
}

// Env is what Boot builds: the configuration, the logger, and the runtime
// on its providers.
type Env struct {
	// Config is the effective configuration (defaults, then environment).
	Config config.Config
	// Logger is the functions' logger (NewLogger on stdout).
	Logger *slog.Logger

	set *wiring.Set
}

// Handler returns the handler of fn for lambda.Start:
//
//   - Submit: func(ctx, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
//   - Worker: func(ctx, events.SQSEvent) (events.SQSEventResponse, error); it
//     stops starting records when less than a lease of time is left, and
//     hands a record that is not due yet back to the queue until it is,
//     as a fresh message that does not count towards the poison queue
//   - Sweeper: func(ctx, events.EventBridgeEvent) (SweepReport, error)
//   - DLQ: func(ctx, events.SQSEvent) (events.SQSEventResponse, error)
//   - History: func(ctx, events.DynamoDBEvent) (events.DynamoDBEventResponse, error);
//     it needs state-provider dynamo (ErrNoHistory otherwise)
func (e *Env) Handler(fn Function) (any, error) {
	if e == nil || e.set == nil {
		return nil, errors.New("lambdafn: Handler of an Env that did not boot")
	}
	rt := e.set.Runtime
	switch fn {
	case Submit:
		tenantFunc := apigw.TenantFunc(e.Config)
		api := httpapi.New(rt, httpapi.Options{
			MaxBodyBytes: e.Config.MaxBodyBytes,
			AdminToken:   e.Config.AdminToken,
			// Behind API Gateway the redrive route has its own permission.
			RedriveAuthorizedUpstream: e.Config.RedriveAuthorizedUpstream,
			TenantFunc:                tenantFunc,
			Logger:                    e.Logger,
		})
		// The web console at /console (qasync local serves it through the
		// submit function; its actions need admin.token).
		con := console.New(console.Engine(rt), console.Options{
			AdminToken: e.Config.AdminToken, TenantFunc: tenantFunc, TenantCookie: e.Config.TenantSource == "header",
			Pipelines: rt.Registry().IDs(), Logger: e.Logger,
		})
		return lambdahandlers.Submit(console.Mount(api, con)), nil
	case Worker:
		var opts []lambdahandlers.WorkerOption
		if e.set.Clients != nil && e.Config.DispatcherProvider == "sqs" {
			// A deferred record goes back as a fresh message, so that it
			// never counts towards the poison queue; its visibility is set
			// when it stays (a long wait, a failed send).
			client, url := e.set.Clients.SQS, e.Config.QueueURL
			opts = append(opts, lambdahandlers.WithRequeue(sqsbackend.NewDispatcher(client, url)),
				lambdahandlers.WithDeferrer(func(ctx context.Context, receipt string, d time.Duration) error {
					return sqsbackend.Defer(ctx, client, url, receipt, d)
				}))
		}
		return lambdahandlers.Worker(rt, e.Config.Lease, e.Logger, opts...), nil
	case Sweeper:
		return lambdahandlers.Sweeper(rt, lambdahandlers.DefaultSweepMargin, e.Logger), nil
	case DLQ:
		if e.set.Recorder == nil {
			return nil, ErrNoRecorder
		}
		return lambdahandlers.DLQ(rt, e.set.Recorder, e.set.Metrics, e.Logger), nil
	case History:
		if e.set.History == nil {
			return nil, ErrNoHistory
		}
		return lambdahandlers.History(e.set.History, e.Logger), nil
	}
	return nil, fmt.Errorf("lambdafn: unknown function %q (want submit, worker, sweeper, dlq or history)", fn)
}

// SweepReport is what one sweeper invocation did (the Sweeper handler's
// result).
type SweepReport = lambdahandlers.SweepReport

// Close releases what Boot started (the in-process dispatcher of a local
// configuration; nothing for SQS).
func (e *Env) Close(ctx context.Context) error {
	if e == nil || e.set == nil {
		return nil
	}
	return e.set.Close(ctx)
}

// BootOption adjusts Boot.
type BootOption func(*bootOptions)

type bootOptions struct {
	pipelines    func(config.Config) (*pipeline.Registry, error)
	needRecorder bool
	logOut       io.Writer
	lookupEnv    func(string) (string, bool)
	secrets      wiring.SecretGetter
}

// WithPipelines makes Boot build the registry from the configuration it
// loaded (for pipelines that depend on settings), instead of taking Boot's
// reg (pass nil).
func WithPipelines(p func(config.Config) (*pipeline.Registry, error)) BootOption {
	return func(o *bootOptions) { o.pipelines = p }
}

// RequireRecorder makes Boot fail when the providers have no dead-letter
// Recorder: the dlq function cannot work without one.
func RequireRecorder() BootOption { return func(o *bootOptions) { o.needRecorder = true } }

// WithLogOutput sends the logs to w instead of stdout (tests).
func WithLogOutput(w io.Writer) BootOption { return func(o *bootOptions) { o.logOut = w } }

// WithLookupEnv reads the environment through lookup instead of
// os.LookupEnv (tests).
func WithLookupEnv(lookup func(string) (string, bool)) BootOption {
	return func(o *bootOptions) { o.lookupEnv = lookup }
}

// WithSecretsManager makes Boot read the resume-token secret of
// await.resume-token-secret-arn through sm instead of a client from the
// SDK's default configuration (tests).
func WithSecretsManager(sm wiring.SecretGetter) BootOption {
	return func(o *bootOptions) { o.secrets = sm }
}

// ErrNoHistory is returned by Handler(History) when the configuration
// keeps no history table (state-provider is not dynamo).
var ErrNoHistory = fmt.Errorf("lambdafn: the history function needs %sstate-provider=dynamo and %sdynamo.history-table", config.KeyPrefix, config.KeyPrefix)

// ErrNoRecorder is returned by Boot with RequireRecorder when the
// configuration provides no dead-letter Recorder.
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
// AWS_LAMBDA_LOG_LEVEL when Lambda sets it, else from the log-level key),
// resolves the await resume-token secret from Secrets Manager when only
// its ARN is configured (a failure names the key), and opens the providers
// with reg, the caller's pipelines (or those WithPipelines builds). In
// Lambda (AWS_LAMBDA_FUNCTION_NAME
// set) it refuses http.tenant-source=header unless
// http.allow-header-tenant=true. A
// failure is logged as event "boot_failed" and returned; the returned Env
// then has at least its Logger. A configuration whose providers are not
// durable (memory state, in-process dispatcher) is allowed, for trying a
// function out, with a "boot_not_durable" warning.
func Boot(ctx context.Context, reg *pipeline.Registry, opts ...BootOption) (*Env, error) {
	o := bootOptions{logOut: os.Stdout, lookupEnv: os.LookupEnv}
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
	env := &Env{Config: cfg, Logger: log}
	fail := func(err error) (*Env, error) {
		log.LogAttrs(ctx, slog.LevelError, "boot_failed", slog.String("event", "boot_failed"), slog.String("error", err.Error()))
		return env, err
	}
	if cfgErr != nil {
		return fail(cfgErr)
	}
	if cfg.StateProvider == "embedded" {
		return fail(errEmbeddedInFunction)
	}
	// The deployed functions get the resume-token secret's ARN, never its
	// value: fetch the value once, before anything uses the config.
	if err := wiring.ResolveAwaitSecret(ctx, &cfg, o.secrets); err != nil {
		return fail(err)
	}
	env.Config = cfg
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
	set, err := wiring.Open(ctx, cfg, reg, log)
	if err != nil {
		return fail(err)
	}
	env.set = set
	if o.needRecorder && set.Recorder == nil {
		_ = set.Close(ctx)
		env.set = nil
		return fail(ErrNoRecorder)
	}
	if cfg.StateProvider != "dynamo" || cfg.DispatcherProvider != "sqs" {
		log.LogAttrs(ctx, slog.LevelWarn, "boot_not_durable", slog.String("event", "boot_not_durable"),
			slog.String("state_provider", cfg.StateProvider), slog.String("dispatcher_provider", cfg.DispatcherProvider))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "boot_completed", slog.String("event", "boot_completed"), slog.Any("config", cfg))
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
