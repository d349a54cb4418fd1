package wiring

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/qasync/qasync/shared/config"
)

// SecretGetter is the one Secrets Manager call ResolveAwaitSecret makes
// (*secretsmanager.Client implements it).
type SecretGetter interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Secrets is the Options.Secrets part of a process that parks or
// completes awaits: ResolveAwaitSecret through the client that connect
// returns, asked for only when the secret is to be fetched.
func Secrets(connect func(context.Context) (SecretGetter, error)) func(context.Context, *config.Config) error {
	return func(ctx context.Context, c *config.Config) error {
		if c.AwaitResumeTokenSecretARN == "" || c.AwaitResumeTokenSecret != "" {
			return nil
		}
		sm, err := connect(ctx)
		if err != nil {
			return fmt.Errorf("%s: AWS configuration: %w", config.FullKey("await.resume-token-secret-arn"), err)
		}
		return ResolveAwaitSecret(ctx, c, sm)
	}
}

// ResolveAwaitSecret fills c.AwaitResumeTokenSecret from the Secrets
// Manager secret of await.resume-token-secret-arn, once, at startup: the
// deployed functions get the secret's ARN in their environment, never its
// value. It does nothing when the ARN is empty or the secret value is
// already set (an explicit value wins). A failed fetch, or a secret
// without a string value, is an error naming the key; the value never
// appears in an error.
func ResolveAwaitSecret(ctx context.Context, c *config.Config, sm SecretGetter) error {
	if c.AwaitResumeTokenSecretARN == "" || c.AwaitResumeTokenSecret != "" {
		return nil
	}
	key := config.FullKey("await.resume-token-secret-arn")
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(c.AwaitResumeTokenSecretARN)})
	if err != nil {
		return fmt.Errorf("%s: fetch the resume-token secret %s: %w", key, c.AwaitResumeTokenSecretARN, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return fmt.Errorf("%s: the secret %s has no string value", key, c.AwaitResumeTokenSecretARN)
	}
	c.AwaitResumeTokenSecret = *out.SecretString
	return nil
}
