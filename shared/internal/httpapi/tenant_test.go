package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/httpapi"
)

// withRC returns a request whose context carries rc, as NewRequest builds.
func withRC(rc events.APIGatewayV2HTTPRequestContext) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	return r.WithContext(httpapi.WithGatewayContext(r.Context(), rc))
}

// iamRC is a request context of an IAM-authorized route with the
// caller's account and ARN.
func iamRC(account, arn string) events.APIGatewayV2HTTPRequestContext {
	return events.APIGatewayV2HTTPRequestContext{Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: account, UserARN: arn}}}
}

// TestTenantFromIAMIsThePrincipalNotTheAccount: with tenant-source iam
// the tenant is the caller's IAM role (of an assumed-role session, never
// the session name) or IAM user, readable when the name fits a tenant id
// and a stable hash otherwise; callers of one account with different
// roles get different tenants; a federated user, a malformed ARN or one
// of another account is refused (400) and a request without a caller
// ARN is unauthenticated (401).
func TestTenantFromIAMIsThePrincipalNotTheAccount(t *testing.T) {
	const acct = "123456789012"
	long := strings.Repeat("R", 64) // the longest IAM role name still fits
	for _, tc := range []struct {
		name, arn, want string
	}{
		{"assumed role", "arn:aws:sts::123456789012:assumed-role/order-service/i-0abc123", acct + ".role.order-service"},
		{"another session of the same role", "arn:aws:sts::123456789012:assumed-role/order-service/someone-else", acct + ".role.order-service"},
		{"session name with odd characters", "arn:aws:sts::123456789012:assumed-role/billing/user@example.com", acct + ".role.billing"},
		{"SSO permission set", "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_0123abcd/ada", acct + ".role.AWSReservedSSO_Admin_0123abcd"},
		{"role with dots", "arn:aws:sts::123456789012:assumed-role/svc.orders.v2/s", acct + ".role.svc.orders.v2"},
		{"longest role name", "arn:aws:sts::123456789012:assumed-role/" + long + "/s", acct + ".role." + long},
		{"role arn with a path", "arn:aws:iam::123456789012:role/teams/orders/order-service", acct + ".role.order-service"},
		{"iam user", "arn:aws:iam::123456789012:user/ada", acct + ".user.ada"},
		{"iam user with a path", "arn:aws:iam::123456789012:user/division/team/ada", acct + ".user.ada"},
		{"root", "arn:aws:iam::123456789012:root", acct + ".root"},
		{"other partition", "arn:aws-cn:sts::123456789012:assumed-role/order-service/s", acct + ".role.order-service"},
		{"role name with odd characters", "arn:aws:sts::123456789012:assumed-role/ops+admin=1,x@y/s", acct + ".role-sha256." + sha128("ops+admin=1,x@y")},
		{"user name with odd characters", "arn:aws:iam::123456789012:user/ada@example.com", acct + ".user-sha256." + sha128("ada@example.com")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpapi.TenantFromIAM(withRC(iamRC(acct, tc.arn)))
			if err != nil || got != tc.want {
				t.Fatalf("tenant %q, %v; want %q", got, err, tc.want)
			}
			if !httpapi.ValidTenantID(got) {
				t.Fatalf("tenant %q is not a valid tenant id", got)
			}
			if alone, err := httpapi.TenantOfPrincipal(tc.arn); err != nil || alone != got {
				t.Fatalf("TenantOfPrincipal %q, %v; want %q", alone, err, got)
			}
		})
	}
	// Two roles of one account: two tenants.
	a, _ := httpapi.TenantFromIAM(withRC(iamRC(acct, "arn:aws:sts::123456789012:assumed-role/client-a/s")))
	b, _ := httpapi.TenantFromIAM(withRC(iamRC(acct, "arn:aws:sts::123456789012:assumed-role/client-b/s")))
	if a == b {
		t.Errorf("two roles of one account share tenant %q", a)
	}
	// The session name never reaches the tenant or the error.
	for _, arn := range []string{"arn:aws:sts::123456789012:assumed-role/r/s3cr3t-session", "arn:aws:sts::123456789012:federated-user/s3cr3t-session"} {
		got, err := httpapi.TenantFromIAM(withRC(iamRC(acct, arn)))
		if strings.Contains(got, "s3cr3t") || (err != nil && strings.Contains(err.Error(), "s3cr3t")) {
			t.Errorf("%s: the session name leaked: %q %v", arn, got, err)
		}
	}

	for name, arn := range map[string]string{
		"federated user":           "arn:aws:sts::123456789012:federated-user/ada",
		"not an arn":               "AROAEXAMPLE:session",
		"service principal":        "arn:aws:iam::123456789012:oidc-provider/example.com",
		"assumed role, no role":    "arn:aws:sts::123456789012:assumed-role//s",
		"assumed role, no session": "arn:aws:sts::123456789012:assumed-role/r",
		"bad account":              "arn:aws:sts::1234:assumed-role/r/s",
		"region set":               "arn:aws:sts:us-east-1:123456789012:assumed-role/r/s",
		"user without a name":      "arn:aws:iam::123456789012:user/",
		"other account":            "arn:aws:sts::210987654321:assumed-role/r/s",
	} {
		_, err := httpapi.TenantFromIAM(withRC(iamRC(acct, arn)))
		if !errors.Is(err, httpapi.ErrInvalidTenant) || errors.Is(err, httpapi.ErrNoIdentity) {
			t.Errorf("%s: %v, want an invalid-tenant error", name, err)
		}
	}
	for name, r := range map[string]*http.Request{
		"no context":    httpRequest(),
		"no authorizer": withRC(events.APIGatewayV2HTTPRequestContext{}),
		"no arn":        withRC(iamRC(acct, "")),
	} {
		_, err := httpapi.TenantFromIAM(r)
		if !errors.Is(err, httpapi.ErrNoIdentity) || !errors.Is(err, httpapi.ErrUnauthenticated) || errors.Is(err, httpapi.ErrInvalidTenant) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// sha128 is the hex of the first 128 bits of the SHA-256 of s.
func sha128(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// TestTenantFromIAMAccount: tenant-source iam-account keeps the caller's
// account as the tenant, shared by every principal of the account.
func TestTenantFromIAMAccount(t *testing.T) {
	if got, err := httpapi.TenantFromIAMAccount(withRC(iamRC("123456789012", "arn:aws:sts::123456789012:assumed-role/r/s"))); err != nil || got != "123456789012" {
		t.Errorf("%q %v", got, err)
	}
	for name, r := range map[string]*http.Request{
		"no context":    httpRequest(),
		"no authorizer": withRC(events.APIGatewayV2HTTPRequestContext{}),
		"empty account": withRC(iamRC("", "")),
	} {
		_, err := httpapi.TenantFromIAMAccount(r)
		if !errors.Is(err, httpapi.ErrNoIdentity) || !errors.Is(err, httpapi.ErrUnauthenticated) || errors.Is(err, httpapi.ErrInvalidTenant) {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := httpapi.TenantFromIAMAccount(withRC(iamRC("12 34", "")))
	if !errors.Is(err, httpapi.ErrInvalidTenant) || errors.Is(err, httpapi.ErrNoIdentity) {
		t.Errorf("invalid account: %v", err)
	}
}

func httpRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	return r
}

func TestTenantFromJWT(t *testing.T) {
	jwt := func(claims map[string]string) *http.Request {
		return withRC(events.APIGatewayV2HTTPRequestContext{Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}})
	}
	f := httpapi.TenantFromJWT("tenant_id")
	if got, err := f(jwt(map[string]string{"tenant_id": "acme", "sub": "u1"})); err != nil || got != "acme" {
		t.Errorf("%q %v", got, err)
	}
	if _, err := f(jwt(map[string]string{"sub": "u1"})); errors.Is(err, httpapi.ErrNoIdentity) || !errors.Is(err, httpapi.ErrInvalidTenant) {
		t.Errorf("missing claim (an identity without a tenant: 400, not 401): %v", err)
	}
	if _, err := f(httpRequest()); !errors.Is(err, httpapi.ErrNoIdentity) {
		t.Errorf("no authorizer: %v", err)
	}
	_, err := f(jwt(map[string]string{"tenant_id": "evil|s3cr3t"}))
	if !errors.Is(err, httpapi.ErrInvalidTenant) || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("invalid claim: %v", err)
	}
}

func TestTenantFunc(t *testing.T) {
	var c struct{ TenantSource, TenantClaim string }
	r := withRC(events.APIGatewayV2HTTPRequestContext{Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:sts::123456789012:assumed-role/client-a/s"},
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"org": "acme"}},
	}})
	r.Header.Set(httpapi.TenantHeader, "from-header")
	for source, want := range map[string]string{"header": "from-header", "none": httpapi.DefaultTenant, "iam": "123456789012.role.client-a",
		"iam-account": "123456789012", "jwt": "acme"} {
		c.TenantSource, c.TenantClaim = source, "org"
		if got, err := httpapi.TenantFunc(c.TenantSource, c.TenantClaim)(r); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", source, got, err, want)
		}
	}
	c.TenantSource = "bogus"
	if _, err := httpapi.TenantFunc(c.TenantSource, c.TenantClaim)(r); err == nil {
		t.Error("an unknown source accepted the request")
	}
}
