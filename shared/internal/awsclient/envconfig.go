package awsclient

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/endpointcreds"
	"github.com/aws/smithy-go/middleware"
)

// ErrNoEnvCredentials is LoadEnvConfig's error when the environment
// holds no credentials.
var ErrNoEnvCredentials = errors.New("awsclient: no AWS credentials in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_CONTAINER_CREDENTIALS_FULL_URI), which the Lambda runtime always sets")

// LoadEnvConfig reads the SDK configuration from the environment alone,
// the way the Lambda runtime hands it to a function: the region
// (AWS_REGION, else AWS_DEFAULT_REGION), the execution role's credentials
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or a
// container credentials endpoint, AWS_CONTAINER_CREDENTIALS_FULL_URI with
// AWS_CONTAINER_AUTHORIZATION_TOKEN), and endpoints (AWS_ENDPOINT_URL,
// and AWS_ENDPOINT_URL_<SERVICE> per service, as the local stack sets
// them), with LoadConfig's retries and HTTP client (HTTPClient). It leaves out what LoadDefaultConfig
// adds for other hosts (shared config and credentials files, SSO,
// assume-role, web identity, instance metadata): a function never uses
// them, and they are an eighth of a function's binary. Without
// credentials in the environment it fails with ErrNoEnvCredentials.
func LoadEnvConfig(_ context.Context, apiOptions ...func(*middleware.Stack) error) (aws.Config, error) {
	cfg := aws.Config{
		Region:        os.Getenv("AWS_REGION"),
		ConfigSources: []any{envEndpoints{}},
		APIOptions:    apiOptions,
		HTTPClient:    HTTPClient(),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 5
				o.RateLimiter = ratelimit.None
			})
		},
	}
	if cfg.Region == "" {
		cfg.Region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if u := os.Getenv("AWS_ENDPOINT_URL"); u != "" {
		cfg.BaseEndpoint = aws.String(u)
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	switch uri := os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI"); {
	case id != "" && secret != "":
		cfg.Credentials = credentials.NewStaticCredentialsProvider(id, secret, os.Getenv("AWS_SESSION_TOKEN"))
	case uri != "":
		cfg.Credentials = aws.NewCredentialsCache(endpointcreds.New(uri, func(o *endpointcreds.Options) {
			o.AuthorizationToken = os.Getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN")
		}))
	default:
		return aws.Config{}, ErrNoEnvCredentials
	}
	return cfg, nil
}

// envEndpoints is the configuration source of a service's endpoint,
// AWS_ENDPOINT_URL_<SERVICE> (the service's SDK id, upper case, spaces as
// underscores: AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SECRETS_MANAGER).
type envEndpoints struct{}

// GetServiceBaseEndpoint is what the SDK's clients ask a configuration
// source for their endpoint.
func (envEndpoints) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	v := os.Getenv("AWS_ENDPOINT_URL_" + strings.ReplaceAll(strings.ToUpper(sdkID), " ", "_"))
	return v, v != "", nil
}
