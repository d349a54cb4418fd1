package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
)

// SigningService is the SigV4 service name of API Gateway's invoke API.
const SigningService = "execute-api"

// executeAPIHost matches the default endpoint of an API Gateway API,
// <api-id>.execute-api.<region>.amazonaws.com (and .com.cn).
var executeAPIHost = regexp.MustCompile(`^[a-z0-9-]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)

// ExecuteAPIRegion reports whether host is an API Gateway endpoint
// (<api-id>.execute-api.<region>.amazonaws.com) and returns its region.
// A client signs requests to such a host with SigV4 by default.
func ExecuteAPIRegion(host string) (region string, ok bool) {
	m := executeAPIHost.FindStringSubmatch(strings.ToLower(strings.TrimSuffix(host, ".")))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// loadAWS fills the credentials and region the options left out from the
// standard chain, once.
func (c *Client) loadAWS(ctx context.Context) error {
	c.loadOnce.Do(func() {
		if c.creds != nil && c.region != "" {
			return
		}
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			c.loadErr = fmt.Errorf("client: loading AWS credentials for SigV4: %w", err)
			return
		}
		if c.creds == nil {
			c.creds = cfg.Credentials
		}
		if c.region == "" {
			c.region = cfg.Region
		}
	})
	if c.loadErr != nil {
		return c.loadErr
	}
	switch {
	case c.creds == nil:
		return errors.New("client: SigV4: no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID, or run on a role)")
	case c.region == "":
		return errors.New("client: SigV4: no region: the URL is not an execute-api URL and neither AWS_REGION nor the profile names one")
	}
	return nil
}

// signRequest signs req (whose body is body) with SigV4 for execute-api.
func (c *Client) signRequest(ctx context.Context, req *http.Request, body []byte) error {
	if err := c.loadAWS(ctx); err != nil {
		return err
	}
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("client: SigV4: retrieving AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningService, c.region, c.now().UTC()); err != nil {
		return fmt.Errorf("client: SigV4: %w", err)
	}
	return nil
}
