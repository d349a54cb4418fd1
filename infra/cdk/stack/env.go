package stack

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/qasync/qasync/shared/config"
)

// Configuration keys (short names, see config.FullKey) the stack sets from its
// resources and settings.
const (
	keyStateProvider      = "state-provider"
	keyDispatcherProvider = "dispatcher-provider"
	keyDLQProvider        = "dlq-provider"
	keyIdempotencyPolicy  = "idempotency-policy"
	keyStrictStartup      = "strict-startup"
	keyLease              = "lease-ms"
	keyQueueURL           = "queue-url"
	keyDLQURL             = "dlq-url"
	keyUrgentURL          = "queue.urgent-url"
	keyExecutionTable     = "dynamo.execution-table"
	keyPayloadTable       = "dynamo.execution-payload-table"
	keyDeadLetterTable    = "dynamo.dead-letter-table"
	keyEffectTable        = "dynamo.effect-table"
	keyHistoryTable       = "dynamo.history-table"
	// keyHistoryPoller and keyHistoryPollInterval configure qasync
	// serve's own stream poller, which no function runs (in AWS the
	// history function's event source mapping reads the stream): no
	// function gets them (ExcludedEnv), which also keeps the functions'
	// environment within Lambda's 4 KB.
	keyHistoryPoller       = "history.stream-poller"
	keyHistoryPollInterval = "history.poll-interval"
	// keyEmbeddedDataDir is the embedded store's directory, which the
	// functions never use (they refuse state-provider embedded): no
	// function gets it either.
	keyEmbeddedDataDir = "embedded.data-dir"
	keyEventsBus       = "events.bus-name"
	// keyEventsTypes follows Settings.EventTypes; keyEventsSink is always
	// eventbridge (the stack's bus).
	keyEventsTypes      = "events.types"
	keyEventsSink       = "events.sink"
	keyMetricsNamespace = "metrics.namespace"
	keyTracingExporter  = "tracing.exporter"
	keyTenantSource     = "http.tenant-source"
	keyTenantClaim      = "http.tenant-claim"
	// keyAllowHeaderTenant stays false: no stage takes the tenant from
	// the X-Tenant-Id header (Settings.Validate refuses tenant-source
	// header), so runtimeConfig may not turn it on either.
	keyAllowHeaderTenant = "http.allow-header-tenant"
	// keyDiagEnabled serves the diag.drill fault drill: on in dev, off
	// elsewhere (Settings.DiagEnabled, context diagEnabled).
	keyDiagEnabled    = "diag.enabled"
	keySQSVisibility  = "sqs.visibility-timeout"
	keyLogLevel       = "log-level"
	keySweepInterval  = "sweep-interval"
	keyRejectProvider = "item-reject.provider"
	keyRejectQueueURL = "item-reject.queue-url"
	// keyAdminToken is never passed to a function: a secret does not
	// belong in a Lambda environment (anyone who can read the function's
	// configuration reads it), and API Gateway's IAM (or JWT scope)
	// authorization of the redrive route takes the bearer token's place.
	keyAdminToken      = "admin.token"
	keyRedriveUpstream = "admin.redrive-authorized-upstream"
	// keyResumeTokenSecret is never passed either: the functions that
	// sign or verify resume tokens get keyResumeTokenSecretARN, the ARN
	// of the stack's Secrets Manager secret, and fetch the value at boot.
	keyResumeTokenSecret    = "await.resume-token-secret"
	keyResumeTokenSecretARN = "await.resume-token-secret-arn"
	// keyOutputBucket is the output bucket's name, set when the stack
	// creates one (Settings.OutputBucket); otherwise runtimeConfig may
	// name a bucket of your own.
	keyOutputBucket = "output.bucket"
)

// derivedKeys are the keys Settings.RuntimeConfig may not set.
var derivedKeys = map[string]struct{}{
	keyStateProvider: {}, keyDispatcherProvider: {}, keyDLQProvider: {}, keyIdempotencyPolicy: {},
	keyStrictStartup: {}, keyLease: {}, keyQueueURL: {}, keyUrgentURL: {}, keyDLQURL: {}, keyExecutionTable: {},
	keyPayloadTable: {}, keyDeadLetterTable: {}, keyEffectTable: {}, keyHistoryTable: {}, keyHistoryPoller: {}, keyHistoryPollInterval: {}, keyEmbeddedDataDir: {}, keyEventsBus: {}, keyMetricsNamespace: {},
	keyEventsTypes: {}, keyEventsSink: {},
	keyTenantSource: {}, keyTenantClaim: {}, keySQSVisibility: {}, keyLogLevel: {}, keySweepInterval: {},
	keyAdminToken: {}, keyRejectProvider: {}, keyRejectQueueURL: {},
	keyResumeTokenSecret: {}, keyResumeTokenSecretARN: {}, keyAllowHeaderTenant: {}, keyDiagEnabled: {},
}

// derivedFromContext names, for the derived keys that follow a setting,
// the context key to use instead of runtimeConfig.
var derivedFromContext = map[string]string{
	keyLease: CtxLeaseMs, keyMetricsNamespace: CtxMetricsNamespace, keyLogLevel: CtxLogLevel,
	keySweepInterval: CtxSweeperRateMinutes, keyTenantSource: CtxTenantSource, keyTenantClaim: CtxJWTTenantClaim,
	keyDiagEnabled: CtxDiagEnabled, keyEventsTypes: CtxEventTypes,
}

// ExcludedEnv lists the environment variables of configuration keys that
// no function gets: the secrets, the admin token (see docs/deployment.md's IAM
// section) and the await resume-token secret's value (its ARN is passed),
// and the settings only qasync serve uses: its history stream poller, the
// embedded store's directory, its HTTP server's timeouts and its SQS
// poller's long-poll wait.
var ExcludedEnv = []string{config.EnvName(config.FullKey(keyAdminToken)), config.EnvName(config.FullKey(keyResumeTokenSecret)),
	config.EnvName(config.FullKey(keyHistoryPoller)), config.EnvName(config.FullKey(keyHistoryPollInterval)),
	config.EnvName(config.FullKey(keyEmbeddedDataDir)),
	// qasync serve's own HTTP server and SQS poller, which no function
	// runs (API Gateway and the event source mappings stand in for them):
	// leaving them out keeps the functions' environment within Lambda's
	// 4 KB with the urgent lane's queue URL.
	config.EnvName(config.FullKey("sqs.wait-seconds")), config.EnvName(config.FullKey("http.read-header-timeout")),
	config.EnvName(config.FullKey("http.read-timeout")), config.EnvName(config.FullKey("http.write-timeout")),
	config.EnvName(config.FullKey("http.idle-timeout"))}

// Resources are the deployed names and URLs a function's environment is
// built from (CloudFormation tokens at synthesis).
type Resources struct {
	// ExecutionTable is the execution table's name.
	ExecutionTable string
	// PayloadTable is the payload chunk table's name.
	PayloadTable string
	// DeadLetterTable is the dead-letter record table's name.
	DeadLetterTable string
	// EffectTable is the command steps' effect log table's name.
	EffectTable string
	// HistoryTable is the execution history table's name.
	HistoryTable string
	// QueueURL is the work queue's URL.
	QueueURL string
	// UrgentQueueURL is the urgent work queue's URL ("" without the
	// urgent lane: Settings.UrgentLane).
	UrgentQueueURL string
	// DLQURL is the DLQ queue's URL.
	DLQURL string
	// RejectQueueURL is the item reject queue's URL.
	RejectQueueURL string
	// EventBus is the lifecycle bus name ("" for functions that publish no
	// lifecycle events: all but the history function, which derives them
	// from the execution table's stream).
	EventBus string
	// ResumeTokenSecretARN is the ARN of the await resume-token secret
	// ("" for functions that neither sign nor verify resume tokens).
	ResumeTokenSecretARN string
	// OutputBucket is the output bucket's name ("" without one: the key
	// keeps its default, or runtimeConfig's value).
	OutputBucket string
}

// Environment returns the environment of a function: every configuration
// key of config.Keys() except ExcludedEnv, each set to its default unless
// the stack derives it from r and s or s.RuntimeConfig sets it, and the
// test-only keys (faults.*, diag.*) the stack derives or s.RuntimeConfig
// sets. It fails when another key it sets is unknown to the config
// package, or when config.Load refuses the result (the function would
// fail to boot).
func Environment(s Settings, r Resources) (map[string]string, error) {
	env := map[string]string{}
	known := map[string]bool{}
	for _, k := range config.Keys() {
		known[k.Flag] = true
		env[k.Env] = k.Default
	}
	for _, e := range ExcludedEnv {
		delete(env, e)
	}
	tenantSource, tenantClaim := s.EffectiveTenantSource(), s.JWTTenantClaim
	if tenantSource == "header" || tenantSource == "none" {
		// Validate refuses both; never deploy one even if it was skipped.
		return nil, fmt.Errorf("stack: context %q: http.tenant-source %s is refused in every stage", CtxTenantSource, tenantSource)
	}
	derived := map[string]string{
		keyStateProvider:      "dynamo",
		keyDispatcherProvider: "sqs",
		keyDLQProvider:        "sqs",
		keyIdempotencyPolicy:  "CLIENT_KEY_REQUIRED",
		keyStrictStartup:      "true",
		keyLease:              strconv.FormatInt(s.Lease.Milliseconds(), 10),
		keyQueueURL:           r.QueueURL,
		keyUrgentURL:          r.UrgentQueueURL,
		keyDLQURL:             r.DLQURL,
		keyExecutionTable:     r.ExecutionTable,
		keyPayloadTable:       r.PayloadTable,
		keyDeadLetterTable:    r.DeadLetterTable,
		keyEffectTable:        r.EffectTable,
		keyHistoryTable:       r.HistoryTable,
		keyEventsBus:          r.EventBus,
		keyEventsTypes:        s.EventTypes,
		keyEventsSink:         "eventbridge",
		keyMetricsNamespace:   s.MetricsNamespace,
		keyTenantSource:       tenantSource,
		keyTenantClaim:        tenantClaim,
		keyAllowHeaderTenant:  "false",
		keyDiagEnabled:        strconv.FormatBool(s.DiagEnabled),
		keySQSVisibility:      VisibilityFor(s.WorkerTimeout).String(),
		keyLogLevel:           s.LogLevel,
		keySweepInterval:      s.SweeperRate.String(),
		keyRejectProvider:     "sqs",
		keyRejectQueueURL:     r.RejectQueueURL,
		// The redrive route has its own IAM permission (or JWT scope) at
		// the gateway; a SigV4 request cannot also carry a bearer token.
		keyRedriveUpstream:      "true",
		keyResumeTokenSecretARN: r.ResumeTokenSecretARN,
	}
	if r.OutputBucket != "" {
		derived[keyOutputBucket] = r.OutputBucket
	}
	// The test-only keys (faults.*, diag.*) are no part of shared/config's
	// table: the processes read them from their environment alone
	// (Validate allows them in stage dev only).
	for k := range derived {
		if isTestOnly(k) {
			known[k] = true
		}
	}
	for k := range s.RuntimeConfig {
		if isTestOnly(config.ShortKey(k)) {
			known[config.ShortKey(k)] = true
		}
	}
	var unknown []string
	for k, v := range derived {
		if !known[k] {
			unknown = append(unknown, k)
		}
		env[config.EnvName(config.FullKey(k))] = v
	}
	for k, v := range s.RuntimeConfig {
		k = config.ShortKey(k)
		if !known[k] {
			unknown = append(unknown, k)
		}
		env[config.EnvName(config.FullKey(k))] = v
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("stack: configuration keys unknown to shared/config: %s", strings.Join(unknown, ", "))
	}
	if _, _, err := config.Load(func(name string) (string, bool) { v, ok := env[name]; return v, ok }, nil); err != nil {
		return nil, fmt.Errorf("stack: the functions' environment would not boot: %w", err)
	}
	return env, nil
}
