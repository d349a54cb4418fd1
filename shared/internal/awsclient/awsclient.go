// Package awsclient builds the AWS SDK clients the durable providers use.
// Endpoints come from the SDK's standard variables (AWS_ENDPOINT_URL_DYNAMODB,
// AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_SECRETS_MANAGER), so one binary talks to AWS or to the local stack;
// for a loopback endpoint the client is adjusted to DynamoDB Local's quirks
// (which serves DynamoDB Streams on its DynamoDB endpoint).
package awsclient

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// Clients are the SDK clients of one process.
type Clients struct {
	Config   aws.Config
	DynamoDB *dynamodb.Client
	// DynamoDBStreams reads the execution table's stream (the history
	// feed of qasync serve). Its endpoint is AWS_ENDPOINT_URL_DYNAMODB_STREAMS,
	// else a loopback AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local serves both).
	DynamoDBStreams *dynamodbstreams.Client
	SQS             *sqs.Client
	EventBridge     *eventbridge.Client
	// S3 uses path-style addressing when its endpoint is on this machine
	// (the local stack serves S3 at AWS_ENDPOINT_URL_S3).
	S3 *s3.Client
	// SecretsManager reads the await resume-token secret at startup
	// (config key await.resume-token-secret-arn).
	SecretsManager *secretsmanager.Client
}

// Load reads the SDK's default configuration (environment, shared files,
// instance role) and builds the clients. Extra APIOptions (such as a
// Counter's) are added to every client.
func Load(ctx context.Context, apiOptions ...func(*middleware.Stack) error) (Clients, error) {
	cfg, err := LoadConfig(ctx, apiOptions...)
	if err != nil {
		return Clients{}, err
	}
	return FromConfig(cfg), nil
}

// LoadConfig reads the SDK's default configuration, as Load does, without
// building any client; its HTTP client keeps HTTPClient's idle
// connections.
func LoadConfig(ctx context.Context, apiOptions ...func(*middleware.Stack) error) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, err
	}
	cfg.APIOptions = append(cfg.APIOptions, apiOptions...)
	if b, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		// The SDK's client, with whatever the configuration set on it (a
		// custom CA bundle), keeping more idle connections.
		cfg.HTTPClient = b.WithTransportOptions(keepConnections)
	}
	// Retry throttling and 5xx with the standard backoff, up to 5 attempts,
	// without the client-side retry quota: under a burst of throttling the
	// quota turns retryable errors into "retry quota exceeded" failures
	// across the whole process.
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 5
			o.RateLimiter = ratelimit.None
		})
	}
	return cfg, nil
}

// Idle connections the SDK clients' HTTP transport keeps (HTTPClient),
// per endpoint and in all.
const (
	MaxIdleConnsPerHost = 256
	MaxIdleConns        = 1024
)

// HTTPClient is the HTTP client of the SDK clients LoadConfig and
// LoadEnvConfig configure: the SDK's own (awshttp.BuildableClient: its
// timeouts, TLS settings and proxy support) keeping up to
// MaxIdleConnsPerHost idle connections per endpoint where the SDK keeps
// 10. A process with more requests in flight to one endpoint than the
// pool keeps (qasync serve: its workers, submits, history feed and
// sweeper on the DynamoDB endpoint) closes the extra connections as their
// answers arrive and opens new ones for the next requests: a TCP and, in
// AWS, a TLS handshake each, on the request's path. One serve process
// opened about 100 connections to DynamoDB Local in a burst of 300
// executions at worker concurrency 8 with the SDK's 10 (make
// bench-durable, docs/development.md). Idle connections cost a file
// descriptor each and close after the SDK's idle timeout (90 s).
func HTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(keepConnections)
}

// keepConnections sets HTTPClient's pool sizes on a transport.
func keepConnections(t *http.Transport) {
	t.MaxIdleConns, t.MaxIdleConnsPerHost = MaxIdleConns, MaxIdleConnsPerHost
}

// FromConfig builds the clients from cfg.
func FromConfig(cfg aws.Config) Clients {
	return Clients{
		Config:          cfg,
		DynamoDB:        newDynamoDB(cfg),
		DynamoDBStreams: newDynamoDBStreams(cfg),
		SQS:             sqs.NewFromConfig(cfg),
		EventBridge:     eventbridge.NewFromConfig(cfg),
		S3:              newS3(cfg),
		SecretsManager:  secretsmanager.NewFromConfig(cfg),
	}
}

// newDynamoDB is the DynamoDB client of cfg. DynamoDB Local omits the
// x-amz-crc32 header on errors; only where the endpoint is on this
// machine is the check skipped.
func newDynamoDB(cfg aws.Config) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if IsLoopback(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")) || (o.BaseEndpoint != nil && IsLoopback(*o.BaseEndpoint)) {
			o.DisableValidateResponseChecksum = true
		}
	})
}

// newDynamoDBStreams is the DynamoDB Streams client of cfg: its endpoint
// is AWS_ENDPOINT_URL_DYNAMODB_STREAMS, else a loopback
// AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local serves both).
func newDynamoDBStreams(cfg aws.Config) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(cfg, func(o *dynamodbstreams.Options) {
		ddb := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
		if o.BaseEndpoint == nil && os.Getenv("AWS_ENDPOINT_URL_DYNAMODB_STREAMS") == "" && IsLoopback(ddb) {
			o.BaseEndpoint = aws.String(ddb)
		}
	})
}

// newS3 is the S3 client of cfg, path-style where the endpoint is on
// this machine (the local stack serves S3 at AWS_ENDPOINT_URL_S3).
func newS3(cfg aws.Config) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if IsLoopback(os.Getenv("AWS_ENDPOINT_URL_S3")) || (o.BaseEndpoint != nil && IsLoopback(*o.BaseEndpoint)) {
			o.UsePathStyle = true
		}
	})
}

// IsLoopback reports whether the URL's host is a loopback address or
// localhost.
func IsLoopback(raw string) bool {
	if raw == "" {
		return false
	}
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Counter counts SDK calls per "Service.Operation" (one per call; SDK
// retries of a call are not counted again). Tests use it to check the
// request budget; it is cheap enough to leave on in production.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewCounter returns an empty counter.
func NewCounter() *Counter { return &Counter{counts: map[string]int{}} }

// APIOption installs the counter on a client's middleware stack.
func (c *Counter) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("qasyncRequestCounter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			key := middleware.GetServiceID(ctx) + "." + middleware.GetOperationName(ctx)
			c.mu.Lock()
			c.counts[key]++
			c.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// Snapshot returns a copy of the counts.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int{}
}

// Keys returns the counted operation names, sorted.
func Keys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
