package apigw_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

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
	if rc, ok := httpapi.GatewayContext(r.Context()); !ok || rc.RequestID != "req-1" {
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

// TestHistoryPageQueryReachesTheHandler: the history route's paging
// parameters, in the event's raw query string as API Gateway passes them
// (through a named stage's execute-api endpoint too), reach the handler
// as the request's query: limit and cursor, a cursor's dots and an
// escaped one alike.
func TestHistoryPageQueryReachesTheHandler(t *testing.T) {
	h := apigw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		_, _ = io.WriteString(w, r.URL.Path+" limit="+q.Get("limit")+" cursor="+q.Get("cursor")+" n="+strconv.Itoa(len(q["cursor"])))
	}))
	for _, tc := range []struct{ stage, path, query, want string }{
		{"$default", "/v1/executions/e1/history", "limit=2&cursor=h1.12.1.27", "/v1/executions/e1/history limit=2 cursor=h1.12.1.27 n=1"},
		{"$default", "/v1/executions/e1/history", "cursor=h1%2E12%2E1%2E27&limit=1000", "/v1/executions/e1/history limit=1000 cursor=h1.12.1.27 n=1"},
		{"prod", "/prod/v1/executions/e1/history", "limit=100", "/v1/executions/e1/history limit=100 cursor= n=0"},
		{"$default", "/v1/executions/e1/history", "", "/v1/executions/e1/history limit= cursor= n=0"},
	} {
		ev := event(http.MethodGet, tc.path, tc.query)
		ev.RequestContext.Stage = tc.stage
		resp, err := h(context.Background(), ev)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Body != tc.want {
			t.Errorf("%s?%s: %d %q %v, want %q", tc.path, tc.query, resp.StatusCode, resp.Body, err, tc.want)
		}
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

// TestIdentityThroughHandler: a handler behind the adapter reads the
// caller's identity from its request (the request context the adapter
// puts on it). (The httpapi router behind the
// adapter is tested with the event fixtures in package lambdafn.)
func TestIdentityThroughHandler(t *testing.T) {
	h := apigw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := httpapi.TenantFromIAM(r)
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
