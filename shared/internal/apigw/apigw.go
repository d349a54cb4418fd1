// Package apigw serves a plain http.Handler (the httpapi router) behind an
// API Gateway HTTP API, payload format version 2.0: it turns the
// events.APIGatewayV2HTTPRequest of a Lambda invocation into an
// *http.Request, runs the handler, and turns the recorded response back
// into an events.APIGatewayV2HTTPResponse. The router itself is not
// rewritten: the same handler serves `qasync serve` and the submit Lambda.
//
// The request's context carries the API Gateway request context
// (httpapi.GatewayContext), from which the router's tenant function reads
// the caller's identity (httpapi.TenantFromIAM, TenantFromJWT, ...): the
// tenant is chosen in one place, the router, whatever serves it.
package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/httpapi"
)

// ErrBadEvent is wrapped by NewRequest's errors: the event does not
// describe a valid HTTP request (no method, unparsable path or query,
// body not valid base64). Handler answers it with a 400 problem.
var ErrBadEvent = errors.New("apigw: invalid API Gateway event")

// NewRequest builds the server-side *http.Request that ev describes:
// method, raw path (without the stage prefix, see below), raw query
// string, headers, cookies (joined into one Cookie header), host, remote
// address, protocol and body (base64-decoded when ev.IsBase64Encoded). Its
// context is ctx carrying ev.RequestContext (httpapi.GatewayContext).
//
// On the execute-api endpoint of a named stage ("prod", not "$default")
// API Gateway puts the stage in rawPath ("/prod/v1/..."); NewRequest
// removes it, so that the routes match. Behind a custom domain the path
// is passed as it is.
func NewRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	rc := ev.RequestContext
	method := rc.HTTP.Method
	if method == "" {
		return nil, fmt.Errorf("%w: no requestContext.http.method", ErrBadEvent)
	}
	p := ev.RawPath
	if p == "" {
		p = rc.HTTP.Path
	}
	if p == "" {
		p = "/"
	}
	p = stripStage(p, rc)
	uri := p
	if ev.RawQueryString != "" {
		uri += "?" + ev.RawQueryString
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("%w: the path or query string does not parse", ErrBadEvent)
	}
	var body []byte
	if ev.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, fmt.Errorf("%w: the body is not valid base64", ErrBadEvent)
		}
	} else {
		body = []byte(ev.Body)
	}
	r, err := http.NewRequestWithContext(httpapi.WithGatewayContext(ctx, rc), method, "/", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: invalid method", ErrBadEvent)
	}
	if len(body) == 0 {
		r.Body, r.GetBody, r.ContentLength = http.NoBody, nil, 0
	}
	r.URL, r.RequestURI = u, uri
	for k, v := range ev.Headers {
		// API Gateway joins repeated headers with commas into one value;
		// it stays one value (splitting would break values with commas).
		r.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		r.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	r.Host = r.Header.Get("Host")
	if r.Host == "" {
		r.Host = rc.DomainName
	}
	r.Header.Del("Host") // a server-side request keeps the host in r.Host only
	if cl := r.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	r.RemoteAddr = rc.HTTP.SourceIP
	if rc.HTTP.Protocol != "" {
		if major, minor, ok := http.ParseHTTPVersion(rc.HTTP.Protocol); ok {
			r.Proto, r.ProtoMajor, r.ProtoMinor = rc.HTTP.Protocol, major, minor
		}
	}
	return r, nil
}

// stripStage removes "/<stage>" from the front of p when the request came
// through the execute-api endpoint of a named stage.
func stripStage(p string, rc events.APIGatewayV2HTTPRequestContext) string {
	if rc.Stage == "" || rc.Stage == "$default" || rc.APIID == "" || rc.DomainPrefix != rc.APIID {
		return p
	}
	prefix := "/" + rc.Stage
	switch {
	case p == prefix:
		return "/"
	case strings.HasPrefix(p, prefix+"/"):
		return p[len(prefix):]
	}
	return p
}

// Handler adapts h to the Lambda handler of an API Gateway HTTP API
// (payload format 2.0). The response carries h's status, headers (repeated
// values joined with commas, as format 2.0 expects; Set-Cookie values in
// Cookies) and body, base64-encoded unless the content type is text
// (text/*, JSON, XML, form data) and the bytes are valid UTF-8. An event
// NewRequest refuses is answered with a 400 problem document; the
// returned error is always nil, so API Gateway always gets a response.
func Handler(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		r, err := NewRequest(ctx, ev)
		if err != nil {
			return badEvent(err), nil
		}
		w := newRecorder(r.Method == http.MethodHead)
		h.ServeHTTP(w, r)
		return w.response(), nil
	}
}

// badEvent is the 400 answer to an event NewRequest refused, in the same
// problem format as the router's.
func badEvent(err error) events.APIGatewayV2HTTPResponse {
	b, _ := json.Marshal(httpapi.Problem{
		Type: httpapi.ProblemTypePrefix + "invalid-request", Title: "Invalid request",
		Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), ErrBadEvent.Error()+": "),
	})
	b = append(b, '\n')
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusBadRequest,
		Headers: map[string]string{
			"Content-Type": httpapi.ContentTypeProblem, "Content-Length": strconv.Itoa(len(b)),
			"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
		},
		Body: string(b),
	}
}

// recorder is the http.ResponseWriter Handler gives the router. Like a
// server, it freezes the headers at WriteHeader and ignores 1xx codes.
type recorder struct {
	header  http.Header
	sent    http.Header // the headers as of WriteHeader
	status  int
	body    bytes.Buffer
	discard bool // HEAD: no body
}

func newRecorder(head bool) *recorder {
	return &recorder{header: http.Header{}, discard: head}
}

// Header implements http.ResponseWriter.
func (w *recorder) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter.
func (w *recorder) WriteHeader(code int) {
	if w.status != 0 || code < 200 {
		return
	}
	w.status, w.sent = code, w.header.Clone()
}

// Write implements http.ResponseWriter.
func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		if w.header.Get("Content-Type") == "" && len(b) > 0 {
			w.header.Set("Content-Type", http.DetectContentType(b))
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.discard {
		return len(b), nil
	}
	return w.body.Write(b)
}

// response converts what was recorded.
func (w *recorder) response() events.APIGatewayV2HTTPResponse {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: w.status, Headers: make(map[string]string, len(w.sent))}
	for k, vs := range w.sent {
		if k == "Set-Cookie" {
			resp.Cookies = append(resp.Cookies, vs...)
			continue
		}
		resp.Headers[k] = strings.Join(vs, ",")
	}
	b := w.body.Bytes()
	if textual(w.sent.Get("Content-Type")) && utf8.Valid(b) {
		resp.Body = string(b)
	} else {
		resp.Body, resp.IsBase64Encoded = base64.StdEncoding.EncodeToString(b), true
	}
	return resp
}

// textual reports whether a body of media type ct can travel as text.
func textual(ct string) bool {
	if ct == "" {
		return true // no body, or nothing to say about it: utf8.Valid decides
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"),
		mt == "application/json", mt == "application/xml", mt == "application/javascript",
		mt == "application/x-www-form-urlencoded", mt == "application/x-ndjson", mt == "application/yaml":
		return true
	}
	return false
}
