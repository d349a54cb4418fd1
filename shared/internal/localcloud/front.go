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
)

// front is the HTTP front: an API Gateway HTTP API with one $default
// route integrated with the submit function (payload format 2.0).
func (c *Cloud) front() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		reqID := requestID()
		w.Header().Set("Apigw-Requestid", reqID)
		status := c.serveFront(w, r, reqID)
		c.log.LogAttrs(r.Context(), slog.LevelDebug, "http_request", slog.String("event", "http_request"),
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status),
			slog.String("request_id", reqID), slog.Float64("duration_ms", msf(time.Since(start))))
	})
}

func (c *Cloud) serveFront(w http.ResponseWriter, r *http.Request, reqID string) int {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return gatewayError(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		}
		return gatewayError(w, http.StatusBadRequest, "Bad Request")
	}
	ev := c.toEvent(r, body, reqID, time.Now())
	payload, err := json.Marshal(ev)
	if err != nil {
		return gatewayError(w, http.StatusInternalServerError, "Internal Server Error")
	}
	// As on AWS, a client that goes away does not stop the invocation.
	out, err := c.Invoke(context.WithoutCancel(r.Context()), Submit, payload)
	if err != nil {
		return gatewayError(w, http.StatusBadGateway, "Internal Server Error")
	}
	return writeResponse(w, out)
}

// toEvent maps an HTTP request to the event API Gateway sends a Lambda
// integration with payload format version 2.0.
func (c *Cloud) toEvent(r *http.Request, body []byte, reqID string, now time.Time) events.APIGatewayV2HTTPRequest {
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
		RouteKey:              "$default",
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     "$default",
			AccountID:    c.opts.AccountID,
			Stage:        "$default",
			RequestID:    reqID,
			APIID:        "local",
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
	if c.opts.IAMAccountID != "" {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
				AccountID: c.opts.IAMAccountID,
				CallerID:  "AIDALOCALCALLER:local",
				UserARN:   "arn:aws:iam::" + c.opts.IAMAccountID + ":user/local",
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
