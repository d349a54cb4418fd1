package awsclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/qasync/qasync/shared/internal/awsclient"
)

// TestLoadEnvConfig: the Lambda session reads the region (AWS_REGION,
// else AWS_DEFAULT_REGION), the static credentials and each service's
// endpoint variable from the environment, and refuses an environment
// without credentials.
func TestLoadEnvConfig(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	t.Setenv("AWS_SESSION_TOKEN", "TOKEN")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:2")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "")
	ctx := context.Background()
	cfg, err := awsclient.LoadEnvConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if cfg.Region != "eu-west-1" || err != nil || creds.AccessKeyID != "AKID" || creds.SecretAccessKey != "SECRET" || creds.SessionToken != "TOKEN" {
		t.Fatalf("region %q, credentials %+v, %v", cfg.Region, creds, err)
	}
	if o := dynamodb.NewFromConfig(cfg).Options(); o.BaseEndpoint == nil || *o.BaseEndpoint != "http://127.0.0.1:1" {
		t.Errorf("DynamoDB endpoint %v, want AWS_ENDPOINT_URL_DYNAMODB", o.BaseEndpoint)
	}
	if o := secretsmanager.NewFromConfig(cfg).Options(); o.BaseEndpoint == nil || *o.BaseEndpoint != "http://127.0.0.1:2" {
		t.Errorf("Secrets Manager endpoint %v, want AWS_ENDPOINT_URL_SECRETS_MANAGER", o.BaseEndpoint)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	if _, err := awsclient.LoadEnvConfig(ctx); !errors.Is(err, awsclient.ErrNoEnvCredentials) {
		t.Errorf("no credentials: %v, want ErrNoEnvCredentials", err)
	}
}
