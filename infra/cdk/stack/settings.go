package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/constructs-go/constructs/v10"

	"github.com/qasync/qasync/shared/config"
)

// Function names, as used in Settings.ReservedConcurrency, Bundles
// (dist/<name>.zip) and the physical function names (<prefix>-<name>).
const (
	Submit  = "submit"
	Worker  = "worker"
	Sweeper = "sweeper"
	DLQ     = "dlq"
	History = "history"
)

// FunctionNames lists the five functions in deployment order.
var FunctionNames = []string{Submit, Worker, Sweeper, DLQ, History}

// Settings are a deployment's stage settings. DefaultSettings gives a
// stage's defaults; SettingsFromContext reads them from CDK context
// (cdk.json, `-c key=value`). Validate checks them; New calls it.
type Settings struct {
	// Service names the application the stack deploys (context "service",
	// default "qasync"): lower-case letters, digits and '-'. The stack is
	// "<service>-<stage>", tagged app=<service>, and the defaults of Prefix
	// and MetricsNamespace follow it, so that two services share an
	// account without sharing a table.
	Service string
	// Stage names the deployment (context "stage", default "dev"):
	// lower-case letters, digits and '-'. The stack is "<service>-<stage>".
	Stage string
	// Prefix names every table, queue, function, bus and log group
	// (context "prefix", default "<service>-<stage>"), via schema.Prefixed.
	Prefix string
	// DistDir holds the Lambda bundles <fn>/bootstrap and <fn>.zip when
	// Props.Bundles names none (context "distDir", default ../../dist
	// relative to infra/cdk: this repository's dist/).
	DistDir string
	// Retain keeps tables, queues and log groups when the stack or the
	// resource is deleted (context "retain"; default true except in dev).
	Retain bool
	// DeletionProtection turns on DynamoDB deletion protection (context
	// "deletionProtection"; default true except in dev).
	DeletionProtection bool
	// LogRetentionDays is the retention of every log group (context
	// "logRetentionDays", default 30); one of CloudWatch's allowed values.
	LogRetentionDays int
	// MemoryMB is every function's memory (context "memoryMb", default 256).
	MemoryMB int
	// SubmitTimeout is the submit function's timeout (context
	// "submitTimeoutSeconds", default 20 s; API Gateway waits at most 30 s).
	SubmitTimeout time.Duration
	// WorkerTimeout is the worker function's timeout (context
	// "workerTimeoutSeconds", default 60 s). It must exceed Lease: the
	// worker starts a record only with at least Lease left.
	WorkerTimeout time.Duration
	// Lease is the execution lease, config key lease-ms (context "leaseMs",
	// default 30000).
	Lease time.Duration
	// SweeperTimeout is the sweeper function's timeout (context
	// "sweeperTimeoutSeconds", default 60 s).
	SweeperTimeout time.Duration
	// DLQTimeout is the dlq function's timeout (context
	// "dlqTimeoutSeconds", default 30 s).
	DLQTimeout time.Duration
	// WorkerBatchSize is the work queue event source's batch size (context
	// "workerBatchSize", default 10, 1 to 10).
	WorkerBatchSize int
	// WorkerBatchingWindow is the work queue event source's maximum
	// batching window (context "workerBatchingWindowSeconds", default 0).
	WorkerBatchingWindow time.Duration
	// WorkerMaxConcurrency caps the concurrent worker invocations the work
	// queue event source starts (context "workerMaxConcurrency", 2 to
	// 1000; default 0: no cap).
	WorkerMaxConcurrency int
	// UrgentLane creates the urgent work queue (context "urgentLane",
	// default true): executions of priority at most priority.urgent-at
	// (1 unless runtimeConfig sets it) are dispatched to it, and the
	// worker function consumes it through a second event source mapping,
	// so that urgent work never waits behind the work queue's backlog.
	// Its cost while idle is the mapping's polling, billed as SQS
	// requests (docs/cost.md); false leaves it out, and every execution
	// goes to the work queue.
	UrgentLane bool
	// UrgentMaxConcurrency caps the concurrent worker invocations the
	// urgent queue's event source starts (context "urgentMaxConcurrency",
	// 2 to 1000; default 0: no cap), apart from WorkerMaxConcurrency.
	UrgentMaxConcurrency int
	// DLQBatchSize is the batch size of the dlq function's two event
	// sources (context "dlqBatchSize", default 10, 1 to 10).
	DLQBatchSize int
	// DLQMaxConcurrency caps each of the dlq function's event sources
	// (context "dlqMaxConcurrency", 2 to 1000; default 0: no cap).
	DLQMaxConcurrency int
	// HistoryTimeout is the history function's timeout (context
	// "historyTimeoutSeconds", default 60 s).
	HistoryTimeout time.Duration
	// HistoryBatchSize is the most stream records one history invocation
	// gets (context "historyBatchSize", default 1000, 1 to 10000).
	HistoryBatchSize int
	// HistoryBatchingWindow is how long the stream event source gathers
	// records before it invokes the history function (context
	// "historyBatchingWindowSeconds", default 2, 0 to 300): an
	// execution's writes within one window become one history page, so a
	// wider window writes fewer pages and shows the history later.
	HistoryBatchingWindow time.Duration
	// ReservedConcurrency reserves concurrency per function name (context
	// "reservedConcurrency", an object such as {"worker": 50}; default
	// none).
	ReservedConcurrency map[string]int
	// Tracing turns on X-Ray active tracing of every function (context
	// "tracing", default false).
	Tracing bool
	// SweeperRate is the sweeper's schedule (context "sweeperRateMinutes",
	// default 1 minute; whole minutes).
	SweeperRate time.Duration
	// OldestMessageAlarm is the threshold of the alarm on the age of the
	// oldest work queue message (context "oldestMessageAlarmSeconds",
	// default 300).
	OldestMessageAlarm time.Duration
	// AlarmEmail, when set, creates an encrypted SNS topic with this email
	// subscription as the alarms' action (context "alarmEmail").
	AlarmEmail string
	// JWTIssuer is the issuer URL of a JWT authorizer (context
	// "jwtIssuer"). With JWTAudience set too, the tenant routes and the
	// redrive route use it instead of IAM, and http.tenant-source is jwt.
	JWTIssuer string
	// JWTAudience lists the audiences the JWT authorizer accepts (context
	// "jwtAudience": a comma-separated list or an array).
	JWTAudience []string
	// JWTTenantClaim is the claim naming the tenant under JWT (context
	// "jwtTenantClaim", default tenant_id).
	JWTTenantClaim string
	// JWTRedriveScope is the OAuth scope the redrive route requires under
	// JWT (context "jwtRedriveScope", default qasync/redrive).
	JWTRedriveScope string
	// ThrottleRateLimit is the API stage's steady request rate per second
	// (context "throttleRateLimit", default 100).
	ThrottleRateLimit float64
	// ThrottleBurstLimit is the API stage's burst (context
	// "throttleBurstLimit", default 200).
	ThrottleBurstLimit int
	// AwaitThrottleRateLimit is the steady request rate per second of the
	// await completion route, which has no API Gateway authorizer (its
	// resume token is checked by the submit function), so it gets a lower
	// limit than the rest of the stage (context "awaitThrottleRateLimit",
	// default 10; at most ThrottleRateLimit).
	AwaitThrottleRateLimit float64
	// AwaitThrottleBurstLimit is the await completion route's burst
	// (context "awaitThrottleBurstLimit", default 20; at most
	// ThrottleBurstLimit).
	AwaitThrottleBurstLimit int
	// AwaitWAF puts the await completion route behind an AWS WAF web ACL
	// whose rate-based rule limits each client IP (context "awaitWaf";
	// default true in every stage but dev). AWS WAF cannot protect an
	// HTTP API, so the route then leaves the HTTP API: a regional REST API
	// (output AwaitApiUrl), with the web ACL, proxies it to an HTTP API of
	// its own whose URL the stack never publishes (see docs/deployment.md,
	// "Abuse limits"). Without it any caller can keep the route's shared
	// throttle (AwaitThrottleRateLimit) spent.
	AwaitWAF bool
	// AwaitWAFRateLimit is how many completion requests one client IP may
	// send within AwaitWAFWindow before the web ACL answers its requests
	// 429 (context "awaitWafRateLimit", default 100; at least 10, WAF's
	// minimum).
	AwaitWAFRateLimit int
	// AwaitWAFWindow is the trailing window over which the web ACL counts
	// each IP's completion requests (context "awaitWafWindowSeconds": 60,
	// 120, 300 or 600, the windows WAF offers; default 60).
	AwaitWAFWindow time.Duration
	// TenantStages gives tenants a throttle of their own (context
	// "tenantStages", an object such as {"acme": {"rateLimit": 20,
	// "burstLimit": 40}}; default none). An HTTP API has no usage plans
	// and no per-caller throttle, but every stage has its own token
	// buckets: each named tenant gets a stage of that name with this
	// throttle, and a managed policy allowing the client routes on that
	// stage only, to attach to the tenant's IAM role instead of
	// ClientInvokePolicy (which names the $default stage only).
	// Needs IAM authorization: a JWT is accepted on every stage.
	TenantStages map[string]Throttle
	// TenantSource is config key http.tenant-source (context
	// "tenantSource"): iam (the calling IAM principal: the role of an
	// assumed-role session, or the IAM user), iam-account (one tenant per
	// AWS account) or jwt (needs the JWT settings). Default "": iam, or
	// jwt with a JWT authorizer. header and none are refused in every
	// stage: any caller can send X-Tenant-Id, and none puts every caller
	// into one tenant.
	TenantSource string
	// DiagEnabled is config key diag.enabled: serve the diag.drill fault
	// drill (context "diagEnabled"; default true in dev only, off in prod
	// and every other stage).
	DiagEnabled bool
	// MetricsNamespace is the EMF namespace, config key metrics.namespace
	// (context "metricsNamespace", default <service>/<stage>).
	MetricsNamespace string
	// EventTypes are the lifecycle event types the history function puts
	// on the stack's bus, at least once: config key events.types (context
	// "eventTypes", a comma-separated list or "none"; default
	// config.DefaultEventsTypes, the terminal ones).
	EventTypes string
	// LogLevel is the functions' log level (context "logLevel": debug,
	// info, warn or error; default info). It sets both config key
	// log-level and Lambda's application log level.
	LogLevel string
	// OutputBucket creates the output bucket of pipelines' Terminal Object
	// Publish (context "outputBucket", default false): S3 managed
	// encryption, public access blocked, TLS only, versioned, retained
	// like the tables; the worker may s3:PutObject into it and every
	// function gets its name as config key output.bucket (the
	// {outputBucket} placeholder of Output.To).
	OutputBucket bool
	// RuntimeConfig sets further configuration keys (without the
	// pipeline.orchestrator. prefix), e.g. {"max-retries": "5"} (context
	// "runtimeConfig", an object). Keys the stack derives from its
	// resources cannot be set here.
	RuntimeConfig map[string]string
}

// Throttle is an API Gateway token bucket: a steady rate in requests per
// second and a burst (the bucket's size).
type Throttle struct {
	// RateLimit is the steady rate, in requests per second.
	RateLimit float64
	// BurstLimit is the burst.
	BurstLimit int
}

// Context keys read by SettingsFromContext.
const (
	CtxService               = "service"
	CtxStage                 = "stage"
	CtxPrefix                = "prefix"
	CtxDistDir               = "distDir"
	CtxRetain                = "retain"
	CtxDeletionProtection    = "deletionProtection"
	CtxLogRetentionDays      = "logRetentionDays"
	CtxMemoryMB              = "memoryMb"
	CtxSubmitTimeout         = "submitTimeoutSeconds"
	CtxWorkerTimeout         = "workerTimeoutSeconds"
	CtxLeaseMs               = "leaseMs"
	CtxSweeperTimeout        = "sweeperTimeoutSeconds"
	CtxDLQTimeout            = "dlqTimeoutSeconds"
	CtxWorkerBatchSize       = "workerBatchSize"
	CtxWorkerBatchingWindow  = "workerBatchingWindowSeconds"
	CtxWorkerMaxConcurrency  = "workerMaxConcurrency"
	CtxUrgentLane            = "urgentLane"
	CtxUrgentMaxConcurrency  = "urgentMaxConcurrency"
	CtxDLQBatchSize          = "dlqBatchSize"
	CtxDLQMaxConcurrency     = "dlqMaxConcurrency"
	CtxHistoryTimeout        = "historyTimeoutSeconds"
	CtxHistoryBatchSize      = "historyBatchSize"
	CtxHistoryBatchingWindow = "historyBatchingWindowSeconds"
	CtxReservedConcurrency   = "reservedConcurrency"
	CtxTracing               = "tracing"
	CtxSweeperRateMinutes    = "sweeperRateMinutes"
	CtxOldestMessageAlarm    = "oldestMessageAlarmSeconds"
	CtxAlarmEmail            = "alarmEmail"
	CtxJWTIssuer             = "jwtIssuer"
	CtxJWTAudience           = "jwtAudience"
	CtxJWTTenantClaim        = "jwtTenantClaim"
	CtxJWTRedriveScope       = "jwtRedriveScope"
	CtxThrottleRateLimit     = "throttleRateLimit"
	CtxThrottleBurstLimit    = "throttleBurstLimit"
	CtxAwaitThrottleRate     = "awaitThrottleRateLimit"
	CtxAwaitThrottleBurst    = "awaitThrottleBurstLimit"
	CtxAwaitWAF              = "awaitWaf"
	CtxAwaitWAFRateLimit     = "awaitWafRateLimit"
	CtxAwaitWAFWindow        = "awaitWafWindowSeconds"
	CtxTenantStages          = "tenantStages"
	CtxTenantSource          = "tenantSource"
	CtxDiagEnabled           = "diagEnabled"
	CtxMetricsNamespace      = "metricsNamespace"
	CtxEventTypes            = "eventTypes"
	CtxLogLevel              = "logLevel"
	CtxRuntimeConfig         = "runtimeConfig"
	CtxOutputBucket          = "outputBucket"
	defaultStage             = "dev"
	defaultDistDirFromCDKDir = "../../dist"
)

// DefaultService is the service name of this repository's own stack.
const DefaultService = "qasync"

// ContextKeys lists every context key SettingsFromContext reads.
var ContextKeys = []string{
	CtxService, CtxStage, CtxPrefix, CtxDistDir, CtxRetain, CtxDeletionProtection, CtxLogRetentionDays, CtxMemoryMB,
	CtxSubmitTimeout, CtxWorkerTimeout, CtxLeaseMs, CtxSweeperTimeout, CtxDLQTimeout,
	CtxWorkerBatchSize, CtxWorkerBatchingWindow, CtxWorkerMaxConcurrency, CtxUrgentLane, CtxUrgentMaxConcurrency, CtxDLQBatchSize, CtxDLQMaxConcurrency,
	CtxReservedConcurrency, CtxTracing, CtxSweeperRateMinutes, CtxOldestMessageAlarm, CtxAlarmEmail,
	CtxJWTIssuer, CtxJWTAudience, CtxJWTTenantClaim, CtxJWTRedriveScope,
	CtxThrottleRateLimit, CtxThrottleBurstLimit, CtxMetricsNamespace, CtxLogLevel, CtxRuntimeConfig,
	CtxOutputBucket, CtxAwaitThrottleRate, CtxAwaitThrottleBurst, CtxTenantSource, CtxDiagEnabled,
	CtxHistoryTimeout, CtxHistoryBatchSize, CtxHistoryBatchingWindow,
	CtxAwaitWAF, CtxAwaitWAFRateLimit, CtxAwaitWAFWindow, CtxTenantStages, CtxEventTypes,
}

// DefaultSettings returns the defaults of stage for this repository's
// service (DefaultServiceSettings of DefaultService).
func DefaultSettings(stage string) Settings { return DefaultServiceSettings(DefaultService, stage) }

// DefaultServiceSettings returns the defaults of stage for service: the
// stack <service>-<stage>, resources prefixed <service>-<stage>, metrics
// in namespace <service>/<stage>. Only "dev" lets CloudFormation destroy
// data: every other stage (prod in particular) retains tables, queues and
// log groups and turns on deletion protection. Only "dev" serves the
// diag.drill fault drill (diag.enabled), and only "dev" leaves the await
// completion route without its web ACL (AwaitWAF).
func DefaultServiceSettings(service, stage string) Settings {
	durable := stage != "dev"
	return Settings{
		Service:            service,
		Stage:              stage,
		Prefix:             service + "-" + stage,
		DistDir:            defaultDistDirFromCDKDir,
		Retain:             durable,
		DeletionProtection: durable,
		LogRetentionDays:   30,
		MemoryMB:           256,
		SubmitTimeout:      20 * time.Second,
		WorkerTimeout:      60 * time.Second,
		Lease:              30 * time.Second,
		SweeperTimeout:     60 * time.Second,
		DLQTimeout:         30 * time.Second,
		WorkerBatchSize:    10,
		UrgentLane:         true,
		DLQBatchSize:       10,
		HistoryTimeout:     60 * time.Second,
		HistoryBatchSize:   1000,
		// An execution's steps within the window share one page.
		HistoryBatchingWindow: 2 * time.Second,
		SweeperRate:           time.Minute,
		OldestMessageAlarm:    5 * time.Minute,
		JWTTenantClaim:        "tenant_id",
		JWTRedriveScope:       "qasync/redrive",
		ThrottleRateLimit:     100,
		ThrottleBurstLimit:    200,
		MetricsNamespace:      service + "/" + stage,
		EventTypes:            config.DefaultEventsTypes,
		LogLevel:              "info",
		DiagEnabled:           !durable,
		// The await completion route is the one route without an API
		// Gateway authorizer: a tenth of the stage's rate.
		AwaitThrottleRateLimit:  10,
		AwaitThrottleBurstLimit: 20,
		// One IP may send at most 100 completions a minute (1.7/s): a
		// sixth of the route's rate, so that no single caller can spend
		// it.
		AwaitWAF:          durable,
		AwaitWAFRateLimit: 100,
		AwaitWAFWindow:    time.Minute,
	}
}

// StackName is the CloudFormation stack name of s: <service>-<stage>.
func (s Settings) StackName() string { return s.Service + "-" + s.Stage }

// JWT reports whether a JWT authorizer is configured.
func (s Settings) JWT() bool { return s.JWTIssuer != "" && len(s.JWTAudience) > 0 }

// Tenant sources a stage may use (config key http.tenant-source).
const (
	TenantIAM        = "iam"
	TenantIAMAccount = "iam-account"
	TenantJWT        = "jwt"
)

// EffectiveTenantSource is the http.tenant-source the functions get:
// TenantSource when set, else jwt with a JWT authorizer and iam without.
func (s Settings) EffectiveTenantSource() string {
	switch {
	case s.TenantSource != "":
		return s.TenantSource
	case s.JWT():
		return TenantJWT
	}
	return TenantIAM
}

// SettingsFromContext reads the settings from node's context: the
// defaults of the service and stage the context names
// (DefaultServiceSettings; service qasync and stage dev when unset),
// overridden by each context key that is set. An app of another service
// gives its name as a context default (awscdk.AppProps.Context, which
// -c service=... still overrides).
// Values given with `-c key=value` arrive as strings, values from cdk.json
// or CDK_CONTEXT_JSON as JSON; both are accepted. A relative distDir is
// taken relative to baseDir. The result is validated.
func SettingsFromContext(node constructs.Node, baseDir string) (Settings, error) {
	get := func(key string) (any, bool) {
		v := node.TryGetContext(&key)
		if v == nil {
			return nil, false
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, false
		}
		return v, true
	}
	return settingsFrom(get, baseDir)
}

// settingsFrom builds settings from a context lookup.
func settingsFrom(get func(string) (any, bool), baseDir string) (Settings, error) {
	service, stage := DefaultService, defaultStage
	if v, ok := get(CtxService); ok {
		service = strings.TrimSpace(fmt.Sprint(v))
	}
	if v, ok := get(CtxStage); ok {
		stage = fmt.Sprint(v)
	}
	s := DefaultServiceSettings(service, stage)
	var errs []error
	try := func(key string, f func(v any) error) {
		if v, ok := get(key); ok {
			if err := f(v); err != nil {
				errs = append(errs, fmt.Errorf("context %q: %w", key, err))
			}
		}
	}
	str := func(p *string) func(any) error {
		return func(v any) error { *p = strings.TrimSpace(fmt.Sprint(v)); return nil }
	}
	integer := func(p *int) func(any) error {
		return func(v any) error { n, err := toInt(v); *p = n; return err }
	}
	seconds := func(p *time.Duration, unit time.Duration) func(any) error {
		return func(v any) error { n, err := toInt(v); *p = time.Duration(n) * unit; return err }
	}
	boolean := func(p *bool) func(any) error {
		return func(v any) error { b, err := toBool(v); *p = b; return err }
	}
	try(CtxPrefix, str(&s.Prefix))
	try(CtxDistDir, str(&s.DistDir))
	try(CtxRetain, boolean(&s.Retain))
	try(CtxDeletionProtection, boolean(&s.DeletionProtection))
	try(CtxLogRetentionDays, integer(&s.LogRetentionDays))
	try(CtxMemoryMB, integer(&s.MemoryMB))
	try(CtxSubmitTimeout, seconds(&s.SubmitTimeout, time.Second))
	try(CtxWorkerTimeout, seconds(&s.WorkerTimeout, time.Second))
	try(CtxLeaseMs, seconds(&s.Lease, time.Millisecond))
	try(CtxSweeperTimeout, seconds(&s.SweeperTimeout, time.Second))
	try(CtxDLQTimeout, seconds(&s.DLQTimeout, time.Second))
	try(CtxWorkerBatchSize, integer(&s.WorkerBatchSize))
	try(CtxWorkerBatchingWindow, seconds(&s.WorkerBatchingWindow, time.Second))
	try(CtxWorkerMaxConcurrency, integer(&s.WorkerMaxConcurrency))
	try(CtxUrgentLane, boolean(&s.UrgentLane))
	try(CtxUrgentMaxConcurrency, integer(&s.UrgentMaxConcurrency))
	try(CtxDLQBatchSize, integer(&s.DLQBatchSize))
	try(CtxDLQMaxConcurrency, integer(&s.DLQMaxConcurrency))
	try(CtxHistoryTimeout, seconds(&s.HistoryTimeout, time.Second))
	try(CtxHistoryBatchSize, integer(&s.HistoryBatchSize))
	try(CtxHistoryBatchingWindow, seconds(&s.HistoryBatchingWindow, time.Second))
	try(CtxReservedConcurrency, func(v any) error {
		m, err := toMap(v)
		if err != nil {
			return err
		}
		s.ReservedConcurrency = map[string]int{}
		for k, x := range m {
			n, err := toInt(x)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			s.ReservedConcurrency[k] = n
		}
		return nil
	})
	try(CtxTracing, boolean(&s.Tracing))
	try(CtxSweeperRateMinutes, seconds(&s.SweeperRate, time.Minute))
	try(CtxOldestMessageAlarm, seconds(&s.OldestMessageAlarm, time.Second))
	try(CtxAlarmEmail, str(&s.AlarmEmail))
	try(CtxJWTIssuer, str(&s.JWTIssuer))
	try(CtxJWTAudience, func(v any) error {
		s.JWTAudience = nil
		var items []any
		switch x := v.(type) {
		case []any:
			items = x
		default:
			for _, p := range strings.Split(fmt.Sprint(x), ",") {
				items = append(items, p)
			}
		}
		for _, it := range items {
			if a := strings.TrimSpace(fmt.Sprint(it)); a != "" {
				s.JWTAudience = append(s.JWTAudience, a)
			}
		}
		return nil
	})
	try(CtxJWTTenantClaim, str(&s.JWTTenantClaim))
	try(CtxJWTRedriveScope, str(&s.JWTRedriveScope))
	try(CtxThrottleRateLimit, func(v any) error {
		f, err := toFloat(v)
		s.ThrottleRateLimit = f
		return err
	})
	try(CtxThrottleBurstLimit, integer(&s.ThrottleBurstLimit))
	try(CtxAwaitThrottleRate, func(v any) error {
		f, err := toFloat(v)
		s.AwaitThrottleRateLimit = f
		return err
	})
	try(CtxAwaitThrottleBurst, integer(&s.AwaitThrottleBurstLimit))
	try(CtxAwaitWAF, boolean(&s.AwaitWAF))
	try(CtxAwaitWAFRateLimit, integer(&s.AwaitWAFRateLimit))
	try(CtxAwaitWAFWindow, seconds(&s.AwaitWAFWindow, time.Second))
	try(CtxTenantStages, func(v any) error {
		m, err := toMap(v)
		if err != nil {
			return err
		}
		s.TenantStages = map[string]Throttle{}
		for name, x := range m {
			t, err := toMap(x)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			var th Throttle
			for k, val := range t {
				switch k {
				case "rateLimit":
					th.RateLimit, err = toFloat(val)
				case "burstLimit":
					th.BurstLimit, err = toInt(val)
				default:
					err = fmt.Errorf("unknown field %q (want rateLimit and burstLimit)", k)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			s.TenantStages[name] = th
		}
		return nil
	})
	try(CtxTenantSource, func(v any) error { s.TenantSource = strings.ToLower(strings.TrimSpace(fmt.Sprint(v))); return nil })
	try(CtxDiagEnabled, boolean(&s.DiagEnabled))
	try(CtxMetricsNamespace, str(&s.MetricsNamespace))
	try(CtxEventTypes, func(v any) error { s.EventTypes = strings.ToUpper(strings.TrimSpace(fmt.Sprint(v))); return nil })
	try(CtxLogLevel, str(&s.LogLevel))
	try(CtxOutputBucket, boolean(&s.OutputBucket))
	try(CtxRuntimeConfig, func(v any) error {
		m, err := toMap(v)
		if err != nil {
			return err
		}
		s.RuntimeConfig = map[string]string{}
		for k, x := range m {
			s.RuntimeConfig[k] = fmt.Sprint(x)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	if !filepath.IsAbs(s.DistDir) && baseDir != "" {
		s.DistDir = filepath.Join(baseDir, s.DistDir)
	}
	return s, s.Validate()
}

func toInt(v any) (int, error) {
	f, err := toFloat(v)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<31 {
		return 0, fmt.Errorf("%v is not an integer", v)
	}
	return int(f), nil
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int:
		return float64(x), nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(fmt.Sprint(v)), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", fmt.Sprint(v))
	}
	return f, nil
}

func toBool(v any) (bool, error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(fmt.Sprint(v)))
	if err != nil {
		return false, fmt.Errorf("%q is not true or false", fmt.Sprint(v))
	}
	return b, nil
}

// toMap accepts a JSON object, or a string holding one (from -c).
func toMap(v any) (map[string]any, error) {
	if m, ok := v.(map[string]any); ok {
		return m, nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(fmt.Sprint(v)), &m); err != nil {
		return nil, fmt.Errorf("want a JSON object: %v", err)
	}
	return m, nil
}

var (
	// nameRE is the form of a stage and a service name (CloudFormation stack names are <service>-<stage>).
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)
	prefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,39}$`)
	// tenantStageRE is the form of a tenant stage's name: words of
	// lower-case letters and digits, each starting with a letter, joined
	// by '-', so that tenantStageID maps distinct names to distinct
	// logical ids.
	tenantStageRE = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z][a-z0-9]*)*$`)
)

// wafWindows are the evaluation windows of a WAF rate-based rule.
var wafWindows = []int{60, 120, 300, 600}

// logRetentionDays are the retention periods CloudWatch Logs accepts.
var logRetentionDays = []int{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// Validate checks the settings, naming the context key of each problem.
func (s Settings) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("context %q: "+format, append([]any{key}, args...)...))
	}
	if !nameRE.MatchString(s.Service) {
		bad(CtxService, "%q must be 1-20 lower-case letters, digits or '-', starting with a letter", s.Service)
	}
	if !nameRE.MatchString(s.Stage) {
		bad(CtxStage, "%q must be 1-20 lower-case letters, digits or '-', starting with a letter", s.Stage)
	}
	if !prefixRE.MatchString(s.Prefix) {
		bad(CtxPrefix, "%q must be 1-40 letters, digits or '-', starting with a letter", s.Prefix)
	}
	if s.DistDir == "" {
		bad(CtxDistDir, "must not be empty")
	}
	if !containsInt(logRetentionDays, s.LogRetentionDays) {
		bad(CtxLogRetentionDays, "%d is not a CloudWatch Logs retention (one of %v)", s.LogRetentionDays, logRetentionDays)
	}
	if s.MemoryMB < 128 || s.MemoryMB > 10240 {
		bad(CtxMemoryMB, "%d must be between 128 and 10240", s.MemoryMB)
	}
	for key, d := range map[string]time.Duration{CtxSubmitTimeout: s.SubmitTimeout, CtxSweeperTimeout: s.SweeperTimeout, CtxDLQTimeout: s.DLQTimeout,
		CtxWorkerTimeout: s.WorkerTimeout, CtxHistoryTimeout: s.HistoryTimeout} {
		if d < time.Second || d > 15*time.Minute {
			bad(key, "%v must be between 1s and 15m", d)
		}
	}
	if s.SubmitTimeout > 29*time.Second {
		bad(CtxSubmitTimeout, "%v exceeds what API Gateway waits for an integration (29s is the useful maximum)", s.SubmitTimeout)
	}
	if s.Lease < 100*time.Millisecond {
		bad(CtxLeaseMs, "%d must be at least 100", s.Lease.Milliseconds())
	}
	if s.Lease >= s.WorkerTimeout {
		bad(CtxLeaseMs, "lease %v must be shorter than the worker timeout %v: the worker starts a record only with at least the lease left", s.Lease, s.WorkerTimeout)
	}
	for key, n := range map[string]int{CtxWorkerBatchSize: s.WorkerBatchSize, CtxDLQBatchSize: s.DLQBatchSize} {
		if n < 1 || n > 10 {
			bad(key, "%d must be between 1 and 10", n)
		}
	}
	if s.WorkerBatchingWindow < 0 || s.WorkerBatchingWindow > 5*time.Minute {
		bad(CtxWorkerBatchingWindow, "%v must be between 0 and 300 seconds", s.WorkerBatchingWindow)
	}
	if s.HistoryBatchSize < 1 || s.HistoryBatchSize > 10000 {
		bad(CtxHistoryBatchSize, "%d must be between 1 and 10000", s.HistoryBatchSize)
	}
	if s.HistoryBatchingWindow < 0 || s.HistoryBatchingWindow > 5*time.Minute {
		bad(CtxHistoryBatchingWindow, "%v must be between 0 and 300 seconds", s.HistoryBatchingWindow)
	}
	for key, n := range map[string]int{CtxWorkerMaxConcurrency: s.WorkerMaxConcurrency, CtxUrgentMaxConcurrency: s.UrgentMaxConcurrency, CtxDLQMaxConcurrency: s.DLQMaxConcurrency} {
		if n != 0 && (n < 2 || n > 1000) {
			bad(key, "%d must be 0 (no cap) or between 2 and 1000", n)
		}
	}
	for fn, n := range s.ReservedConcurrency {
		if !containsString(FunctionNames, fn) {
			bad(CtxReservedConcurrency, "unknown function %q (want one of %v)", fn, FunctionNames)
		} else if n < 0 {
			bad(CtxReservedConcurrency, "%s: %d must be at least 0", fn, n)
		}
	}
	if s.SweeperRate < time.Minute || s.SweeperRate%time.Minute != 0 {
		bad(CtxSweeperRateMinutes, "%v must be a whole number of minutes, at least 1", s.SweeperRate)
	}
	if s.OldestMessageAlarm < time.Minute {
		bad(CtxOldestMessageAlarm, "%v must be at least 60 seconds", s.OldestMessageAlarm)
	}
	if s.AlarmEmail != "" && !strings.Contains(s.AlarmEmail, "@") {
		bad(CtxAlarmEmail, "%q is not an email address", s.AlarmEmail)
	}
	if (s.JWTIssuer == "") != (len(s.JWTAudience) == 0) {
		bad(CtxJWTIssuer, "jwtIssuer and jwtAudience must be set together")
	}
	if s.JWTIssuer != "" && !strings.HasPrefix(s.JWTIssuer, "https://") {
		bad(CtxJWTIssuer, "%q must be an https:// URL", s.JWTIssuer)
	}
	if s.JWT() && (s.JWTTenantClaim == "" || s.JWTRedriveScope == "") {
		bad(CtxJWTTenantClaim, "jwtTenantClaim and jwtRedriveScope must not be empty with a JWT authorizer")
	}
	if s.ThrottleRateLimit <= 0 || s.ThrottleBurstLimit < 1 {
		bad(CtxThrottleRateLimit, "throttle rate %v and burst %d must be positive", s.ThrottleRateLimit, s.ThrottleBurstLimit)
	}
	if s.AwaitThrottleRateLimit <= 0 || s.AwaitThrottleBurstLimit < 1 {
		bad(CtxAwaitThrottleRate, "await route throttle rate %v and burst %d must be positive", s.AwaitThrottleRateLimit, s.AwaitThrottleBurstLimit)
	}
	if s.AwaitThrottleRateLimit > s.ThrottleRateLimit {
		bad(CtxAwaitThrottleRate, "%v exceeds the stage's throttleRateLimit %v: the unauthenticated await route must not be allowed more than the rest", s.AwaitThrottleRateLimit, s.ThrottleRateLimit)
	}
	if s.AwaitThrottleBurstLimit > s.ThrottleBurstLimit {
		bad(CtxAwaitThrottleBurst, "%d exceeds the stage's throttleBurstLimit %d: the unauthenticated await route must not be allowed more than the rest", s.AwaitThrottleBurstLimit, s.ThrottleBurstLimit)
	}
	if s.AwaitWAFRateLimit < 10 || s.AwaitWAFRateLimit > 2_000_000_000 {
		bad(CtxAwaitWAFRateLimit, "%d must be between 10 (WAF's minimum) and 2000000000", s.AwaitWAFRateLimit)
	}
	if s.AwaitWAFWindow%time.Second != 0 || !containsInt(wafWindows, int(s.AwaitWAFWindow/time.Second)) {
		bad(CtxAwaitWAFWindow, "%v is not a window WAF offers (one of %v seconds)", s.AwaitWAFWindow, wafWindows)
	}
	for _, name := range sortedKeys(s.TenantStages) {
		th := s.TenantStages[name]
		if len(name) > 30 || !tenantStageRE.MatchString(name) {
			bad(CtxTenantStages, "%q must be at most 30 lower-case letters and digits, in words joined by '-' that each start with a letter", name)
		}
		if th.RateLimit <= 0 || th.BurstLimit < 1 {
			bad(CtxTenantStages, "%s: throttle rate %v and burst %d must be positive", name, th.RateLimit, th.BurstLimit)
		}
	}
	if len(s.TenantStages) > 0 && s.JWT() {
		bad(CtxTenantStages, "tenant stages need IAM authorization: with a JWT authorizer (jwtIssuer) a tenant's token is accepted on every stage, so a stage would bind no tenant")
	}
	switch s.TenantSource {
	case "", TenantIAM, TenantIAMAccount:
		if s.TenantSource != "" && s.JWT() {
			bad(CtxTenantSource, "%q needs IAM authorization, but the tenant routes use the JWT authorizer (jwtIssuer): use jwt or leave it unset", s.TenantSource)
		}
	case TenantJWT:
		if !s.JWT() {
			bad(CtxTenantSource, "jwt needs a JWT authorizer: set jwtIssuer and jwtAudience")
		}
	case "header":
		bad(CtxTenantSource, "header is refused in every stage: any caller can send X-Tenant-Id and so act as any tenant; use iam (one tenant per IAM role or user), iam-account or a JWT authorizer")
	case "none":
		bad(CtxTenantSource, "none is refused: it puts every caller into one tenant; use iam-account for one tenant per AWS account")
	default:
		bad(CtxTenantSource, "%q must be iam, iam-account or jwt", s.TenantSource)
	}
	if s.MetricsNamespace == "" {
		bad(CtxMetricsNamespace, "must not be empty")
	}
	if s.EventTypes != "" && s.EventTypes != "NONE" {
		for name := range strings.SplitSeq(s.EventTypes, ",") {
			if !slices.Contains(config.EventTypeNames, strings.TrimSpace(name)) {
				bad(CtxEventTypes, "%q is no lifecycle event type (%s, or none)", strings.TrimSpace(name), strings.Join(config.EventTypeNames, ", "))
			}
		}
	}
	if _, ok := lambdaLogLevels[s.LogLevel]; !ok {
		bad(CtxLogLevel, "%q must be debug, info, warn or error", s.LogLevel)
	}
	keys := make([]string, 0, len(s.RuntimeConfig))
	for k := range s.RuntimeConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		short := config.ShortKey(k)
		if _, derived := derivedKeys[short]; derived || (short == keyOutputBucket && s.OutputBucket) {
			if ctx, ok := derivedFromContext[short]; ok {
				bad(CtxRuntimeConfig, "%q is set by the stack from its settings: use context %q", k, ctx)
			} else {
				bad(CtxRuntimeConfig, "%q is set by the stack from its resources and settings", k)
			}
		}
		if isTestOnly(short) && s.Stage != "dev" {
			bad(CtxRuntimeConfig, "%q is a test-only (fault injection) key: allowed in stage dev only", k)
		}
	}
	return errors.Join(errs...)
}

// TracesToXRay reports whether the functions export their spans to the
// X-Ray OTLP endpoint: runtimeConfig sets tracing.exporter to xray
// (docs/tracing.md). Their roles then get xray:PutSpans.
func (s Settings) TracesToXRay() bool {
	for k, v := range s.RuntimeConfig {
		if config.ShortKey(k) == keyTracingExporter && strings.EqualFold(strings.TrimSpace(v), "xray") {
			return true
		}
	}
	return false
}

// testOnlyKeyPrefixes mark configuration keys meant for chaos and crash
// tests and dev drills, never for production: the processes read them
// from their environment alone (the qasync module's internal/testkeys),
// outside shared/config's table.
var testOnlyKeyPrefixes = []string{"faults.", "diag."}

// isTestOnly reports whether short names a test-only key.
func isTestOnly(short string) bool {
	for _, p := range testOnlyKeyPrefixes {
		if strings.HasPrefix(short, p) {
			return true
		}
	}
	return false
}

// VisibilityFor is the visibility timeout a queue consumed by a Lambda
// function with the given timeout gets: six times the timeout, as AWS
// recommends for SQS event sources, so that a batch retried after a
// throttle or a crash is not delivered again while still being processed.
func VisibilityFor(functionTimeout time.Duration) time.Duration { return 6 * functionTimeout }

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
