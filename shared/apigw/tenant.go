package apigw

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/httpapi"
)

// ErrNoIdentity is wrapped by the errors of TenantFromIAM and
// TenantFromJWT when the request carries no authorizer identity (the route
// has no IAM or JWT authorizer, or the request did not come through API
// Gateway). It matches httpapi.ErrUnauthenticated, which the router answers
// with 401; other tenant errors match httpapi.ErrInvalidTenant (400).
var ErrNoIdentity = errors.New("apigw: no authorizer identity")

// tenantError is a tenant function's error: its message is the detail the
// client sees; it matches httpapi.ErrInvalidTenant and, when noIdentity,
// ErrNoIdentity.
type tenantError struct {
	msg        string
	noIdentity bool
}

// Error returns the detail shown to the client.
func (e *tenantError) Error() string { return e.msg }

// Is makes errors.Is match httpapi.ErrInvalidTenant for a bad tenant, and
// ErrNoIdentity and httpapi.ErrUnauthenticated (answered with 401) for a
// missing identity.
func (e *tenantError) Is(target error) bool {
	if e.noIdentity {
		return target == ErrNoIdentity || target == httpapi.ErrUnauthenticated
	}
	return target == httpapi.ErrInvalidTenant
}

// invalidTenantDetail describes a valid tenant id, for error messages.
var invalidTenantDetail = fmt.Sprintf("1-%d characters of A-Z, a-z, 0-9, '.', '_' and '-'", httpapi.MaxTenantLen)

// TenantFromIAM is an httpapi.Options.TenantFunc for routes with an IAM
// authorizer: the tenant is the AWS account id of the signing caller
// (requestContext.authorizer.iam.accountId). Without one the error wraps
// ErrNoIdentity; every error wraps httpapi.ErrInvalidTenant.
func TenantFromIAM(r *http.Request) (string, error) {
	rc, ok := FromContext(r.Context())
	if !ok || rc.Authorizer == nil || rc.Authorizer.IAM == nil || rc.Authorizer.IAM.AccountID == "" {
		return "", &tenantError{msg: "the request carries no IAM caller identity", noIdentity: true}
	}
	id := rc.Authorizer.IAM.AccountID
	if !httpapi.ValidTenantID(id) {
		return "", &tenantError{msg: "the IAM caller's account id is not a valid tenant id (" + invalidTenantDetail + ")"}
	}
	return id, nil
}

// TenantFromJWT returns an httpapi.Options.TenantFunc for routes with a
// JWT authorizer: the tenant is the value of claim in
// requestContext.authorizer.jwt.claims. A request without the claim gets
// an error wrapping ErrNoIdentity; a value that is not a valid tenant id
// (see httpapi.ValidTenantID) is refused without being quoted. Every
// error wraps httpapi.ErrInvalidTenant. It panics if claim is empty.
func TenantFromJWT(claim string) func(*http.Request) (string, error) {
	if claim == "" {
		panic("apigw: TenantFromJWT: empty claim name")
	}
	return func(r *http.Request) (string, error) {
		rc, ok := FromContext(r.Context())
		if !ok || rc.Authorizer == nil || rc.Authorizer.JWT == nil {
			return "", &tenantError{msg: "the request carries no JWT authorizer identity", noIdentity: true}
		}
		v, ok := rc.Authorizer.JWT.Claims[claim]
		if !ok || v == "" {
			return "", &tenantError{msg: fmt.Sprintf("the request's JWT has no %q claim", claim)}
		}
		if !httpapi.ValidTenantID(v) {
			return "", &tenantError{msg: fmt.Sprintf("the JWT claim %q is not a valid tenant id (%s)", claim, invalidTenantDetail)}
		}
		return v, nil
	}
}

// TenantFunc returns the tenant function that c.TenantSource names:
// header -> httpapi.TenantFromHeader, none -> httpapi.FixedTenant of
// httpapi.DefaultTenant, iam -> TenantFromIAM, jwt -> TenantFromJWT of
// c.TenantClaim. An unknown source (which config validation refuses)
// yields a function that fails every request, never one that trusts it.
func TenantFunc(c config.Config) func(*http.Request) (string, error) {
	switch c.TenantSource {
	case "header":
		return httpapi.TenantFromHeader
	case "none":
		return httpapi.FixedTenant(httpapi.DefaultTenant)
	case "iam":
		return TenantFromIAM
	case "jwt":
		if c.TenantClaim == "" {
			break
		}
		return TenantFromJWT(c.TenantClaim)
	}
	err := fmt.Errorf("apigw: unsupported tenant source %q", c.TenantSource)
	return func(*http.Request) (string, error) { return "", err }
}
