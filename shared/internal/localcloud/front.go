package localcloud

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// httpFront is the HTTP front: an API Gateway HTTP API (stage $default)
// whose routes are integrated with the functions (payload format 2.0).
type httpFront struct {
	log       *slog.Logger
	routes    *routeTable
	callers   callers
	region    string
	accountID string // the API's account, in execute-api ARNs and events
	apiID     string
	// iamAccountID is Options.IAMAccountID: the development shortcut
	// that gives the default route's requests a fixed IAM identity.
	iamAccountID string
	maxBody      int64
	// now is the clock of the signature's date check and of the events.
	now func() time.Time
	// invoke runs a function (Cloud.Invoke).
	invoke func(ctx context.Context, fn string, payload []byte) ([]byte, error)
}

// newFront validates the routes and callers of opts.
func newFront(opts *Options, log *slog.Logger, enabled func(fn string) bool,
	invoke func(ctx context.Context, fn string, payload []byte) ([]byte, error)) (*httpFront, error) {
	routes := opts.Routes
	if routes == nil {
		routes = defaultRoutes
	} else if opts.IAMAccountID != "" {
		return nil, errors.New("localcloud: Options.IAMAccountID is the development shortcut of the default route: with Options.Routes, give the routes AWS_IAM authorization and sign as one of Options.Callers")
	}
	rt, err := newRouteTable(routes, enabled)
	if err != nil {
		return nil, err
	}
	cs, err := newCallers(opts.Callers)
	if err != nil {
		return nil, err
	}
	return &httpFront{log: log, routes: rt, callers: cs, region: opts.Region, accountID: opts.AccountID, apiID: opts.APIID,
		iamAccountID: opts.IAMAccountID, maxBody: opts.MaxBodyBytes, now: time.Now, invoke: invoke}, nil
}

// ServeHTTP answers one request as API Gateway would.
func (f *httpFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	reqID := requestID()
	w.Header().Set("Apigw-Requestid", reqID)
	status, routeKey := f.serve(w, r, reqID)
	f.log.LogAttrs(r.Context(), slog.LevelDebug, "http_request", slog.String("event", "http_request"),
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", routeKey), slog.Int("status", status),
		slog.String("request_id", reqID), slog.Float64("duration_ms", msf(time.Since(start))))
}

func (f *httpFront) serve(w http.ResponseWriter, r *http.Request, reqID string) (int, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return gatewayError(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large"), ""
		}
		return gatewayError(w, http.StatusBadRequest, "Bad Request"), ""
	}
	rt, params := f.routes.match(r.Method, r.URL.EscapedPath())
	if rt == nil {
		return gatewayError(w, http.StatusNotFound, "Not Found"), ""
	}
	now := f.now()
	var caller *callerInfo
	if rt.Authorization == AuthIAM {
		var fail *authFailure
		if caller, fail = f.authorize(r, body, rt, now); fail != nil {
			w.Header().Set("X-Amzn-Errortype", fail.errType)
			return gatewayError(w, http.StatusForbidden, fail.message), rt.Key
		}
	}
	ev := f.toEvent(r, body, reqID, now, rt, params, caller)
	payload, err := json.Marshal(ev)
	if err != nil {
		return gatewayError(w, http.StatusInternalServerError, "Internal Server Error"), rt.Key
	}
	// As on AWS, a client that goes away does not stop the invocation.
	out, err := f.invoke(context.WithoutCancel(r.Context()), rt.Function, payload)
	if err != nil {
		return gatewayError(w, http.StatusBadGateway, "Internal Server Error"), rt.Key
	}
	return writeResponse(w, out), rt.Key
}

// authorize authenticates a request to an AWS_IAM route and checks that
// its caller may invoke it (execute-api:Invoke on the route's ARN, with
// the caller's policy). A refusal is logged as route_denied (never the
// signature).
func (f *httpFront) authorize(r *http.Request, body []byte, rt *route, now time.Time) (*callerInfo, *authFailure) {
	ci, fail := f.callers.authenticate(r, body, f.region, now)
	var missing, nearest string
	if fail == nil && ci.Policy != nil {
		req := iamcheck.Request{Action: "execute-api:Invoke", Resource: invokeARN(f.region, f.accountID, f.apiID, r.Method, r.URL.Path)}
		if !ci.Policy.Evaluate(req).Allowed {
			missing, nearest = ci.Policy.Missing(req)
			fail = &authFailure{message: msgForbidden, errType: errTypeForbidden, reason: "policy", caller: ci}
		}
	}
	if fail == nil {
		return ci, nil
	}
	attrs := []slog.Attr{slog.String("event", "route_denied"), slog.String("route", rt.Key),
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("reason", fail.reason)}
	if fail.caller != nil {
		attrs = append(attrs, slog.String("caller_arn", fail.caller.ARN))
	}
	if missing != "" {
		attrs = append(attrs, slog.String("missing", missing))
		if nearest != "" {
			attrs = append(attrs, slog.String("nearest", nearest))
		}
	}
	f.log.LogAttrs(r.Context(), slog.LevelWarn, "route_denied", attrs...)
	return nil, fail
}

// toEvent maps an HTTP request to the event API Gateway sends a Lambda
// integration with payload format version 2.0, for route rt (with its
// path parameters) and, on an AWS_IAM route, the caller.
func (f *httpFront) toEvent(r *http.Request, body []byte, reqID string, now time.Time, rt *route, params map[string]string,
	caller *callerInfo) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	var cookies []string
	for name, values := range r.Header {
		lname := strings.ToLower(name)
		if lname == "cookie" {
			for _, v := range values {
				for part := range strings.SplitSeq(v, ";") {
					if part = strings.TrimSpace(part); part != "" {
						cookies = append(cookies, part)
					}
				}
			}
			continue
		}
		headers[lname] = strings.Join(values, ",")
	}
	host := r.Host
	headers["host"] = host
	sourceIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sourceIP = r.RemoteAddr
	}
	if prior := headers["x-forwarded-for"]; prior != "" {
		headers["x-forwarded-for"] = prior + ", " + sourceIP
	} else {
		headers["x-forwarded-for"] = sourceIP
	}
	headers["x-forwarded-proto"] = "http"
	if _, port, err := net.SplitHostPort(host); err == nil {
		headers["x-forwarded-port"] = port
	}
	headers["x-amzn-trace-id"] = "Root=1-" + strconv.FormatInt(now.Unix(), 16) + "-" + randomHex(12)
	if len(body) > 0 {
		headers["content-length"] = strconv.Itoa(len(body))
	}

	var query map[string]string
	if r.URL.RawQuery != "" {
		if values, err := url.ParseQuery(r.URL.RawQuery); err == nil && len(values) > 0 {
			query = make(map[string]string, len(values))
			for k, v := range values {
				query[k] = strings.Join(v, ",")
			}
		}
	}

	domain := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		domain = h
	}
	prefix, _, _ := strings.Cut(domain, ".")

	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              rt.Key,
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     rt.Key,
			AccountID:    f.accountID,
			Stage:        "$default",
			RequestID:    reqID,
			APIID:        f.apiID,
			DomainName:   domain,
			DomainPrefix: prefix,
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	switch {
	case caller != nil:
		iam := caller.iam
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &iam}
	case f.iamAccountID != "" && rt.Key == DefaultRouteKey:
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
				AccountID: f.iamAccountID,
				CallerID:  "AIDALOCALCALLER:local",
				UserARN:   "arn:aws:iam::" + f.iamAccountID + ":user/local",
				UserID:    "AIDALOCALCALLER",
			},
		}
	}
	if len(body) > 0 {
		if utf8.Valid(body) && r.Header.Get("Content-Encoding") == "" {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// writeResponse writes a payload format 2.0 response. A response that is
// not an object with a statusCode is, as on API Gateway, a 200 whose body
// is the response itself.
func writeResponse(w http.ResponseWriter, out []byte) int {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(out, &probe); err != nil || probe["statusCode"] == nil {
		if !json.Valid(out) {
			return gatewayError(w, http.StatusBadGateway, "Internal Server Error")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return http.StatusOK
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode < 100 || resp.StatusCode > 599 {
		return gatewayError(w, http.StatusBadGateway, "Internal Server Error")
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return gatewayError(w, http.StatusBadGateway, "Internal Server Error")
		}
		body = b
	}
	h := w.Header()
	names := make([]string, 0, len(resp.MultiValueHeaders))
	for name := range resp.MultiValueHeaders {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range resp.MultiValueHeaders[name] {
			h.Add(name, v)
		}
	}
	for name, v := range resp.Headers {
		h.Set(name, v)
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	h.Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return resp.StatusCode
}

// gatewayError answers like API Gateway does when it cannot get a
// response from the integration.
func gatewayError(w http.ResponseWriter, status int, msg string) int {
	b, _ := json.Marshal(map[string]string{"message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return status
}

// requestID returns an API Gateway style request id.
func requestID() string {
	b := make([]byte, 11)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
