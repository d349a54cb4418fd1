// Package client is a Go client of the qasync HTTP API, for services that
// submit work to a qasync deployment and for operators' tools (the qasync
// command line uses it). It mirrors the API's contract: typed requests and
// responses for every route, and every error answer as an *Error carrying
// the server's RFC 9457 problem document.
//
// The same client talks to `qasync serve` on a developer's machine and to
// the deployed API behind API Gateway: for an API Gateway URL
// (https://<api-id>.execute-api.<region>.amazonaws.com[/<stage>]) it signs
// every request with SigV4 for the service execute-api, with credentials
// from the standard AWS chain (environment, shared config and SSO,
// container and instance roles) and the region of the URL. Locally, a
// tenant header (WithTenant, for http.tenant-source=header) and the
// operator's admin token (WithAdminToken, for re-drive, cancel and bulk
// re-drives) take the place of IAM.
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithTenant("acme"))
//	sub, err := c.Submit(ctx, client.SubmitRequest{PipelineID: "checkout.deliver-order", Body: order})
//	e, err := c.Wait(ctx, sub.ExecutionID, client.WaitOptions{})
//	res, err := c.Result(ctx, sub.ExecutionID)
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// DefaultURL is the address `qasync serve` listens on by default.
const DefaultURL = "http://127.0.0.1:8080"

// Header names of the API.
const (
	// TenantHeader carries the caller's tenant where the server takes it
	// from a header (http.tenant-source=header).
	TenantHeader = "X-Tenant-Id"
	// IdempotencyKeyHeader carries the idempotency key of a submission or
	// a bulk re-drive.
	IdempotencyKeyHeader = "Idempotency-Key"
	// MessageTypeHeader names the protobuf message of a body or result.
	MessageTypeHeader = "X-Message-Type"
	// ResumeTokenHeader carries an await completion's resume token.
	ResumeTokenHeader = "X-Resume-Token"
)

// DefaultTimeout bounds one request of a client whose http.Client the
// caller did not supply.
const DefaultTimeout = 30 * time.Second

// Signing says when a client signs its requests with SigV4.
type Signing int

const (
	// SignAuto signs requests to an API Gateway URL
	// (*.execute-api.<region>.amazonaws.com) and no others: the default.
	SignAuto Signing = iota
	// SignAlways signs every request (an API Gateway custom domain name).
	SignAlways
	// SignNever never signs (a proxy in front that authenticates).
	SignNever
)

// String returns the mode's name: auto, always or never.
func (s Signing) String() string {
	switch s {
	case SignAlways:
		return "always"
	case SignNever:
		return "never"
	}
	return "auto"
}

// ParseSigning reads a Signing from its name (auto, always, never).
func ParseSigning(name string) (Signing, error) {
	switch strings.ToLower(name) {
	case "auto", "":
		return SignAuto, nil
	case "always":
		return SignAlways, nil
	case "never":
		return SignNever, nil
	}
	return SignAuto, fmt.Errorf("client: signing mode %q: want auto, always or never", name)
}

// Client calls one qasync deployment. It is safe for concurrent use.
//
// It follows no redirect: a 3xx answer is an *Error whose detail names
// the Location, so that the admin token or a signature never travels to
// another address. It reads at most MaxDocumentBytes of any answer into
// memory (ErrResponseTooLarge beyond); ResultTo streams a result of any
// size.
type Client struct {
	base       string // scheme://host[/prefix], no trailing slash
	host       string
	hc         *http.Client
	tenant     string
	adminToken string
	userAgent  string

	signing Signing
	sign    bool // the resolved decision
	region  string
	creds   aws.CredentialsProvider
	signer  *v4.Signer
	now     func() time.Time

	// loadAWS resolves the credential chain and region once, on the
	// first signed request, when options did not give them.
	loadOnce sync.Once
	loadErr  error
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc instead of a client with
// DefaultTimeout. The client uses a copy of hc that follows no redirect
// (see Client), whatever hc's CheckRedirect says.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTenant sends tenant in the X-Tenant-Id header on every request: the
// caller's tenant on a server that takes it from the header
// (http.tenant-source=header, development). Elsewhere the server derives
// the tenant from the caller's identity and ignores the header.
func WithTenant(tenant string) Option { return func(c *Client) { c.tenant = tenant } }

// WithAdminToken sends token as "Authorization: Bearer <token>" on the
// operator routes of `qasync serve` (re-drive, cancel, bulk re-drive and
// its progress), the only routes that need it (admin.token), and on no
// other request: a read or a submission never carries it. It cannot be
// combined with SigV4 signing, which owns the Authorization header:
// behind API Gateway those routes are authorized by their own IAM
// permission instead.
func WithAdminToken(token string) Option { return func(c *Client) { c.adminToken = token } }

// WithSigning sets when requests are signed with SigV4 (default SignAuto).
func WithSigning(s Signing) Option { return func(c *Client) { c.signing = s } }

// WithRegion sets the region requests are signed for. Default: the
// region in an API Gateway URL, else the standard chain's (AWS_REGION,
// AWS_DEFAULT_REGION, the shared config profile).
func WithRegion(region string) Option { return func(c *Client) { c.region = region } }

// WithCredentials signs with creds instead of the standard credential
// chain's credentials.
func WithCredentials(creds aws.CredentialsProvider) Option {
	return func(c *Client) { c.creds = creds }
}

// WithUserAgent replaces the User-Agent header (default
// "qasync-client/<module version>").
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// withClock makes the signer use now (tests sign on a fixed clock).
func withClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// New returns a client of the API at baseURL (scheme, host and an optional
// path prefix such as an API Gateway stage: "https://x.execute-api.eu-west-1.amazonaws.com/prod").
// It fails on a malformed URL, or when an admin token would be sent on
// signed requests.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	switch {
	case err != nil:
		return nil, fmt.Errorf("client: base URL %q: %w", baseURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("client: base URL %q: the scheme must be http or https", baseURL)
	case u.Host == "":
		return nil, fmt.Errorf("client: base URL %q has no host", baseURL)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, fmt.Errorf("client: base URL %q: no query, fragment or user info allowed", baseURL)
	}
	c := &Client{
		base:      u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		host:      u.Hostname(),
		userAgent: "qasync-client/" + moduleVersion(),
		signer:    v4.NewSigner(),
		now:       time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Timeout: DefaultTimeout}
	}
	// Never follow a redirect: the admin token or a signature would go
	// along to wherever it points (net/http keeps the Authorization
	// header on a redirect to the same host name, whatever the port).
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	urlRegion, apiGateway := ExecuteAPIRegion(c.host)
	c.sign = c.signing == SignAlways || (c.signing == SignAuto && apiGateway)
	if c.region == "" {
		c.region = urlRegion
	}
	if c.sign && c.adminToken != "" {
		return nil, errors.New("client: an admin token is for qasync serve's operator routes; signed requests (API Gateway) are authorized by IAM: drop the admin token or disable signing")
	}
	return c, nil
}

// Signs reports whether the client signs its requests with SigV4.
func (c *Client) Signs() bool { return c.sign }

// BaseURL returns the API's base URL the client calls.
func (c *Client) BaseURL() string { return c.base }

// moduleVersion is the version of this module in the running binary
// ("(devel)" for a build inside the repository).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == "github.com/qasync/qasync" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/qasync/qasync" {
			return d.Version
		}
	}
	return "unknown"
}

// MaxDocumentBytes bounds every answer the client reads into memory: a
// JSON document (status, a page of a list, a history or dead letters), a
// problem document, a result read by Result. The API's documents are far
// smaller (a history page stops at 1 MiB of events); a larger answer is
// not the API's and fails with ErrResponseTooLarge instead of taking the
// caller's memory. ResultTo streams a result without this bound.
const MaxDocumentBytes = 16 << 20

// ErrResponseTooLarge is wrapped by the error of an answer whose body
// exceeds MaxDocumentBytes; nothing of it is returned.
var ErrResponseTooLarge = errors.New("client: response too large")

// call is one request: what do sends and what it expects back.
type call struct {
	method      string
	path        string // escaped, from the API root: "/v1/executions/x"
	query       url.Values
	body        []byte
	contentType string
	header      http.Header
	// operator: an operator route of qasync serve (re-drive, cancel, bulk
	// re-drive, its progress), the only requests the admin token goes on.
	operator bool
	// unauthenticated: a route that carries its own authorization (the
	// await completion's resume token): never signed, no admin token.
	unauthenticated bool
}

// do sends k and returns the response's status, headers and body (at
// most MaxDocumentBytes), or an *Error for a non-2xx answer.
func (c *Client) do(ctx context.Context, k call) (int, http.Header, []byte, error) {
	resp, err := c.send(ctx, k)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return code, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := readBounded(k, resp)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

// send sends k and returns the response of a 2xx answer, its body for
// the caller to read and close. For any other answer it reads the body
// (at most MaxDocumentBytes), closes it, and returns the response with
// an *Error: the problem document's, or for a 3xx one naming its
// Location, which is never followed.
func (c *Client) send(ctx context.Context, k call) (*http.Response, error) {
	target := c.base + k.path
	if len(k.query) > 0 {
		target += "?" + k.query.Encode()
	}
	var body io.Reader
	if k.body != nil {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, target, body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", k.method, k.path, err)
	}
	for name, vs := range k.header {
		for _, v := range vs {
			req.Header.Add(name, v)
		}
	}
	if k.contentType != "" {
		req.Header.Set("Content-Type", k.contentType)
	}
	req.Header.Set("Accept", "application/json, application/problem+json;q=0.9, */*;q=0.8")
	req.Header.Set("User-Agent", c.userAgent)
	if c.tenant != "" && !k.unauthenticated {
		req.Header.Set(TenantHeader, c.tenant)
	}
	if !k.unauthenticated {
		switch {
		case c.sign:
			if err := c.signRequest(ctx, req, k.body); err != nil {
				return nil, err
			}
		case c.adminToken != "" && k.operator:
			req.Header.Set("Authorization", "Bearer "+c.adminToken)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", k.method, k.path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return resp, redirectError(k, resp)
	}
	b, err := readBounded(k, resp)
	if err != nil {
		return resp, err
	}
	return resp, newError(k.method, k.path, resp, b)
}

// readBounded reads resp's body, failing with ErrResponseTooLarge
// (before reading, when Content-Length says so) beyond MaxDocumentBytes.
func readBounded(k call, resp *http.Response) ([]byte, error) {
	tooLarge := func() error {
		return fmt.Errorf("%w: %s %s: the %d answer exceeds %d MiB, the most the client reads into memory",
			ErrResponseTooLarge, k.method, k.path, resp.StatusCode, MaxDocumentBytes>>20)
	}
	if resp.ContentLength > MaxDocumentBytes {
		return nil, tooLarge()
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: reading the response: %w", k.method, k.path, err)
	}
	if len(b) > MaxDocumentBytes {
		return nil, tooLarge()
	}
	return b, nil
}

// redirectError is the *Error of a 3xx answer: the client follows no
// redirect, so that the admin token or a signature never goes to the
// address it names.
func redirectError(k call, resp *http.Response) *Error {
	loc := resp.Header.Get("Location")
	if loc == "" {
		loc = "(no Location)"
	}
	return &Error{Method: k.method, Path: k.path, StatusCode: resp.StatusCode, Problem: Problem{Type: "about:blank",
		Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode,
		Detail: "the answer redirects to " + loc + "; the client follows no redirect (credentials must not go to another address): check the base URL"}}
}

// ResultTo writes a succeeded execution's result to w as it arrives,
// without holding it in memory (Result reads at most MaxDocumentBytes),
// and returns its media type and protobuf message (Data nil) and the
// bytes written. Errors are Result's; one while copying returns the
// bytes written so far.
func (c *Client) ResultTo(ctx context.Context, executionID string, w io.Writer) (Result, int64, error) {
	if executionID == "" {
		return Result{}, 0, missing("the execution id")
	}
	k := call{method: http.MethodGet, path: executionPath(executionID) + "/result"}
	resp, err := c.send(ctx, k)
	if err != nil {
		return Result{}, 0, err
	}
	defer resp.Body.Close()
	r := Result{ContentType: resp.Header.Get("Content-Type"), MessageType: resp.Header.Get(MessageTypeHeader)}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return r, n, fmt.Errorf("client: %s %s: copying the result: %w", k.method, k.path, err)
	}
	return r, n, nil
}

// doJSON sends k (with a JSON body when in is not nil) and decodes a
// successful response into out. It returns the response status.
func (c *Client) doJSON(ctx context.Context, k call, in, out any) (int, error) {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("client: %s %s: encoding the request: %w", k.method, k.path, err)
		}
		k.body, k.contentType = b, "application/json"
	}
	code, _, b, err := c.do(ctx, k)
	if err != nil {
		return code, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return code, fmt.Errorf("client: %s %s: the %d response is not the expected JSON document: %w", k.method, k.path, code, err)
		}
	}
	return code, nil
}
