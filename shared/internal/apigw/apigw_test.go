package apigw_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/apigw"
	"github.com/qasync/qasync/shared/internal/httpapi"
)

// event is a GET through the $default stage of the execute-api endpoint.
func event(method, path, query string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: path, RawQueryString: query,
		Headers: map[string]string{"host": "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", "user-agent": "test"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			APIID: "a1b2c3d4e5", DomainName: "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", DomainPrefix: "a1b2c3d4e5",
			Stage: "$default", RequestID: "req-1",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "203.0.113.10"},
		},
	}
}

func TestNewRequest(t *testing.T) {
	ev := event(http.MethodPost, "/v1/pipelines/p%2Fq/executions", "a=1&b=two%20words&a=3")
	ev.Headers["content-type"] = "application/octet-stream"
	ev.Headers["idempotency-key"] = "k-1"
	ev.Headers["x-multi"] = "one,two"
	ev.Cookies = []string{"s=1", "t=2"}
	ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}), true
	type key struct{}
	r, err := apigw.NewRequest(context.WithValue(context.Background(), key{}, "v"), ev)
	if err != nil {
		t.Fatal(err)
	}
	if r.Method != http.MethodPost || r.URL.EscapedPath() != "/v1/pipelines/p%2Fq/executions" || r.URL.Path != "/v1/pipelines/p/q/executions" {
		t.Errorf("method %s path %q (%q)", r.Method, r.URL.EscapedPath(), r.URL.Path)
	}
	if q := r.URL.Query(); len(q["a"]) != 2 || q.Get("b") != "two words" {
		t.Errorf("query %v", q)
	}
	if r.RequestURI != "/v1/pipelines/p%2Fq/executions?a=1&b=two%20words&a=3" {
		t.Errorf("RequestURI %q", r.RequestURI)
	}
	if r.Host != "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com" || r.RemoteAddr != "203.0.113.10" || r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		t.Errorf("host %q remote %q proto %s", r.Host, r.RemoteAddr, r.Proto)
	}
	if r.Header.Get("Idempotency-Key") != "k-1" || r.Header.Get("X-Multi") != "one,two" || r.Header.Get("Cookie") != "s=1; t=2" {
		t.Errorf("headers %v", r.Header)
	}
	if c, err := r.Cookie("t"); err != nil || c.Value != "2" {
		t.Errorf("cookie t: %v %v", c, err)
	}
	b, _ := io.ReadAll(r.Body)
	if string(b) != "\x00\x01\x02\xff" || r.ContentLength != 4 {
		t.Errorf("body %q length %d", b, r.ContentLength)
	}
	if r.Context().Value(key{}) != "v" {
		t.Error("the invocation context is lost")
	}
	if rc, ok := apigw.FromContext(r.Context()); !ok || rc.RequestID != "req-1" {
		t.Errorf("request context %+v %v", rc, ok)
	}
}

func TestNewRequestStripsNamedStage(t *testing.T) {
	ev := event(http.MethodGet, "/prod/v1/executions/x", "")
	ev.RequestContext.Stage = "prod"
	r, err := apigw.NewRequest(context.Background(), ev)
	if err != nil || r.URL.Path != "/v1/executions/x" {
		t.Fatalf("%v %v", r.URL, err)
	}
	// Behind a custom domain the path carries no stage.
	ev = event(http.MethodGet, "/prod/v1/executions/x", "")
	ev.RequestContext.Stage, ev.RequestContext.DomainName, ev.RequestContext.DomainPrefix = "prod", "api.example.com", "api"
	if r, err = apigw.NewRequest(context.Background(), ev); err != nil || r.URL.Path != "/prod/v1/executions/x" {
		t.Fatalf("%v %v", r.URL, err)
	}
}

func TestNewRequestRefusesBadEvents(t *testing.T) {
	for name, mutate := range map[string]func(*events.APIGatewayV2HTTPRequest){
		"no method":  func(e *events.APIGatewayV2HTTPRequest) { e.RequestContext.HTTP.Method = "" },
		"bad base64": func(e *events.APIGatewayV2HTTPRequest) { e.Body, e.IsBase64Encoded = "@@@", true },
		"bad path":   func(e *events.APIGatewayV2HTTPRequest) { e.RawPath = "/a%zz" },
		"bad method": func(e *events.APIGatewayV2HTTPRequest) { e.RequestContext.HTTP.Method = "GE T" },
	} {
		ev := event(http.MethodGet, "/healthz", "")
		mutate(&ev)
		if _, err := apigw.NewRequest(context.Background(), ev); !errors.Is(err, apigw.ErrBadEvent) {
			t.Errorf("%s: err %v", name, err)
		}
		resp, err := apigw.Handler(http.NotFoundHandler())(context.Background(), ev)
		if err != nil || resp.StatusCode != http.StatusBadRequest || resp.Headers["Content-Type"] != httpapi.ContentTypeProblem {
			t.Errorf("%s: %d %v %v", name, resp.StatusCode, resp.Headers, err)
		}
		var p httpapi.Problem
		if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Status != 400 || p.Detail == "" {
			t.Errorf("%s: problem %+v %v", name, p, err)
		}
	}
}

func TestHandlerResponse(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("X-Many", "a")
		w.Header().Add("X-Many", "b")
		http.SetCookie(w, &http.Cookie{Name: "s", Value: "1"})
		http.SetCookie(w, &http.Cookie{Name: "t", Value: "2"})
		switch r.URL.Path {
		case "/binary":
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte{0x0a, 0x03, 'a', 'b', 'c'})
		case "/latin1":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte{'c', 'a', 'f', 0xe9})
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"x":"é"}`))
			w.Header().Set("X-Late", "ignored") // after WriteHeader: not sent
		}
	})
	do := func(method, path string) events.APIGatewayV2HTTPResponse {
		resp, err := apigw.Handler(h)(context.Background(), event(method, path, ""))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := do(http.MethodGet, "/json")
	if resp.StatusCode != http.StatusConflict || resp.IsBase64Encoded || resp.Body != `{"x":"é"}` {
		t.Errorf("json: %d %v %q", resp.StatusCode, resp.IsBase64Encoded, resp.Body)
	}
	if resp.Headers["X-Many"] != "a,b" || resp.Headers["Set-Cookie"] != "" || strings.Join(resp.Cookies, "|") != "s=1|t=2" {
		t.Errorf("headers %v cookies %v", resp.Headers, resp.Cookies)
	}
	if _, ok := resp.Headers["X-Late"]; ok {
		t.Error("a header set after WriteHeader was sent")
	}
	resp = do(http.MethodGet, "/binary")
	if b, _ := base64.StdEncoding.DecodeString(resp.Body); resp.StatusCode != http.StatusCreated || !resp.IsBase64Encoded || string(b) != "\x0a\x03abc" {
		t.Errorf("binary: %d %v %q", resp.StatusCode, resp.IsBase64Encoded, resp.Body)
	}
	if resp = do(http.MethodGet, "/latin1"); !resp.IsBase64Encoded {
		t.Error("invalid UTF-8 text sent as text")
	}
	if resp = do(http.MethodGet, "/empty"); resp.StatusCode != http.StatusNoContent || resp.Body != "" || resp.IsBase64Encoded {
		t.Errorf("empty: %d %q", resp.StatusCode, resp.Body)
	}
	if resp = do(http.MethodHead, "/json"); resp.StatusCode != http.StatusConflict || resp.Body != "" {
		t.Errorf("HEAD: %d %q", resp.StatusCode, resp.Body)
	}
}

// withRC returns a request whose context carries rc, as NewRequest builds.
func withRC(rc events.APIGatewayV2HTTPRequestContext) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	return r.WithContext(apigw.NewContext(r.Context(), rc))
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
			got, err := apigw.TenantFromIAM(withRC(iamRC(acct, tc.arn)))
			if err != nil || got != tc.want {
				t.Fatalf("tenant %q, %v; want %q", got, err, tc.want)
			}
			if !httpapi.ValidTenantID(got) {
				t.Fatalf("tenant %q is not a valid tenant id", got)
			}
			if alone, err := apigw.TenantOfPrincipal(tc.arn); err != nil || alone != got {
				t.Fatalf("TenantOfPrincipal %q, %v; want %q", alone, err, got)
			}
		})
	}
	// Two roles of one account: two tenants.
	a, _ := apigw.TenantFromIAM(withRC(iamRC(acct, "arn:aws:sts::123456789012:assumed-role/client-a/s")))
	b, _ := apigw.TenantFromIAM(withRC(iamRC(acct, "arn:aws:sts::123456789012:assumed-role/client-b/s")))
	if a == b {
		t.Errorf("two roles of one account share tenant %q", a)
	}
	// The session name never reaches the tenant or the error.
	for _, arn := range []string{"arn:aws:sts::123456789012:assumed-role/r/s3cr3t-session", "arn:aws:sts::123456789012:federated-user/s3cr3t-session"} {
		got, err := apigw.TenantFromIAM(withRC(iamRC(acct, arn)))
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
		_, err := apigw.TenantFromIAM(withRC(iamRC(acct, arn)))
		if !errors.Is(err, httpapi.ErrInvalidTenant) || errors.Is(err, apigw.ErrNoIdentity) {
			t.Errorf("%s: %v, want an invalid-tenant error", name, err)
		}
	}
	for name, r := range map[string]*http.Request{
		"no context":    httpRequest(),
		"no authorizer": withRC(events.APIGatewayV2HTTPRequestContext{}),
		"no arn":        withRC(iamRC(acct, "")),
	} {
		_, err := apigw.TenantFromIAM(r)
		if !errors.Is(err, apigw.ErrNoIdentity) || !errors.Is(err, httpapi.ErrUnauthenticated) || errors.Is(err, httpapi.ErrInvalidTenant) {
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
	if got, err := apigw.TenantFromIAMAccount(withRC(iamRC("123456789012", "arn:aws:sts::123456789012:assumed-role/r/s"))); err != nil || got != "123456789012" {
		t.Errorf("%q %v", got, err)
	}
	for name, r := range map[string]*http.Request{
		"no context":    httpRequest(),
		"no authorizer": withRC(events.APIGatewayV2HTTPRequestContext{}),
		"empty account": withRC(iamRC("", "")),
	} {
		_, err := apigw.TenantFromIAMAccount(r)
		if !errors.Is(err, apigw.ErrNoIdentity) || !errors.Is(err, httpapi.ErrUnauthenticated) || errors.Is(err, httpapi.ErrInvalidTenant) {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := apigw.TenantFromIAMAccount(withRC(iamRC("12 34", "")))
	if !errors.Is(err, httpapi.ErrInvalidTenant) || errors.Is(err, apigw.ErrNoIdentity) {
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
	f := apigw.TenantFromJWT("tenant_id")
	if got, err := f(jwt(map[string]string{"tenant_id": "acme", "sub": "u1"})); err != nil || got != "acme" {
		t.Errorf("%q %v", got, err)
	}
	if _, err := f(jwt(map[string]string{"sub": "u1"})); errors.Is(err, apigw.ErrNoIdentity) || !errors.Is(err, httpapi.ErrInvalidTenant) {
		t.Errorf("missing claim (an identity without a tenant: 400, not 401): %v", err)
	}
	if _, err := f(httpRequest()); !errors.Is(err, apigw.ErrNoIdentity) {
		t.Errorf("no authorizer: %v", err)
	}
	_, err := f(jwt(map[string]string{"tenant_id": "evil|s3cr3t"}))
	if !errors.Is(err, httpapi.ErrInvalidTenant) || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("invalid claim: %v", err)
	}
}

func TestTenantFunc(t *testing.T) {
	c := config.Default()
	r := withRC(events.APIGatewayV2HTTPRequestContext{Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:sts::123456789012:assumed-role/client-a/s"},
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"org": "acme"}},
	}})
	r.Header.Set(httpapi.TenantHeader, "from-header")
	for source, want := range map[string]string{"header": "from-header", "none": httpapi.DefaultTenant, "iam": "123456789012.role.client-a",
		"iam-account": "123456789012", "jwt": "acme"} {
		c.TenantSource, c.TenantClaim = source, "org"
		if got, err := apigw.TenantFunc(c)(r); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", source, got, err, want)
		}
	}
	c.TenantSource = "bogus"
	if _, err := apigw.TenantFunc(c)(r); err == nil {
		t.Error("an unknown source accepted the request")
	}
}

// TestIdentityThroughHandler: a handler behind the adapter reads the
// caller's identity from its request. (The httpapi router behind the
// adapter is tested with the event fixtures in package lambdafn.)
func TestIdentityThroughHandler(t *testing.T) {
	h := apigw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := apigw.TenantFromIAM(r)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, tenant)
	}))
	ev := event(http.MethodGet, "/whoami", "")
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/ada"}}
	resp, err := h(context.Background(), ev)
	if err != nil || resp.StatusCode != 200 || resp.Body != "123456789012.user.ada" {
		t.Fatalf("%d %q %v", resp.StatusCode, resp.Body, err)
	}
}
