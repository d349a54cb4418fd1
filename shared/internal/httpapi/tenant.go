package httpapi

import (
	"errors"
	"fmt"
	"net/http"
)

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
