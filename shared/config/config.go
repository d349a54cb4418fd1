// Package config holds the runtime's configuration: defaults, then the
// environment, then command-line flags on top.
//
// Every setting has a key under KeyPrefix ("pipeline.orchestrator."), or
// for the Item Reject Sink under ItemRejectPrefix ("pipeline.item-reject.").
// Its environment variable is EnvName(key) (PIPELINE_ORCHESTRATOR_LEASE_MS,
// PIPELINE_ITEM_REJECT_PROVIDER) and its flag is its short name, the key
// without "pipeline.orchestrator." (--lease-ms) or without "pipeline."
// (--item-reject.provider); see FullKey and ShortKey. A single table of
// keys drives loading, validation, String, LogValue and the documentation
// (Keys, MarkdownTable), so a key is defined exactly once.
//
// Durations accept Go syntax (250ms, 1m30s) and ISO-8601 (PT10S, P1D); see
// ParseDuration. The admin token is a secret: String, LogValue and every fmt
// verb print only whether it is set.
package config

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/schema"
)

// KeyPrefix prefixes every configuration key of the orchestrator.
const KeyPrefix = "pipeline.orchestrator."

// ItemRejectPrefix prefixes the keys of the Item Reject Sink, the
// step-level recover-and-continue failure channel. Their short names
// (flags, Settings) keep "item-reject." (--item-reject.provider).
const ItemRejectPrefix = "pipeline.item-reject."

// itemRejectShort is the short-name form of ItemRejectPrefix.
const itemRejectShort = "item-reject."

// FullKey returns the full key of a short name: "lease-ms" is
// pipeline.orchestrator.lease-ms, "item-reject.provider" is
// pipeline.item-reject.provider.
func FullKey(short string) string {
	if rest, ok := strings.CutPrefix(short, itemRejectShort); ok {
		return ItemRejectPrefix + rest
	}
	return KeyPrefix + short
}

// ShortKey is FullKey's inverse: the key's flag name.
func ShortKey(full string) string {
	if rest, ok := strings.CutPrefix(full, ItemRejectPrefix); ok {
		return itemRejectShort + rest
	}
	return strings.TrimPrefix(full, KeyPrefix)
}

// Config is the runtime configuration. Build one with Default or Load; each
// field's comment names its key (under KeyPrefix) and default. Enumerated
// values are stored in the canonical case shown; Load normalizes input.
type Config struct {
	// Mode is key "mode", default QUEUE_ASYNC, the only supported mode.
	Mode string
	// StateProvider is key "state-provider": embedded (default: every
	// seam durable in the data directory EmbeddedDataDir), memory (not
	// durable: tests and throwaway runs) or dynamo.
	StateProvider string
	// DispatcherProvider is key "dispatcher-provider": embedded (the
	// embedded store's durable queue), event (an in-process worker pool)
	// or sqs; empty (default) means embedded with state-provider embedded
	// and event otherwise (Load fills it in: see ResolveProviders).
	DispatcherProvider string
	// DLQProvider is key "dlq-provider": embedded (recorded in the
	// embedded store), log or sqs; empty (default) means embedded with
	// state-provider embedded and log otherwise.
	DLQProvider string
	// EmbeddedDataDir is key "embedded.data-dir" (flag alias --data-dir),
	// default .qasync: the embedded store's data directory, relative to
	// the working directory.
	EmbeddedDataDir string
	// IdempotencyPolicy is key "idempotency-policy": OPTIONAL_CLIENT_KEY
	// (default), CLIENT_KEY_REQUIRED or SERVER_KEY_ONLY.
	IdempotencyPolicy string
	// StrictStartup is key "strict-startup", default false. When true,
	// startup refuses a provider whose backing resources cannot be verified
	// and a durable mode that keeps the non-durable default
	// OPTIONAL_CLIENT_KEY idempotency policy.
	StrictStartup bool
	// Lease is key "lease-ms" (integer milliseconds), default 30000, at
	// least 100.
	Lease time.Duration
	// MaxRetries is key "max-retries", default 3, at least 0.
	MaxRetries int
	// RetryDelay is key "retry-delay", default 1s, greater than 0.
	RetryDelay time.Duration
	// RetryMultiplier is key "retry-multiplier", default 2, at least 1.
	RetryMultiplier float64
	// RetryMaxDelay is key "retry-max-delay", default 5m, at least RetryDelay.
	RetryMaxDelay time.Duration
	// SweepInterval is key "sweep-interval", default 1s, greater than 0.
	SweepInterval time.Duration
	// SweepLimit is key "sweep-limit", default 100, between 1 and 10000.
	SweepLimit int
	// SweepGrace is key "sweep-grace", default 10s, at least 0: how long a
	// due row may wait for its queued work item before the sweeper
	// re-dispatches it.
	SweepGrace time.Duration
	// ExecutionTTLDays is key "execution-ttl-days", default 30, at least 1.
	ExecutionTTLDays int
	// WorkerConcurrency is key "worker-concurrency", default 8, between 1
	// and 1024: workers of the in-process event dispatcher.
	WorkerConcurrency int
	// InlineBudgetBytes is key "payload.inline-budget-bytes", default 256,
	// between 0 and 196608 (192 KiB, so two inline payloads fit a DynamoDB
	// 400 KiB row). The default keeps a row with its input and its latest
	// step output under 1 KB, so each step's write costs one write unit;
	// larger payloads are written once to the payload table.
	InlineBudgetBytes int
	// AdminToken is key "admin.token", default empty, which disables the
	// operator routes (re-drive, cancel, bulk re-drive). Strict startup
	// refuses one shorter than MinAdminTokenLength (Check warns of it
	// otherwise). It is never printed or marshaled.
	AdminToken string `json:"-"`
	// AwaitResumeTokenSecret is key "await.resume-token-secret", default
	// empty, which disables await steps (they fail with
	// await_resume_token_secret_missing) and their completion route. It
	// keys the HMAC of resume tokens and is never printed or marshaled.
	AwaitResumeTokenSecret string `json:"-"`
	// AwaitResumeTokenSecretARN is key "await.resume-token-secret-arn",
	// default empty: a Secrets Manager secret whose value the Lambda
	// functions (lambdafn.Boot) and qasync serve fetch once at startup and
	// use as AwaitResumeTokenSecret when that key is empty. The ARN itself
	// is no secret.
	AwaitResumeTokenSecretARN string
	// OutputBucket is key "output.bucket", default empty: the S3 bucket
	// that the {outputBucket} placeholder of pipelines' Output.To names.
	OutputBucket string
	// RedriveAuthorizedUpstream is key "admin.redrive-authorized-upstream",
	// default false: the submit function behind API Gateway serves the
	// operator routes (re-drive, cancel, bulk re-drive) without
	// admin.token, because the gateway authorizes each on its own (IAM or a
	// JWT scope). `qasync serve` refuses it.
	RedriveAuthorizedUpstream bool
	// HTTPAddr is key "http.addr" (flag alias --addr), default
	// 127.0.0.1:8080.
	HTTPAddr string
	// MaxBodyBytes is key "http.max-body-bytes", default 6291456 (6 MiB),
	// between 1 and 67108864 (64 MiB).
	MaxBodyBytes int64
	// HTTPReadHeaderTimeout is key "http.read-header-timeout", default
	// 10s, 1ms to 10m: how long qasync serve waits for a request's headers.
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout is key "http.read-timeout", default 1m, 1ms to 1h:
	// how long qasync serve waits for a whole request, body included. The
	// default lets a 6 MiB body (the default http.max-body-bytes) arrive
	// at 0.1 MiB/s; raise it with the body limit.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout is key "http.write-timeout", default 90s, at least
	// http.read-timeout and at most 1h: how long qasync serve may take
	// from the end of a request's headers to the end of its response.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout is key "http.idle-timeout", default 2m, 1ms to 1h:
	// how long qasync serve keeps an idle keep-alive connection open.
	HTTPIdleTimeout time.Duration
	// TenantSource is key "http.tenant-source": header (default; the
	// X-Tenant-Id header, else tenant "default"; development only: strict
	// startup refuses it, and so do Lambda and qasync serve on an address
	// beyond loopback without AllowHeaderTenant),
	// none (always "default"), iam (the API Gateway IAM caller's role or
	// user), iam-account (the IAM caller's account) or jwt (TenantClaim).
	TenantSource string
	// QueueURL is key "queue-url", default empty; required when
	// DispatcherProvider is sqs.
	QueueURL string
	// DLQURL is key "dlq-url", default empty; required when DLQProvider is
	// sqs.
	DLQURL string
	// LogLevel is key "log-level": debug, info (default), warn or error.
	LogLevel string
	// ExecutionTable is key "dynamo.execution-table", default
	// qasync-executions.
	ExecutionTable string
	// PayloadTable is key "dynamo.execution-payload-table", default
	// qasync-execution-payloads.
	PayloadTable string
	// CapacityStepsPerSecond is key "dynamo.capacity-steps-per-second",
	// default 1000, 1 to 1,000,000: the step rate the DynamoDB layout is
	// sized for: the sweep and list indexes spread over
	// schema.DueShardsFor of it partition key values. Raising it spreads
	// new executions wider; lowering it is safe too (the table records the
	// largest count rows were written with, and readers use that).
	CapacityStepsPerSecond int
	// SQSWaitSeconds is key "sqs.wait-seconds", default 20, between 1 and
	// 20: the work queue poller's long-poll wait. Zero is refused: short
	// polling an idle queue would send requests back to back.
	SQSWaitSeconds int
	// DeadLetterTable is key "dynamo.dead-letter-table", default
	// qasync-dead-letters: the dead-letter consumer's records.
	DeadLetterTable string
	// EffectTable is key "dynamo.effect-table", default qasync-effects:
	// the effect log of command steps.
	EffectTable string
	// HistoryTable is key "dynamo.history-table", default
	// qasync-execution-history: executions' histories, fed from the
	// execution table's stream.
	HistoryTable string
	// HistoryStreamPoller is key "history.stream-poller", default true:
	// qasync serve with state-provider dynamo reads the execution table's
	// stream into the history table itself. Turn it off where another
	// consumer (the history Lambda function) does.
	HistoryStreamPoller bool
	// HistoryPollInterval is key "history.poll-interval", default 1s,
	// 100ms to 1m: how long the stream poller waits before reading a
	// shard again that had no new records, and after a pass that applied
	// records without a backlog: its batching window, so that an
	// execution's writes make about one history page, not one per write.
	HistoryPollInterval time.Duration
	// EventsBusName is key "events.bus-name", default empty (off): the
	// EventBridge bus that receives terminal lifecycle events.
	EventsBusName string
	// EventsTypes is key "events.types", default
	// SUCCEEDED,DEAD_LETTERED,REJECTED,OUTCOME_UNKNOWN,CANCELLED: the
	// lifecycle event types published (a comma-separated list of history
	// event types and REJECTED; none: none is written or published).
	EventsTypes string
	// EventsSink is key "events.sink", default eventbridge: where
	// lifecycle events go, eventbridge (the bus of events.bus-name; off
	// without one) or log (qasync serve's log, for local runs).
	EventsSink string
	// TenantClaim is key "http.tenant-claim", default tenant_id: the JWT
	// claim naming the tenant when TenantSource is jwt.
	TenantClaim string
	// MetricsNamespace is key "metrics.namespace", default empty (off): when
	// set, metrics are written to stdout in CloudWatch Embedded Metric
	// Format under this namespace.
	MetricsNamespace string
	// TracingExporter is key "tracing.exporter", default none (off): otlp
	// sends OpenTelemetry spans of submits, queue hops, step attempts and
	// commits to TracingEndpoint, xray to the region's AWS X-Ray OTLP
	// endpoint, SigV4-signed (docs/tracing.md).
	TracingExporter string
	// TracingEndpoint is key "tracing.endpoint", default empty: the
	// OTLP/HTTP endpoint URL of tracing.exporter otlp; empty uses the
	// OpenTelemetry environment (OTEL_EXPORTER_OTLP_ENDPOINT, else a
	// collector on localhost:4318); with xray, empty is the region's X-Ray
	// endpoint.
	TracingEndpoint string
	// TracingHeaders is key "tracing.headers", default empty: headers
	// sent with every export (key1=value1,key2=value2, values
	// URL-encoded), a vendor's API key. A secret: never printed.
	TracingHeaders string `json:"-"`
	// TracingCompression is key "tracing.compression", default none: gzip
	// compresses the export requests.
	TracingCompression string
	// TracingSampleRatio is key "tracing.sample-ratio", default 1, 0 to 1:
	// the share of new traces recorded (a span with a parent follows its
	// parent's decision).
	TracingSampleRatio float64
	// SQSVisibility is key "sqs.visibility-timeout", default 60s: how long
	// a received work item stays hidden; the poller extends it while a
	// transition runs.
	SQSVisibility time.Duration
	// AllowHeaderTenant is key "http.allow-header-tenant", default false:
	// lets a Lambda deployment, or qasync serve on an address beyond
	// loopback (CheckListener), take the tenant from the X-Tenant-Id header
	// (http.tenant-source=header), which anyone can send; for development
	// or a trusted network only. Strict startup refuses tenant-source
	// header regardless.
	AllowHeaderTenant bool
	// ClockSkewTolerance is key "clock-skew-tolerance", default 2s, 0 to
	// 1m: how far apart the clocks of the processes sharing a store may
	// be. A work item is claimed up to this much before its due time, and
	// a lease is taken over only this long after its expiry.
	ClockSkewTolerance time.Duration
	// PipelineVersionWait is key "pipeline-version-wait", default 1h, 1s
	// to 7 days: how long an execution bound to a pipeline definition
	// that no worker seen serves waits (its work item left for a worker
	// that serves it) before it ends DLQ with pipeline_version_unavailable.
	PipelineVersionWait time.Duration
	// DispatchTimeout is key "dispatch-timeout", default 2s, 10ms to 1m:
	// the deadline of sending a work item after a commit (a submit, a
	// hand-over). A send that misses it is left to the sweeper, so that a
	// slow queue never holds a submit's answer.
	DispatchTimeout time.Duration
	// ReleaseLimit is key "release-limit", default 10, 1 to 1000: how many
	// times one attempt of a step may be handed back unfinished (a backend
	// failure, a shutdown, too little time left) before the hand-back
	// counts as a failed attempt under the step's retry policy.
	ReleaseLimit int
	// ChainMaxSteps is key "chain.max-steps", default 16, 1 to 1000: how
	// many steps one work item may run in a row (a step's commit claims the
	// next step, which runs without a queue round trip); 1 turns chaining
	// off.
	ChainMaxSteps int
	// RateLimitHorizon is key "rate-limit.horizon", default 15m, 1s to
	// 24h: how far ahead a step of a rate-limited pipeline may reserve its
	// start; a step whose turn is further out reserves nothing and tries
	// again (no attempt counted) when its turn is within the horizon.
	RateLimitHorizon time.Duration
	// PriorityAging is key "priority.aging", default 1m, 1s to 24h: how
	// much later an execution ranks than one of the priority one more
	// urgent submitted at the same time; a less urgent execution is
	// passed over only by more urgent ones submitted less than (the
	// difference of priorities) times this after it (at most four
	// agings).
	PriorityAging time.Duration
	// UrgentQueueURL is key "queue.urgent-url", default empty (off): the
	// SQS urgent work queue. With it set (and dispatcher-provider sqs) an
	// execution of priority at most UrgentAt is dispatched there instead
	// of to QueueURL, and qasync serve's poller receives from it first
	// (the work queue at least every sqsbackend.WorkEvery receives), so
	// that urgent work never waits behind a backlog of normal work.
	UrgentQueueURL string
	// UrgentAt is key "priority.urgent-at", default 1, 1 to 5: the least
	// urgent priority that takes the urgent lane (queue.urgent-url).
	UrgentAt int
	// ItemRejectProvider is key pipeline.item-reject.provider: where
	// steps' rejected items go: embedded (kept in the embedded store),
	// log, memory or sqs; empty (default) means embedded with
	// state-provider embedded and log otherwise.
	ItemRejectProvider string
	// ItemRejectQueueURL is key pipeline.item-reject.queue-url; required
	// when ItemRejectProvider is sqs.
	ItemRejectQueueURL string
	// ItemRejectIncludePayload is key pipeline.item-reject.include-payload,
	// default false: envelopes carry the rejected item's bytes only when
	// true (otherwise only its SHA-256 fingerprint).
	ItemRejectIncludePayload bool
	// ItemRejectPublishFailurePolicy is key
	// pipeline.item-reject.publish-failure-policy: CONTINUE (default; a
	// failed publish is logged and the step goes on) or FAIL_PIPELINE (the
	// step fails retryably).
	ItemRejectPublishFailurePolicy string
}

// DueShards is the number of index shards the DynamoDB layout writes:
// schema.DueShardsFor(CapacityStepsPerSecond).
func (c Config) DueShards() int { return schema.DueShardsFor(c.CapacityStepsPerSecond) }

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Mode:                   "QUEUE_ASYNC",
		StateProvider:          "embedded",
		EmbeddedDataDir:        ".qasync",
		IdempotencyPolicy:      "OPTIONAL_CLIENT_KEY",
		Lease:                  30 * time.Second,
		MaxRetries:             3,
		RetryDelay:             time.Second,
		RetryMultiplier:        2,
		RetryMaxDelay:          5 * time.Minute,
		SweepInterval:          time.Second,
		SweepLimit:             100,
		SweepGrace:             10 * time.Second,
		ExecutionTTLDays:       30,
		WorkerConcurrency:      8,
		InlineBudgetBytes:      256, // payload.DefaultInlineBudget
		HTTPAddr:               "127.0.0.1:8080",
		MaxBodyBytes:           6 << 20,
		TenantSource:           "header",
		LogLevel:               "info",
		ExecutionTable:         schema.DefaultNames.ExecutionTable,
		PayloadTable:           schema.DefaultNames.PayloadTable,
		DeadLetterTable:        schema.DefaultNames.DeadLetterTable,
		EffectTable:            schema.DefaultNames.EffectTable,
		HistoryTable:           schema.DefaultNames.HistoryTable,
		HistoryStreamPoller:    true,
		HistoryPollInterval:    time.Second,
		EventsTypes:            DefaultEventsTypes,
		EventsSink:             "eventbridge",
		TenantClaim:            "tenant_id",
		CapacityStepsPerSecond: 1000,
		SQSWaitSeconds:         20,
		SQSVisibility:          schema.WorkVisibility,
		TracingExporter:        "none",
		TracingCompression:     "none",
		TracingSampleRatio:     1,
		ClockSkewTolerance:     2 * time.Second,
		PipelineVersionWait:    time.Hour,
		DispatchTimeout:        2 * time.Second,
		ReleaseLimit:           10,
		ChainMaxSteps:          16,
		RateLimitHorizon:       15 * time.Minute,
		PriorityAging:          time.Minute,
		UrgentAt:               1,

		HTTPReadHeaderTimeout: 10 * time.Second,
		HTTPReadTimeout:       time.Minute,
		HTTPWriteTimeout:      90 * time.Second,
		HTTPIdleTimeout:       2 * time.Minute,

		ItemRejectPublishFailurePolicy: "CONTINUE",
	}
}

// entry is one row of the key table.
type entry struct {
	key    string // short name (ShortKey)
	doc    string
	secret bool // never displayed
	isBool bool // flag may be given without a value
	set    func(*Config, string) error
	get    func(Config) any // display value (typed, for slog)
	check  func(Config) error
}

// field builds an entry for the Config field that p points at.
func field[T any](key, doc string, p func(*Config) *T, parse func(string) (T, error), check func(Config, T) error) entry {
	_, isBool := any(*new(T)).(bool)
	return entry{
		key: key, doc: doc, isBool: isBool,
		set: func(c *Config, s string) error {
			v, err := parse(s)
			if err == nil {
				*p(c) = v
			}
			return err
		},
		get: func(c Config) any { return *p(&c) },
		check: func(c Config) error {
			if check == nil {
				return nil
			}
			return check(c, *p(&c))
		},
	}
}

// entries is the key table, in documentation order.
var entries = []entry{
	field("mode", "Execution mode; only QUEUE_ASYNC is supported.",
		func(c *Config) *string { return &c.Mode }, upper,
		func(_ Config, v string) error {
			if v != "QUEUE_ASYNC" {
				return fmt.Errorf("only QUEUE_ASYNC is supported, got %q", v)
			}
			return nil
		}),
	field("state-provider", "Execution state store: embedded (durable: every execution, payload, effect, dead letter, reject and work item in one file under embedded.data-dir; one process), memory (lost on exit: tests and throwaway runs) or dynamo.",
		func(c *Config) *string { return &c.StateProvider }, lower, oneOf("embedded", "memory", "dynamo")),
	field("dispatcher-provider", "Work dispatcher: embedded (the embedded store's durable queue), event (in-process workers, not durable) or sqs; empty: embedded with state-provider embedded, else event.",
		func(c *Config) *string { return &c.DispatcherProvider }, lower, all(oneOf("", "embedded", "event", "sqs"), embeddedOnly,
			func(c Config, v string) error {
				if c.StateProvider == "embedded" && v != "embedded" {
					return fmt.Errorf("%s embedded keeps its work queue itself (a commit and its hand-over are one write): leave this key empty or set embedded, got %q", FullKey("state-provider"), v)
				}
				return nil
			})),
	field("dlq-provider", "Dead-letter sink: embedded (recorded in the embedded store, listed by the operator plane), log or sqs; empty: embedded with state-provider embedded, else log.",
		func(c *Config) *string { return &c.DLQProvider }, lower, all(oneOf("", "embedded", "log", "sqs"), embeddedOnly)),
	field("embedded.data-dir", "Data directory of the embedded store (state-provider embedded), relative to the working directory; one qasync serve at a time (flag alias --data-dir). Created 0700; refused when other users can write it (chmod go-w).",
		func(c *Config) *string { return &c.EmbeddedDataDir }, verbatim,
		func(c Config, v string) error {
			if v == "" && c.StateProvider == "embedded" {
				return fmt.Errorf("required when %s is embedded", FullKey("state-provider"))
			}
			return nil
		}),
	field("idempotency-policy", "Idempotency keys: OPTIONAL_CLIENT_KEY (a client key when sent; without one every submit is new), CLIENT_KEY_REQUIRED, or SERVER_KEY_ONLY (identical bodies collapse while the execution's row lives) (case-insensitive).",
		func(c *Config) *string { return &c.IdempotencyPolicy }, upper,
		oneOf("OPTIONAL_CLIENT_KEY", "CLIENT_KEY_REQUIRED", "SERVER_KEY_ONLY")),
	field("strict-startup", "Refuse to start unless every provider's resources are verified and a durable mode uses a durable idempotency policy.",
		func(c *Config) *bool { return &c.StrictStartup }, parseBool, nil),
	millis(field("lease-ms", "Execution lease in integer milliseconds; at least 100.",
		func(c *Config) *time.Duration { return &c.Lease }, parseMillis,
		func(_ Config, v time.Duration) error {
			if v < 100*time.Millisecond {
				return fmt.Errorf("must be at least 100, got %d", v.Milliseconds())
			}
			return nil
		})),
	field("max-retries", "Retries after the first attempt; at least 0.",
		func(c *Config) *int { return &c.MaxRetries }, parseInt[int], atLeast(0)),
	field("retry-delay", "First retry delay (duration); greater than 0.",
		func(c *Config) *time.Duration { return &c.RetryDelay }, parseDuration, positive),
	field("retry-multiplier", "Backoff multiplier between retries; at least 1.",
		func(c *Config) *float64 { return &c.RetryMultiplier }, parseFloat,
		func(c Config, v float64) error {
			if math.IsInf(v, 0) {
				return fmt.Errorf("must be finite, got %v", v)
			}
			return atLeast(1.0)(c, v)
		}),
	field("retry-max-delay", "Cap on the retry delay (duration); at least retry-delay, at most the retention (execution-ttl-days).",
		func(c *Config) *time.Duration { return &c.RetryMaxDelay }, parseDuration,
		func(c Config, v time.Duration) error {
			if v < c.RetryDelay {
				return fmt.Errorf("must be at least %sretry-delay (%v), got %v", KeyPrefix, c.RetryDelay, v)
			}
			if ttl := time.Duration(c.ExecutionTTLDays) * 24 * time.Hour; c.ExecutionTTLDays >= 1 && v > ttl {
				return fmt.Errorf("must not exceed the retention %sexecution-ttl-days (%d days): a row waiting for its retry would outlive it, got %v", KeyPrefix, c.ExecutionTTLDays, v)
			}
			return nil
		}),
	field("sweep-interval", "How often the sweeper scans for due executions (duration); greater than 0.",
		func(c *Config) *time.Duration { return &c.SweepInterval }, parseDuration, positive),
	field("sweep-limit", "Due executions handled per sweep; 1 to 10000.",
		func(c *Config) *int { return &c.SweepLimit }, parseInt[int], between(1, 10000)),
	field("sweep-grace", "How long a due execution may wait for its queued work item before the sweeper re-dispatches it (duration); at least 0.",
		func(c *Config) *time.Duration { return &c.SweepGrace }, parseDuration, atLeast[time.Duration](0)),
	field("execution-ttl-days", "Retention in days: an execution is kept this long after it became terminal (a live one is never deleted; a park with a timeout keeps it this long past the timeout); the idempotency key this long after the submit; via TTL; at least 1.",
		func(c *Config) *int { return &c.ExecutionTTLDays }, parseInt[int], atLeast(1)),
	field("clock-skew-tolerance", "Largest clock difference tolerated between processes sharing a store (duration); a work item is claimed up to this much early and a lease is taken over only this long after it expired; 0 to 1m.",
		func(c *Config) *time.Duration { return &c.ClockSkewTolerance }, parseDuration, between(0, time.Minute)),
	field("pipeline-version-wait", "How long an execution whose pipeline definition (version) this worker does not serve waits for a worker that serves it before it ends DLQ with pipeline_version_unavailable (duration); 1s to 7 days.",
		func(c *Config) *time.Duration { return &c.PipelineVersionWait }, parseDuration,
		func(c Config, v time.Duration) error {
			if ttl := time.Duration(c.ExecutionTTLDays) * 24 * time.Hour; v > ttl {
				return fmt.Errorf("must not exceed the retention %sexecution-ttl-days (%d days), got %v", KeyPrefix, c.ExecutionTTLDays, v)
			}
			return between(time.Second, 7*24*time.Hour)(c, v)
		}),
	field("dispatch-timeout", "Deadline of sending a work item after a commit (submit, hand-over, re-drive); a send that misses it is left to the sweeper (duration); 10ms to 1m.",
		func(c *Config) *time.Duration { return &c.DispatchTimeout }, parseDuration, between(10*time.Millisecond, time.Minute)),
	field("release-limit", "How many times one attempt of a step may be handed back unfinished (backend failure, shutdown, too little time left) before the hand-back counts as a failed attempt; 1 to 1000.",
		func(c *Config) *int { return &c.ReleaseLimit }, parseInt[int], between(1, 1000)),
	field("chain.max-steps", "Steps one work item may run in a row: when a step commits and the next can run, the worker commits it and claims the next in one conditional write and runs it without a queue round trip (each step still its own transition), within a Lambda invocation only while a lease of time is left; 1 turns chaining off; 1 to 1000.",
		func(c *Config) *int { return &c.ChainMaxSteps }, parseInt[int], between(1, 1000)),
	field("rate-limit.horizon", "How far ahead a step of a rate-limited pipeline may reserve its start (duration); a step whose turn is further out reserves nothing, is handed back (no attempt counted) and tries again when its turn is within the horizon; 1s to 24h.",
		func(c *Config) *time.Duration { return &c.RateLimitHorizon }, parseDuration, between(time.Second, 24*time.Hour)),
	field("priority.aging", "How much later an execution ranks than one of the priority one more urgent (1 is the most urgent, 5 the least) submitted at the same time: where executions compete (a concurrency key's wait line, the local queue) the smaller rank goes first, so a less urgent execution is passed over only by more urgent ones submitted less than (the difference of priorities) times this after it (duration); 1s to 24h.",
		func(c *Config) *time.Duration { return &c.PriorityAging }, parseDuration, between(time.Second, 24*time.Hour)),
	field("worker-concurrency", "Workers of the in-process event dispatcher; 1 to 1024.",
		func(c *Config) *int { return &c.WorkerConcurrency }, parseInt[int], between(1, 1024)),
	field("payload.inline-budget-bytes", "Largest payload stored inline in the execution row; the default keeps a row with its input and latest step output under 1 KB (one write unit per step); larger payloads are written once to the payload table; 0 to 196608 (two must fit a 400 KiB DynamoDB row).",
		func(c *Config) *int { return &c.InlineBudgetBytes }, parseInt[int], between(0, 192<<10)),
	secret(field("admin.token", "Token of the operator routes (re-drive, cancel, bulk re-drive); empty disables them. At least 32 characters (openssl rand -hex 16): strict startup refuses a shorter one, and qasync serve warns of it otherwise. Never printed.",
		func(c *Config) *string { return &c.AdminToken }, verbatim, checkAdminToken)),
	secret(field("await.resume-token-secret", "HMAC key of await steps' resume tokens; empty disables await steps. Never printed.",
		func(c *Config) *string { return &c.AwaitResumeTokenSecret }, verbatim, nil)),
	field("await.resume-token-secret-arn", "Secrets Manager secret (ARN) whose value is fetched once at startup (GetSecretValue) and used as await.resume-token-secret when that key is empty; a failed fetch stops startup.",
		func(c *Config) *string { return &c.AwaitResumeTokenSecretARN }, verbatim, nil),
	field("output.bucket", "S3 bucket of pipelines' terminal output: the value of the {outputBucket} placeholder of Output.To; a pipeline using it refuses to start while this is empty.",
		func(c *Config) *string { return &c.OutputBucket }, verbatim, nil),
	field("admin.redrive-authorized-upstream", "The operator routes (re-drive, cancel, bulk re-drive) are authorized by API Gateway (each its own IAM permission, or the JWT scope), so the submit function serves them without admin.token; qasync serve refuses it.",
		func(c *Config) *bool { return &c.RedriveAuthorizedUpstream }, parseBool, nil),
	field("http.addr", "HTTP listen address, host:port (flag alias --addr).",
		func(c *Config) *string { return &c.HTTPAddr }, verbatim,
		func(_ Config, v string) error {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("must be host:port, got %q", v)
			}
			return nil
		}),
	field("http.max-body-bytes", "Largest accepted request body; 1 to 67108864 (64 MiB).",
		func(c *Config) *int64 { return &c.MaxBodyBytes }, parseInt[int64], between[int64](1, 64<<20)),
	field("http.read-header-timeout", "qasync serve: how long a connection may take to send a request's headers (duration); 1ms to 10m.",
		func(c *Config) *time.Duration { return &c.HTTPReadHeaderTimeout }, parseDuration, between(time.Millisecond, 10*time.Minute)),
	field("http.read-timeout", "qasync serve: how long a connection may take to send a whole request, body included (duration); the default lets a 6 MiB body arrive at 0.1 MiB/s (raise it with http.max-body-bytes); 1ms to 1h.",
		func(c *Config) *time.Duration { return &c.HTTPReadTimeout }, parseDuration, between(time.Millisecond, time.Hour)),
	field("http.write-timeout", "qasync serve: how long a request may take from the end of its headers to the end of its response (duration); at least http.read-timeout, at most 1h.",
		func(c *Config) *time.Duration { return &c.HTTPWriteTimeout }, parseDuration,
		func(c Config, v time.Duration) error {
			if v < c.HTTPReadTimeout || v > time.Hour {
				return fmt.Errorf("must be between %shttp.read-timeout (%v) and 1h, got %v", KeyPrefix, c.HTTPReadTimeout, v)
			}
			return nil
		}),
	field("http.idle-timeout", "qasync serve: how long an idle keep-alive connection is kept open (duration); 1ms to 1h.",
		func(c *Config) *time.Duration { return &c.HTTPIdleTimeout }, parseDuration, between(time.Millisecond, time.Hour)),
	field("http.tenant-source", "Tenant of a request: header (X-Tenant-Id, else \"default\"; development only: on an address beyond loopback qasync serve needs http.allow-header-tenant=true), none (always \"default\"), iam (the API Gateway IAM caller's principal: its IAM role or user, not the session), iam-account (the IAM caller's AWS account: every principal of the account shares one tenant) or jwt (a claim of the API Gateway JWT authorizer).",
		func(c *Config) *string { return &c.TenantSource }, lower, oneOf("header", "none", "iam", "iam-account", "jwt")),
	field("http.allow-header-tenant", "Development or a trusted network only: let a Lambda deployment, or qasync serve on an address beyond loopback (http.addr not 127.0.0.1, ::1 or localhost), take the tenant from the X-Tenant-Id header (tenant-source header), which any caller can set; without it both refuse to start. Strict startup refuses tenant-source header regardless.",
		func(c *Config) *bool { return &c.AllowHeaderTenant }, parseBool, nil),
	field("http.tenant-claim", "JWT claim naming the tenant when http.tenant-source is jwt.",
		func(c *Config) *string { return &c.TenantClaim }, verbatim,
		requiredWhen("http.tenant-source", "jwt", func(c Config) bool { return c.TenantSource == "jwt" })),
	field("queue-url", "SQS work queue URL; required when dispatcher-provider is sqs.",
		func(c *Config) *string { return &c.QueueURL }, verbatim,
		requiredWhen("dispatcher-provider", "sqs", func(c Config) bool { return c.DispatcherProvider == "sqs" })),
	field("queue.urgent-url", "SQS urgent work queue URL; empty (default): none, every execution goes to queue-url. With dispatcher-provider sqs, executions of priority at most priority.urgent-at are dispatched here, and qasync serve receives from it first (from queue-url at least every 4th receive and whenever it is empty).",
		func(c *Config) *string { return &c.UrgentQueueURL }, verbatim, nil),
	field("priority.urgent-at", "The least urgent priority that takes the urgent lane (queue.urgent-url): executions of priority 1 to this go there; 1 to 5.",
		func(c *Config) *int { return &c.UrgentAt }, parseInt[int], between(1, 5)),
	field("dlq-url", "SQS dead-letter queue URL; required when dlq-provider is sqs.",
		func(c *Config) *string { return &c.DLQURL }, verbatim,
		requiredWhen("dlq-provider", "sqs", func(c Config) bool { return c.DLQProvider == "sqs" })),
	field("log-level", "Log level: debug, info, warn or error.",
		func(c *Config) *string { return &c.LogLevel }, lower, oneOf("debug", "info", "warn", "error")),
	field("dynamo.execution-table", "DynamoDB execution table (state-provider dynamo).",
		func(c *Config) *string { return &c.ExecutionTable }, verbatim, requiredWhen("state-provider", "dynamo", usesDynamo)),
	field("dynamo.execution-payload-table", "DynamoDB payload chunk table, PK payload_id, SK payload_part (state-provider dynamo).",
		func(c *Config) *string { return &c.PayloadTable }, verbatim, requiredWhen("state-provider", "dynamo", usesDynamo)),
	field("dynamo.capacity-steps-per-second", "Step rate the DynamoDB layout is sized for: the sweep and list indexes spread over max(4, ceil(2 x rate / 500)) partition key values (an execution writes the sweep index twice; a partition takes 1,000 units/s, used at most half); 1 to 1000000. Changing it is safe: the table remembers the largest count used.",
		func(c *Config) *int { return &c.CapacityStepsPerSecond }, parseInt[int], between(1, 1_000_000)),
	field("dynamo.dead-letter-table", "DynamoDB table of dead-letter records kept by the dlq consumer (state-provider dynamo).",
		func(c *Config) *string { return &c.DeadLetterTable }, verbatim, requiredWhen("state-provider", "dynamo", usesDynamo)),
	field("dynamo.effect-table", "DynamoDB effect log of command steps, PK command_id (state-provider dynamo).",
		func(c *Config) *string { return &c.EffectTable }, verbatim, requiredWhen("state-provider", "dynamo", usesDynamo)),
	field("dynamo.history-table", "DynamoDB table of executions' histories, PK pk, SK pg, fed from the execution table's stream (state-provider dynamo).",
		func(c *Config) *string { return &c.HistoryTable }, verbatim, requiredWhen("state-provider", "dynamo", usesDynamo)),
	field("history.stream-poller", "qasync serve with state-provider dynamo reads the execution table's stream into the history table; turn it off where another consumer (the history Lambda function) does.",
		func(c *Config) *bool { return &c.HistoryStreamPoller }, parseBool, nil),
	field("history.poll-interval", "How long the history stream poller waits before reading again a shard that had no new records, and after a pass that applied records without a backlog: its batching window (one history page per execution rather than one per write) (duration); 100ms to 1m.",
		func(c *Config) *time.Duration { return &c.HistoryPollInterval }, parseDuration, between(100*time.Millisecond, time.Minute)),
	field("events.bus-name", "EventBridge bus of lifecycle events (the types of events.types, at least once; put by qasync serve and the history function); empty: off.",
		func(c *Config) *string { return &c.EventsBusName }, verbatim, nil),
	field("events.types", "Lifecycle event types published, at least once (a comma-separated list: SUBMITTED, STEP_STARTED, STEP_SUCCEEDED, STEP_FAILED, LEASE_TAKEN_OVER, AWAITING, AWAIT_COMPLETED, SLEEPING, CHILDREN_STARTED, CHILDREN_FINISHED, OUTCOME_UNKNOWN, REDRIVEN, CANCEL_REQUESTED, CANCELLED, DEAD_LETTERED, SUCCEEDED, REJECTED); none: no event is written or published.",
		func(c *Config) *string { return &c.EventsTypes }, upper, eventTypes),
	field("events.sink", "Where lifecycle events go: eventbridge (the bus of events.bus-name; none without one) or log (qasync serve's log, event lifecycle_event, for local runs).",
		func(c *Config) *string { return &c.EventsSink }, lower, oneOf("eventbridge", "log")),
	field("metrics.namespace", "CloudWatch namespace of metrics written to stdout in Embedded Metric Format; empty: off.",
		func(c *Config) *string { return &c.MetricsNamespace }, verbatim, nil),
	field("tracing.exporter", "OpenTelemetry traces of submits, queue hops, step attempts and commits (docs/tracing.md): none (off: no tracer, no trace context in work items), otlp (OTLP/HTTP to tracing.endpoint) or xray (the region's AWS X-Ray OTLP endpoint, SigV4-signed with the process's AWS credentials; needs CloudWatch Transaction Search).",
		func(c *Config) *string { return &c.TracingExporter }, lower, oneOf("none", "otlp", "xray")),
	field("tracing.endpoint", "OTLP/HTTP endpoint URL of tracing.exporter otlp (http://collector:4318; /v1/traces is added to a URL with no path); empty: the OpenTelemetry environment (OTEL_EXPORTER_OTLP_ENDPOINT), else localhost:4318. With xray, empty is https://xray.<region>.amazonaws.com/v1/traces.",
		func(c *Config) *string { return &c.TracingEndpoint }, verbatim,
		func(_ Config, v string) error {
			if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
				return fmt.Errorf("must be an http:// or https:// URL, got %q", v)
			}
			return nil
		}),
	secret(field("tracing.headers", "Headers sent with every span export (key1=value1,key2=value2, values URL-encoded, as OTEL_EXPORTER_OTLP_HEADERS, which is read too): a vendor's API key. Never printed nor logged.",
		func(c *Config) *string { return &c.TracingHeaders }, verbatim, nil)),
	field("tracing.compression", "Compression of span exports: none or gzip.",
		func(c *Config) *string { return &c.TracingCompression }, lower, oneOf("none", "gzip")),
	field("tracing.sample-ratio", "Share of new traces recorded when tracing.exporter is on; a span with a parent follows its parent's decision; 0 to 1.",
		func(c *Config) *float64 { return &c.TracingSampleRatio }, parseFloat, between(0.0, 1.0)),
	field("sqs.wait-seconds", "Long-poll wait of the work queue poller in seconds; 1 to 20 (0, short polling, would send requests back to back on an idle queue).",
		func(c *Config) *int { return &c.SQSWaitSeconds }, parseInt[int], between(1, 20)),
	field("sqs.visibility-timeout", "Visibility timeout of a received work item (duration); the poller extends it while a transition runs; 1s to 12h.",
		func(c *Config) *time.Duration { return &c.SQSVisibility }, parseDuration, between(time.Second, 12*time.Hour)),
	field("item-reject.provider", "Item Reject Sink of steps' rejected items and streams: embedded (kept in the embedded store), log, memory or sqs; empty: embedded with state-provider embedded, else log; strict startup with state-provider dynamo requires sqs.",
		func(c *Config) *string { return &c.ItemRejectProvider }, lower, all(oneOf("", "embedded", "log", "memory", "sqs"), embeddedOnly)),
	field("item-reject.queue-url", "SQS queue URL of the Item Reject Sink; required when item-reject.provider is sqs.",
		func(c *Config) *string { return &c.ItemRejectQueueURL }, verbatim,
		requiredWhen("item-reject.provider", "sqs", func(c Config) bool { return c.ItemRejectProvider == "sqs" })),
	field("item-reject.include-payload", "Put the rejected item's bytes in the reject envelope (otherwise only its SHA-256 fingerprint).",
		func(c *Config) *bool { return &c.ItemRejectIncludePayload }, parseBool, nil),
	field("item-reject.publish-failure-policy", "When publishing a reject fails: CONTINUE (log it, the step goes on) or FAIL_PIPELINE (the step fails retryably) (case-insensitive).",
		func(c *Config) *string { return &c.ItemRejectPublishFailurePolicy }, upper, oneOf("CONTINUE", "FAIL_PIPELINE")),
}

func usesDynamo(c Config) bool { return c.StateProvider == "dynamo" }

// DefaultEventsTypes is the default of events.types: the events that end
// an execution or park it for an operator.
const DefaultEventsTypes = "SUCCEEDED,DEAD_LETTERED,REJECTED,OUTCOME_UNKNOWN,CANCELLED"

// EventTypeNames are the values events.types takes (besides none): the
// history's event types and REJECTED (package outbox keeps the same list).
var EventTypeNames = []string{"SUBMITTED", "STEP_STARTED", "STEP_SUCCEEDED", "STEP_FAILED", "LEASE_TAKEN_OVER",
	"AWAITING", "AWAIT_COMPLETED", "SLEEPING", "CHILDREN_STARTED", "CHILDREN_FINISHED", "OUTCOME_UNKNOWN",
	"REDRIVEN", "CANCEL_REQUESTED", "CANCELLED", "DEAD_LETTERED", "SUCCEEDED", "REJECTED"}

// eventTypes checks events.types: NONE, empty, or names of EventTypeNames.
func eventTypes(_ Config, v string) error {
	if v == "" || strings.EqualFold(v, "none") {
		return nil
	}
	for name := range strings.SplitSeq(v, ",") {
		if !slices.Contains(EventTypeNames, strings.ToUpper(strings.TrimSpace(name))) {
			return fmt.Errorf("unknown event type %q (known: %s, or none)", strings.TrimSpace(name), strings.Join(EventTypeNames, ", "))
		}
	}
	return nil
}

// LifecycleEvents reports whether the process's lifecycle events go
// anywhere: a type is opted into and the sink is log, or eventbridge with
// a bus.
func (c Config) LifecycleEvents() bool {
	if c.EventsTypes == "" || strings.EqualFold(c.EventsTypes, "none") {
		return false
	}
	return c.EventsSink == "log" || c.EventsBusName != ""
}

// embeddedOnly refuses a provider "embedded" without the embedded store.
func embeddedOnly(c Config, v string) error {
	if v == "embedded" && c.StateProvider != "embedded" {
		return fmt.Errorf("embedded needs %s embedded (it lives in the embedded store's data directory), got state-provider %q", FullKey("state-provider"), c.StateProvider)
	}
	return nil
}

// all runs every check, returning the first error.
func all[T any](checks ...func(Config, T) error) func(Config, T) error {
	return func(c Config, v T) error {
		for _, check := range checks {
			if err := check(c, v); err != nil {
				return err
			}
		}
		return nil
	}
}

// flagAliases maps extra flag names to keys.
var flagAliases = map[string]string{
	"addr": "http.addr", "state": "state-provider", "dispatcher": "dispatcher-provider", "dlq": "dlq-provider",
	"data-dir": "embedded.data-dir",
}

func millis(e entry) entry {
	get := e.get
	e.get = func(c Config) any { return get(c).(time.Duration).Milliseconds() }
	return e
}

func secret(e entry) entry { e.secret = true; return e }

// Parsers. Their errors quote the value and omit the key; Load adds it.

func verbatim(s string) (string, error) { return s, nil }
func lower(s string) (string, error)    { return strings.ToLower(strings.TrimSpace(s)), nil }
func upper(s string) (string, error)    { return strings.ToUpper(strings.TrimSpace(s)), nil }

func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("%q is not a boolean (want true or false)", s)
	}
	return b, nil
}

func parseInt[T int | int64](s string) (T, error) {
	bits := 64
	if _, ok := any(T(0)).(int); ok {
		bits = strconv.IntSize
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q is out of range", s)
	} else if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return T(n), nil
}

func parseMillis(s string) (time.Duration, error) {
	n, err := parseInt[int64](s)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/int64(time.Millisecond) || n < math.MinInt64/int64(time.Millisecond) {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return time.Duration(n) * time.Millisecond, nil
}

func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return f, nil
}

// Checks. Their errors omit the key; Validate adds it.

func oneOf(allowed ...string) func(Config, string) error {
	return func(_ Config, v string) error {
		for _, a := range allowed {
			if v == a {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

func atLeast[T cmp.Ordered](lo T) func(Config, T) error {
	return func(_ Config, v T) error {
		if !(v >= lo) { // also refuses NaN
			return fmt.Errorf("must be at least %v, got %v", lo, v)
		}
		return nil
	}
}

func between[T cmp.Ordered](lo, hi T) func(Config, T) error {
	return func(_ Config, v T) error {
		if v < lo || v > hi {
			return fmt.Errorf("must be between %v and %v, got %v", lo, hi, v)
		}
		return nil
	}
}

func positive(_ Config, v time.Duration) error {
	if v <= 0 {
		return fmt.Errorf("must be greater than 0, got %v", v)
	}
	return nil
}

func requiredWhen(key, value string, cond func(Config) bool) func(Config, string) error {
	return func(c Config, v string) error {
		if v == "" && cond(c) {
			return fmt.Errorf("required when %s is %s", FullKey(key), value)
		}
		return nil
	}
}

// EnvName returns the environment variable for key: upper-cased, with every
// character other than an ASCII letter or digit replaced by '_'.
func EnvName(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, key)
}

// KeyDoc documents one configuration key.
type KeyDoc struct {
	Key     string // full key, e.g. pipeline.orchestrator.lease-ms
	Flag    string // short name, the flag without "--": lease-ms, item-reject.provider
	Env     string // environment variable, e.g. PIPELINE_ORCHESTRATOR_LEASE_MS
	Default string // default value as accepted by Load; empty if none
	Doc     string // meaning and accepted values
}

// Keys lists every configuration key in documentation order. The flag for a
// key is "--" followed by its short name (ShortKey).
func Keys() []KeyDoc {
	def := Default()
	docs := make([]KeyDoc, len(entries))
	for i, e := range entries {
		docs[i] = KeyDoc{FullKey(e.key), e.key, EnvName(FullKey(e.key)), format(e.get(def)), e.doc}
	}
	return docs
}

// MarkdownTable renders Keys as a Markdown table for the README.
func MarkdownTable() string {
	esc := strings.NewReplacer("|", `\|`).Replace
	var b strings.Builder
	b.WriteString("| Key | Env var | Default | Meaning |\n|---|---|---|---|\n")
	for _, k := range Keys() {
		def := "(empty)"
		if k.Default != "" {
			def = "`" + k.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", k.Key, k.Env, esc(def), esc(k.Doc))
	}
	return b.String()
}

// format renders a value the way Load accepts it.
func format(v any) string {
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v)
}

// display is e's value in c for humans, with secrets reduced to set/unset.
func (e *entry) display(c Config) any {
	if !e.secret {
		return e.get(c)
	}
	if format(e.get(c)) == "" {
		return "unset"
	}
	return "set"
}

// Load returns Default overridden by the environment (read through
// lookupEnv; nil means an empty environment) and then by the flags in args.
// It also returns the positional arguments left after the flags.
//
// A value that does not parse yields an error naming its source and key;
// all environment errors are reported together. A flag error (an unknown
// flag's names the nearest flag; flag.ErrHelp for -h, which callers can
// test with errors.Is) stops parsing. Load reads only the keys' variables:
// Check reports the environment's unknown ones.
// Otherwise the result is validated, and on a validation error the loaded
// Config is returned with the error, whose messages say which environment
// variable or flag supplied each wrong value.
func Load(lookupEnv func(string) (string, bool), args []string) (Config, []string, error) {
	c := Default()
	from := map[string]string{} // key -> env var or flag that last set it
	var errs []error
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	for i := range entries {
		e := &entries[i]
		name := EnvName(FullKey(e.key))
		if s, ok := lookupEnv(name); ok {
			if err := e.set(&c, s); err != nil {
				errs = append(errs, fmt.Errorf("config: %s (%s): %w", name, FullKey(e.key), err))
			}
			from[e.key] = name
		}
	}

	fs := flag.NewFlagSet("qasync", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var setErr error
	for i := range entries {
		e := &entries[i]
		fs.Var(&flagValue{e, &c, e.key, from, &setErr}, e.key, e.doc)
	}
	for alias, key := range flagAliases {
		for i := range entries {
			if entries[i].key == key {
				fs.Var(&flagValue{&entries[i], &c, alias, from, &setErr}, alias, "alias of --"+key)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if setErr == nil {
			setErr = unknownFlagError(err)
		}
		errs = append(errs, setErr)
	}
	if len(errs) > 0 {
		return Config{}, nil, errors.Join(errs...)
	}
	return c, fs.Args(), c.validate(from)
}

// ResolveProviders returns c with the empty providers filled in from
// state-provider: with embedded, the dispatcher, the dead-letter sink and
// the Item Reject Sink are the embedded store's (one data directory holds
// everything); otherwise the in-process dispatcher (event) and the log
// sinks. Load leaves them empty (so that Load of no settings is Default);
// Validate judges the resolved values, and the runtime's wiring runs on
// them.
func (c Config) ResolveProviders() Config {
	embedded := c.StateProvider == "embedded"
	pick := func(p *string, withEmbedded, otherwise string) {
		if *p != "" {
			return
		}
		if embedded {
			*p = withEmbedded
		} else {
			*p = otherwise
		}
	}
	pick(&c.DispatcherProvider, "embedded", "event")
	pick(&c.DLQProvider, "embedded", "log")
	pick(&c.ItemRejectProvider, "embedded", "log")
	return c
}

// flagValue is the flag.Value of one key.
type flagValue struct {
	e    *entry
	c    *Config
	name string
	from map[string]string
	err  *error // the first Set error, with key and flag named
}

func (v *flagValue) String() string {
	if v == nil || v.c == nil || v.e.secret {
		return ""
	}
	return format(v.e.get(*v.c))
}

func (v *flagValue) Set(s string) error {
	if err := v.e.set(v.c, s); err != nil {
		*v.err = fmt.Errorf("config: --%s (%s): %w", v.name, FullKey(v.e.key), err)
		return *v.err
	}
	v.from[v.e.key] = "--" + v.name
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.e.isBool }

// Validate checks every key and returns all problems joined with
// errors.Join, each message starting with the full key.
func (c Config) Validate() error { return c.validate(nil) }

func (c Config) validate(from map[string]string) error {
	var errs []error
	c = c.ResolveProviders()
	for i := range entries {
		e := &entries[i]
		if err := e.check(c); err != nil {
			src := ""
			if from[e.key] != "" {
				src = " (from " + from[e.key] + ")"
			}
			errs = append(errs, fmt.Errorf("%s: %w%s", FullKey(e.key), err, src))
		}
	}
	return errors.Join(errs...)
}

// String lists the effective values as key=value pairs (short names), with the admin token shown only as set or unset.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("config{")
	for i := range entries {
		if i > 0 {
			b.WriteByte(' ')
		}
		v := entries[i].display(c)
		s := format(v)
		if _, ok := v.(string); ok && (s == "" || strings.ContainsAny(s, " \"")) {
			s = strconv.Quote(s)
		}
		b.WriteString(entries[i].key + "=" + s)
	}
	b.WriteByte('}')
	return b.String()
}

// Format implements fmt.Formatter so that every verb, including %#v and
// %d, prints String and never the admin token.
func (c Config) Format(f fmt.State, _ rune) { io.WriteString(f, c.String()) }

// LogValue implements slog.LogValuer: a group of the effective values named
// in snake_case (lease_ms, payload_inline_budget_bytes, ...), with
// admin_token reduced to "set" or "unset".
func (c Config) LogValue() slog.Value {
	attrs := make([]slog.Attr, len(entries))
	for i := range entries {
		name := strings.ToLower(EnvName(entries[i].key))
		v := entries[i].display(c)
		if d, ok := v.(time.Duration); ok {
			v = d.String() // "1s", not nanoseconds
		}
		attrs[i] = slog.Any(name, v)
	}
	return slog.GroupValue(attrs...)
}
