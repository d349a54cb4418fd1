package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// The tenant of a request is chosen here, for every deployment: from the
// X-Tenant-Id header (TenantFromHeader), fixed (FixedTenant), or from the
// caller's identity that API Gateway's authorizer put in the request
// context (TenantFromIAM, TenantFromIAMAccount, TenantFromJWT), which
// package apigw carries onto the request (WithGatewayContext). TenantFunc
// picks one by the http.tenant-source key.

// TenantHeader is the request header TenantFromHeader reads.
const TenantHeader = "X-Tenant-Id"

// DefaultTenant is the tenant of a request without a TenantHeader.
const DefaultTenant = "default"

// MaxTenantLen is the longest valid tenant id.
const MaxTenantLen = 128

// ErrInvalidTenant is wrapped by the errors TenantFromHeader returns. A
// TenantFunc error wrapping it has its message shown to the client; any
// other TenantFunc error gets a generic message (it is logged).
var ErrInvalidTenant = errors.New("invalid tenant")

// ErrUnauthenticated is wrapped by a tenant function's error when the
// request carries no caller identity at all (no authorizer context); the
// router answers it with 401.
var ErrUnauthenticated = errors.New("unauthenticated")

// ValidTenantID reports whether s is a well-formed tenant id: 1 to
// MaxTenantLen characters of A-Z, a-z, 0-9, '.', '_' and '-'.
func ValidTenantID(s string) bool {
	if len(s) == 0 || len(s) > MaxTenantLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// TenantFromHeader is the default Options.TenantFunc. It returns the
// X-Tenant-Id header, or DefaultTenant when the request has none. A header
// sent more than once, or whose value is not a valid tenant id (see
// ValidTenantID; an empty value is invalid), is an error wrapping
// ErrInvalidTenant, answered with 400.
//
// The header is trusted as sent: deploy it behind something (API Gateway
// authorizer, proxy) that sets or checks it.
func TenantFromHeader(r *http.Request) (string, error) {
	vs := r.Header.Values(TenantHeader)
	switch {
	case len(vs) == 0:
		return DefaultTenant, nil
	case len(vs) > 1:
		return "", fmt.Errorf("%w: the %s header must be sent at most once", ErrInvalidTenant, TenantHeader)
	case !ValidTenantID(vs[0]):
		return "", fmt.Errorf("%w: the %s header must be 1-%d characters of A-Z, a-z, 0-9, '.', '_' and '-'",
			ErrInvalidTenant, TenantHeader, MaxTenantLen)
	}
	return vs[0], nil
}

// FixedTenant returns a TenantFunc that puts every request in tenant t,
// ignoring any tenant header (single-tenant deployments). It panics if t
// is not a valid tenant id.
func FixedTenant(t string) func(*http.Request) (string, error) {
	if !ValidTenantID(t) {
		panic(fmt.Sprintf("httpapi: FixedTenant(%q): invalid tenant id", t))
	}
	return func(*http.Request) (string, error) { return t, nil }
}

// gatewayKey is the context key of the API Gateway request context.
type gatewayKey struct{}

// WithGatewayContext returns a copy of parent carrying rc, the request
// context of the API Gateway event a request came from (package apigw
// sets it on every request it builds), which the identity tenant
// functions read.
func WithGatewayContext(parent context.Context, rc events.APIGatewayV2HTTPRequestContext) context.Context {
	return context.WithValue(parent, gatewayKey{}, &rc)
}

// GatewayContext returns the API Gateway request context a request's
// context carries (WithGatewayContext), and whether it carries one.
func GatewayContext(ctx context.Context) (events.APIGatewayV2HTTPRequestContext, bool) {
	rc, ok := ctx.Value(gatewayKey{}).(*events.APIGatewayV2HTTPRequestContext)
	if !ok || rc == nil {
		return events.APIGatewayV2HTTPRequestContext{}, false
	}
	return *rc, true
}

// ErrNoIdentity is wrapped by the errors of TenantFromIAM,
// TenantFromIAMAccount and TenantFromJWT when the request carries no authorizer identity (the route
// has no IAM or JWT authorizer, or the request did not come through API
// Gateway). It matches ErrUnauthenticated, which the router answers
// with 401; other tenant errors match ErrInvalidTenant (400).
var ErrNoIdentity = errors.New("httpapi: no authorizer identity")

// tenantError is a tenant function's error: its message is the detail the
// client sees; it matches ErrInvalidTenant and, when noIdentity,
// ErrNoIdentity.
type tenantError struct {
	msg        string
	noIdentity bool
}

// Error returns the detail shown to the client.
func (e *tenantError) Error() string { return e.msg }

// Is makes errors.Is match ErrInvalidTenant for a bad tenant, and
// ErrNoIdentity and ErrUnauthenticated (answered with 401) for a
// missing identity.
func (e *tenantError) Is(target error) bool {
	if e.noIdentity {
		return target == ErrNoIdentity || target == ErrUnauthenticated
	}
	return target == ErrInvalidTenant
}

// invalidTenantDetail describes a valid tenant id, for error messages.
var invalidTenantDetail = fmt.Sprintf("1-%d characters of A-Z, a-z, 0-9, '.', '_' and '-'", MaxTenantLen)

// TenantFromIAM is an Options.TenantFunc for routes with an IAM
// authorizer: the tenant is the calling principal, read from
// requestContext.authorizer.iam.userArn (see TenantOfPrincipal): the IAM
// role of an assumed-role session (never the session name, which the
// caller picks), or the IAM user. So each client that has its own IAM
// role (or user) has its own tenant, and clients of one account do not
// see each other's executions. A request without a caller ARN gets an
// error wrapping ErrNoIdentity (401); an ARN that names no role or user
// (a federated user, another kind of principal), or whose account differs
// from authorizer.iam.accountId, is refused with an error wrapping
// ErrInvalidTenant (400).
func TenantFromIAM(r *http.Request) (string, error) {
	iam, err := iamCaller(r)
	if err != nil {
		return "", err
	}
	if iam.UserARN == "" {
		return "", &tenantError{msg: "the request carries no IAM caller ARN", noIdentity: true}
	}
	tenant, account, err := principalTenant(iam.UserARN)
	if err != nil {
		return "", err
	}
	if iam.AccountID != "" && iam.AccountID != account {
		return "", &tenantError{msg: "the IAM caller's ARN and account id disagree"}
	}
	return tenant, nil
}

// TenantFromIAMAccount is an Options.TenantFunc for routes with
// an IAM authorizer (http.tenant-source=iam-account): the tenant is the
// AWS account id of the signing caller
// (requestContext.authorizer.iam.accountId), so every principal of one
// account shares a tenant. Without one the error wraps ErrNoIdentity;
// every error wraps ErrInvalidTenant.
func TenantFromIAMAccount(r *http.Request) (string, error) {
	iam, err := iamCaller(r)
	if err != nil {
		return "", err
	}
	if iam.AccountID == "" {
		return "", &tenantError{msg: "the request carries no IAM caller identity", noIdentity: true}
	}
	if !ValidTenantID(iam.AccountID) {
		return "", &tenantError{msg: "the IAM caller's account id is not a valid tenant id (" + invalidTenantDetail + ")"}
	}
	return iam.AccountID, nil
}

// iamCaller returns the IAM authorizer identity of r, or an error
// wrapping ErrNoIdentity.
func iamCaller(r *http.Request) (*events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription, error) {
	rc, ok := GatewayContext(r.Context())
	if !ok || rc.Authorizer == nil || rc.Authorizer.IAM == nil {
		return nil, &tenantError{msg: "the request carries no IAM caller identity", noIdentity: true}
	}
	return rc.Authorizer.IAM, nil
}

// TenantOfPrincipal returns the tenant that TenantFromIAM gives a caller
// whose ARN (authorizer.iam.userArn) is arn, for example to tell a client
// its tenant or to grant it one:
//
//	arn:aws:sts::123456789012:assumed-role/Role/session  -> 123456789012.role.Role
//	arn:aws:iam::123456789012:role/path/Role             -> 123456789012.role.Role
//	arn:aws:iam::123456789012:user/path/User             -> 123456789012.user.User
//	arn:aws:iam::123456789012:root                       -> 123456789012.root
//
// Role and user names are unique within an account whatever their path,
// so the path is left out, and a role's sessions all share its tenant. A
// name that does not fit a tenant id (IAM names may hold '+', '=', ','
// and '@') gives the stable form <account>.role-sha256.<32 hex digits>
// (or user-sha256), the first 128 bits of the SHA-256 of the name; the
// kind differs from the readable one, so the two forms never meet. An
// ARN of another principal (a federated user, whose name its federator
// chooses; a service) is refused with an error wrapping
// ErrInvalidTenant.
func TenantOfPrincipal(arn string) (string, error) {
	t, _, err := principalTenant(arn)
	return t, err
}

// principalTenant is TenantOfPrincipal, also returning the ARN's account.
func principalTenant(arn string) (tenant, account string, err error) {
	unusable := func(why string) (string, string, error) {
		return "", "", &tenantError{msg: "the IAM caller's ARN " + why + "; call with an IAM role or user"}
	}
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] == "" || parts[3] != "" {
		return unusable("is not an IAM or STS principal ARN")
	}
	service, account, resource := parts[2], parts[4], parts[5]
	if !awsAccountID(account) {
		return unusable("has no 12-digit account id")
	}
	var kind, name string
	segs := strings.Split(resource, "/")
	switch {
	case service == "iam" && resource == "root":
		return account + ".root", account, nil
	case service == "sts" && segs[0] == "assumed-role" && len(segs) == 3 && segs[2] != "":
		kind, name = "role", segs[1] // segs[2] is the session name: never part of the tenant
	case service == "sts" && segs[0] == "federated-user":
		return unusable("names a federated user, whose name the federating caller chooses")
	case service == "iam" && (segs[0] == "role" || segs[0] == "user") && len(segs) >= 2:
		kind, name = segs[0], segs[len(segs)-1]
	default:
		return unusable("names no IAM role or user")
	}
	if name == "" {
		return unusable("names no IAM role or user")
	}
	if t := account + "." + kind + "." + name; ValidTenantID(t) {
		return t, account, nil
	}
	sum := sha256.Sum256([]byte(name))
	return account + "." + kind + "-sha256." + hex.EncodeToString(sum[:16]), account, nil
}

// awsAccountID reports whether s is a 12-digit AWS account id.
func awsAccountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// TenantFromJWT returns an Options.TenantFunc for routes with a
// JWT authorizer: the tenant is the value of claim in
// requestContext.authorizer.jwt.claims. A request without the claim gets
// an error wrapping ErrNoIdentity; a value that is not a valid tenant id
// (see ValidTenantID) is refused without being quoted. Every
// error wraps ErrInvalidTenant. It panics if claim is empty.
func TenantFromJWT(claim string) func(*http.Request) (string, error) {
	if claim == "" {
		panic("httpapi: TenantFromJWT: empty claim name")
	}
	return func(r *http.Request) (string, error) {
		rc, ok := GatewayContext(r.Context())
		if !ok || rc.Authorizer == nil || rc.Authorizer.JWT == nil {
			return "", &tenantError{msg: "the request carries no JWT authorizer identity", noIdentity: true}
		}
		v, ok := rc.Authorizer.JWT.Claims[claim]
		if !ok || v == "" {
			return "", &tenantError{msg: fmt.Sprintf("the request's JWT has no %q claim", claim)}
		}
		if !ValidTenantID(v) {
			return "", &tenantError{msg: fmt.Sprintf("the JWT claim %q is not a valid tenant id (%s)", claim, invalidTenantDetail)}
		}
		return v, nil
	}
}

// TenantFunc returns the tenant function that source names (the
// http.tenant-source key): header -> TenantFromHeader, none ->
// FixedTenant of DefaultTenant, iam -> TenantFromIAM, iam-account ->
// TenantFromIAMAccount, jwt -> TenantFromJWT of claim (http.tenant-claim).
// An unknown source (which config validation refuses) yields a function
// that fails every request, never one that trusts it.
func TenantFunc(source, claim string) func(*http.Request) (string, error) {
	switch source {
	case "header":
		return TenantFromHeader
	case "none":
		return FixedTenant(DefaultTenant)
	case "iam":
		return TenantFromIAM
	case "iam-account":
		return TenantFromIAMAccount
	case "jwt":
		if claim == "" {
			break
		}
		return TenantFromJWT(claim)
	}
	err := fmt.Errorf("httpapi: unsupported tenant source %q", source)
	return func(*http.Request) (string, error) { return "", err }
}
