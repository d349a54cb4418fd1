package awsclient

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// Session is one process's AWS access: it loads the SDK's configuration
// once, on the first client asked for (LoadConfig, or LoadEnvConfig for a
// Lambda function), and builds each client
// once, when first asked for, with the same adjustments as FromConfig. A
// process pays for, and its binary links, only the clients its code asks
// for: the worker function never builds the DynamoDB Streams client, the
// submit function never the S3 one. The clients are asked for with the
// package's functions (DynamoDB, SQS, ...), never methods: a binary that
// uses reflection on methods (the console's templates) keeps every
// exported method of a type it holds in an interface, and would link
// every client. It is safe for concurrent use.
type Session struct {
	mu         sync.Mutex
	load       func(context.Context, ...func(*middleware.Stack) error) (aws.Config, error)
	apiOptions []func(*middleware.Stack) error
	fixed      *aws.Config // NewSessionFrom's configuration
	loaded     bool
	cfg        aws.Config
	err        error

	// The clients, each built once. Typed fields, never an interface:
	// see the note on reflection above.
	dynamodb        *dynamodb.Client
	dynamodbStreams *dynamodbstreams.Client
	sqs             *sqs.Client
	eventBridge     *eventbridge.Client
	s3              *s3.Client
	secretsManager  *secretsmanager.Client
}

// NewSession returns a session on the SDK's default configuration
// (LoadConfig) whose clients carry apiOptions (for example a Counter's)
// besides the SDK's own middleware.
func NewSession(apiOptions ...func(*middleware.Stack) error) *Session {
	return &Session{load: LoadConfig, apiOptions: apiOptions}
}

// NewEnvSession returns a session on the configuration the environment
// alone holds (LoadEnvConfig): the Lambda functions', which so link none
// of the SDK's other credential sources.
func NewEnvSession(apiOptions ...func(*middleware.Stack) error) *Session {
	return &Session{load: LoadEnvConfig, apiOptions: apiOptions}
}

// NewSessionFrom returns a session on cfg instead of the SDK's default
// configuration (tests, the DynamoDB model).
func NewSessionFrom(cfg aws.Config) *Session {
	return &Session{fixed: &cfg}
}

// AddAPIOptions adds SDK middleware to every client built from now on
// (the test faults); it has no effect on clients already built.
func (s *Session) AddAPIOptions(fns ...func(*middleware.Stack) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiOptions = append(s.apiOptions, fns...)
	if s.loaded {
		s.cfg.APIOptions = append(s.cfg.APIOptions, fns...)
	}
}

// Config returns the SDK configuration, loading it on the first call.
func (s *Session) Config(ctx context.Context) (aws.Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.config(ctx)
}

// config is Config with s.mu held.
func (s *Session) config(ctx context.Context) (aws.Config, error) {
	if !s.loaded {
		if s.fixed != nil {
			s.cfg = *s.fixed
			s.cfg.APIOptions = append(append([]func(*middleware.Stack) error(nil), s.cfg.APIOptions...), s.apiOptions...)
		} else {
			s.cfg, s.err = s.load(ctx, s.apiOptions...)
		}
		s.loaded = true
	}
	return s.cfg, s.err
}

// client returns the session's client in *field, building it with build
// on the first call.
func client[T any](ctx context.Context, s *Session, field **T, build func(aws.Config) *T) (*T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *field != nil {
		return *field, nil
	}
	cfg, err := s.config(ctx)
	if err != nil {
		return nil, err
	}
	*field = build(cfg)
	return *field, nil
}

// DynamoDB returns s's the DynamoDB client (newDynamoDB's adjustments).
func DynamoDB(ctx context.Context, s *Session) (*dynamodb.Client, error) {
	return client(ctx, s, &s.dynamodb, newDynamoDB)
}

// DynamoDBStreams returns s's the DynamoDB Streams client.
func DynamoDBStreams(ctx context.Context, s *Session) (*dynamodbstreams.Client, error) {
	return client(ctx, s, &s.dynamodbStreams, newDynamoDBStreams)
}

// SQS returns s's the SQS client.
func SQS(ctx context.Context, s *Session) (*sqs.Client, error) {
	return client(ctx, s, &s.sqs, func(cfg aws.Config) *sqs.Client { return sqs.NewFromConfig(cfg) })
}

// EventBridge returns s's the EventBridge client.
func EventBridge(ctx context.Context, s *Session) (*eventbridge.Client, error) {
	return client(ctx, s, &s.eventBridge, func(cfg aws.Config) *eventbridge.Client { return eventbridge.NewFromConfig(cfg) })
}

// S3 returns s's the S3 client (path-style on a loopback endpoint).
func S3(ctx context.Context, s *Session) (*s3.Client, error) {
	return client(ctx, s, &s.s3, newS3)
}

// SecretsManager returns s's the Secrets Manager client.
func SecretsManager(ctx context.Context, s *Session) (*secretsmanager.Client, error) {
	return client(ctx, s, &s.secretsManager, func(cfg aws.Config) *secretsmanager.Client { return secretsmanager.NewFromConfig(cfg) })
}
