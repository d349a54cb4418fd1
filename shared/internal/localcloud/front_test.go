package localcloud

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/logtest"
)

// signedAt is the time the tests sign at, and the front's clock unless a
// test moves it.
var signedAt = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// testFront is a front over routes and callers whose integration echoes
// the event it gets (as a 200 JSON response) and records the function.
type testFront struct {
	*httpFront
	logs    *logtest.Buffer
	invoked []string
}

func newTestFront(t *testing.T, routes []Route, callers []Caller) *testFront {
	t.Helper()
	tf := &testFront{logs: &logtest.Buffer{}}
	opts := &Options{Routes: routes, Callers: callers, Region: "eu-west-1", AccountID: "111122223333", APIID: "api1",
		MaxBodyBytes: DefaultMaxBodyBytes}
	log := slog.New(slog.NewJSONHandler(tf.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	invoke := func(_ context.Context, fn string, payload []byte) ([]byte, error) {
		tf.invoked = append(tf.invoked, fn)
		return json.Marshal(events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: string(payload)})
	}
	f, err := newFront(opts, log, func(string) bool { return true }, invoke)
	if err != nil {
		t.Fatal(err)
	}
	f.now = func() time.Time { return signedAt }
	tf.httpFront = f
	return tf
}

// do serves one request; sign, when set, signs it first.
func (tf *testFront) do(t *testing.T, method, target string, body []byte, sign func(*http.Request, []byte)) (int, string, events.APIGatewayV2HTTPRequest) {
	t.Helper()
	r := httptest.NewRequest(method, "http://127.0.0.1:8080"+target, bytes.NewReader(body))
	if sign != nil {
		sign(r, body)
	}
	w := httptest.NewRecorder()
	tf.ServeHTTP(w, r)
	var ev events.APIGatewayV2HTTPRequest
	if w.Code == 200 {
		if err := json.Unmarshal(w.Body.Bytes(), &ev); err != nil {
			t.Fatalf("%s %s: echoed event: %v", method, target, err)
		}
	}
	return w.Code, strings.TrimSpace(w.Body.String()), ev
}

// signer signs as the SDK does for execute-api in eu-west-1 at when.
func signer(key, secret string, when time.Time) func(*http.Request, []byte) {
	return func(r *http.Request, body []byte) {
		sum := sha256.Sum256(body)
		creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, hex.EncodeToString(sum[:]), "execute-api", "eu-west-1", when); err != nil {
			panic(err)
		}
	}
}

func TestRouteSelection(t *testing.T) {
	tf := newTestFront(t, []Route{
		{Key: "GET /pets/dog/1", Function: Submit},
		{Key: "GET /pets/dog/{id}", Function: Submit},
		{Key: "GET /pets/{proxy+}", Function: Submit},
		{Key: "ANY /{proxy+}", Function: Submit},
		{Key: "POST /v1/pipelines/{pipelineId}/executions", Function: Submit},
		{Key: "GET /v1/executions/{executionId}", Function: Submit},
		{Key: "GET /v1/executions/{executionId}/result", Function: Submit},
		{Key: "POST /v1/executions/{executionId}/redrive", Function: Worker},
		{Key: "ANY /v1/things", Function: Submit},
		{Key: "DELETE /v1/things", Function: DLQ},
		{Key: "GET /a/{x}/c", Function: Submit},
		{Key: "GET /a/b/{y}", Function: Submit},
		{Key: "GET /", Function: Submit},
		{Key: DefaultRouteKey, Function: Sweeper},
	}, nil)
	cases := []struct {
		method, path string
		route        string
		fn           string
		params       map[string]string
	}{
		// The documented examples.
		{"GET", "/pets/dog/1", "GET /pets/dog/1", Submit, nil},
		{"GET", "/pets/dog/2", "GET /pets/dog/{id}", Submit, map[string]string{"id": "2"}},
		{"GET", "/pets/cat/1", "GET /pets/{proxy+}", Submit, map[string]string{"proxy": "cat/1"}},
		{"POST", "/test/5", "ANY /{proxy+}", Submit, map[string]string{"proxy": "test/5"}},
		// A variable matches one segment; a greedy variable the rest.
		{"GET", "/pets/dog/1/toys", "GET /pets/{proxy+}", Submit, map[string]string{"proxy": "dog/1/toys"}},
		{"POST", "/v1/pipelines/p%2F1/executions", "POST /v1/pipelines/{pipelineId}/executions", Submit, map[string]string{"pipelineId": "p/1"}},
		{"GET", "/v1/executions/e1", "GET /v1/executions/{executionId}", Submit, map[string]string{"executionId": "e1"}},
		{"GET", "/v1/executions/e1/result", "GET /v1/executions/{executionId}/result", Submit, map[string]string{"executionId": "e1"}},
		{"POST", "/v1/executions/e1/redrive", "POST /v1/executions/{executionId}/redrive", Worker, map[string]string{"executionId": "e1"}},
		// A method wins over ANY on the same path.
		{"DELETE", "/v1/things", "DELETE /v1/things", DLQ, nil},
		{"PUT", "/v1/things", "ANY /v1/things", Submit, nil},
		// Literal segments win from the left.
		{"GET", "/a/b/c", "GET /a/b/{y}", Submit, map[string]string{"y": "c"}},
		{"GET", "/a/z/c", "GET /a/{x}/c", Submit, map[string]string{"x": "z"}},
		// A trailing slash is ignored; case matters.
		{"GET", "/v1/executions/e1/", "GET /v1/executions/{executionId}", Submit, map[string]string{"executionId": "e1"}},
		{"GET", "/PETS/dog/1", "ANY /{proxy+}", Submit, map[string]string{"proxy": "PETS/dog/1"}},
		// The root is not a greedy variable's: its own route, else $default.
		{"GET", "/", "GET /", Submit, nil},
		{"POST", "/", DefaultRouteKey, Sweeper, nil},
		// An empty segment is no variable's value.
		{"GET", "/v1/executions//result", "ANY /{proxy+}", Submit, map[string]string{"proxy": "v1/executions//result"}},
	}
	for _, c := range cases {
		tf.invoked = nil
		code, body, ev := tf.do(t, c.method, c.path, nil, nil)
		if code != 200 {
			t.Errorf("%s %s: %d %s", c.method, c.path, code, body)
			continue
		}
		if ev.RouteKey != c.route || ev.RequestContext.RouteKey != c.route {
			t.Errorf("%s %s: routeKey %q, requestContext.routeKey %q, want %q", c.method, c.path, ev.RouteKey, ev.RequestContext.RouteKey, c.route)
		}
		if !equalParams(ev.PathParameters, c.params) {
			t.Errorf("%s %s: pathParameters %v, want %v", c.method, c.path, ev.PathParameters, c.params)
		}
		if len(tf.invoked) != 1 || tf.invoked[0] != c.fn {
			t.Errorf("%s %s: invoked %v, want %s", c.method, c.path, tf.invoked, c.fn)
		}
		if ev.RawPath != c.path || ev.RequestContext.APIID != "api1" || ev.RequestContext.Authorizer != nil {
			t.Errorf("%s %s: rawPath %q apiId %q authorizer %+v", c.method, c.path, ev.RawPath, ev.RequestContext.APIID, ev.RequestContext.Authorizer)
		}
	}
}

func equalParams(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Without a matching route nor $default, the answer is API Gateway's 404
// and nothing is invoked.
func TestNoRouteIsNotFound(t *testing.T) {
	tf := newTestFront(t, []Route{{Key: "GET /v1/executions/{executionId}", Function: Submit}}, nil)
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/executions/e1"}, {"GET", "/v1/executions"}, {"GET", "/v1/executions/e1/result"}, {"GET", "/"},
	} {
		code, body, _ := tf.do(t, c.method, c.path, nil, nil)
		if code != 404 || body != `{"message":"Not Found"}` {
			t.Errorf("%s %s: %d %s", c.method, c.path, code, body)
		}
	}
	if len(tf.invoked) != 0 {
		t.Errorf("invoked %v", tf.invoked)
	}
}

func TestRoutesAreValidated(t *testing.T) {
	enabled := func(fn string) bool { return fn != Worker }
	for _, c := range []struct {
		routes []Route
		want   string
	}{
		{[]Route{{Key: "GET v1", Function: Submit}}, "must start with /"},
		{[]Route{{Key: "FETCH /v1", Function: Submit}}, "METHOD"},
		{[]Route{{Key: "/v1", Function: Submit}}, "METHOD"},
		{[]Route{{Key: "GET /v1/", Function: Submit}}, "may not end with /"},
		{[]Route{{Key: "GET /v1//x", Function: Submit}}, "bad path segment"},
		{[]Route{{Key: "GET /v1/{a+}/x", Function: Submit}}, "must end the path"},
		{[]Route{{Key: "GET /v1/{a}/{a}", Function: Submit}}, "appears twice"},
		{[]Route{{Key: "GET /v1/x{a}", Function: Submit}}, "bad path segment"},
		{[]Route{{Key: "GET /v1/{a}", Function: Submit}, {Key: "GET /v1/{b}", Function: Submit}}, "conflicts with"},
		{[]Route{{Key: "$default", Function: Submit}, {Key: "$default", Function: Submit}}, "duplicate"},
		{[]Route{{Key: "GET /v1", Function: "nope"}}, "unknown function"},
		{[]Route{{Key: "GET /v1", Function: Worker}}, "disabled"},
		{[]Route{{Key: "GET /v1", Function: Submit, Authorization: "JWT"}}, "authorization"},
	} {
		_, err := newFront(&Options{Routes: c.routes}, slog.New(slog.DiscardHandler), enabled, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "localcloud: route ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.routes, err, c.want)
		}
	}
	_, err := newFront(&Options{Routes: []Route{{Key: "GET /v1", Function: Submit}}, IAMAccountID: "123456789012"}, slog.New(slog.DiscardHandler), enabled, nil)
	if err == nil || !strings.Contains(err.Error(), "IAMAccountID") {
		t.Errorf("Routes and IAMAccountID: %v", err)
	}
	_, err = newFront(&Options{Callers: []Caller{{AccessKeyID: "AKIA1", SecretAccessKey: "s", ARN: "alice"}}}, slog.New(slog.DiscardHandler), func(string) bool { return true }, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "localcloud: caller ") {
		t.Errorf("a caller without an ARN: %v", err)
	}
}

// devTemplate is the synthesized dev stack.
func devTemplate(t *testing.T) (*iamcheck.Template, []byte) {
	t.Helper()
	b, err := os.ReadFile("../devstack/dev.template.json")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := iamcheck.ParseTemplate(b)
	if err != nil {
		t.Fatal(err)
	}
	return tp, b
}

// templateRoutes reads the template's HTTP API routes (as a test input
// only: the harness is given its routes).
func templateRoutes(t *testing.T, raw []byte) []Route {
	t.Helper()
	var doc struct {
		Resources map[string]struct {
			Type       string
			Properties struct{ RouteKey, AuthorizationType string }
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var out []Route
	for _, r := range doc.Resources {
		if r.Type == "AWS::ApiGatewayV2::Route" {
			out = append(out, Route{Key: r.Properties.RouteKey, Authorization: r.Properties.AuthorizationType, Function: Submit})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// The dev template's policies, resolved for the test front's API.
func devPolicies(t *testing.T) (client, operator *iamcheck.Policy, routes []Route) {
	t.Helper()
	tp, raw := devTemplate(t)
	local := iamcheck.Local{Region: "eu-west-1", AccountID: "111122223333", APIID: "api1"}
	client, err := tp.ManagedPolicy("ClientInvokePolicy", local)
	if err != nil {
		t.Fatal(err)
	}
	operator, err = tp.ManagedPolicy("OperatorRedrivePolicy", local)
	if err != nil {
		t.Fatal(err)
	}
	return client, operator, templateRoutes(t, raw)
}

func TestIAMRoutesAuthenticateAndAuthorize(t *testing.T) {
	client, operator, routes := devPolicies(t)
	alice := Caller{AccessKeyID: "AKIAALICE", SecretAccessKey: "alice-secret", ARN: "arn:aws:iam::111122223333:user/alice", Policy: client}
	ops := Caller{AccessKeyID: "ASIAOPS", SecretAccessKey: "ops-secret", ARN: "arn:aws:sts::111122223333:assumed-role/Operator/ops-session", Policy: operator}
	tf := newTestFront(t, routes, []Caller{alice, ops})
	asAlice := signer(alice.AccessKeyID, alice.SecretAccessKey, signedAt)
	body := []byte(`{"input":{"orderId":"1001"}}`)

	// Signed by a known caller whose policy allows the route.
	code, resp, ev := tf.do(t, "POST", "/v1/pipelines/checkout/executions?x=1&y=a%20b", body, asAlice)
	if code != 200 {
		t.Fatalf("signed submit: %d %s", code, resp)
	}
	iam := ev.RequestContext.Authorizer
	if iam == nil || iam.IAM == nil {
		t.Fatalf("no authorizer.iam: %+v", ev.RequestContext)
	}
	if iam.IAM.UserARN != alice.ARN || iam.IAM.AccountID != "111122223333" || iam.IAM.AccessKey != "AKIAALICE" ||
		!strings.HasPrefix(iam.IAM.UserID, "AIDA") || iam.IAM.CallerID != iam.IAM.UserID {
		t.Errorf("authorizer.iam %+v", iam.IAM)
	}
	if ev.RouteKey != "POST /v1/pipelines/{pipelineId}/executions" || ev.PathParameters["pipelineId"] != "checkout" || ev.Body != string(body) {
		t.Errorf("event routeKey %q pathParameters %v body %q", ev.RouteKey, ev.PathParameters, ev.Body)
	}
	// An assumed role's identity names its session.
	code, resp, ev = tf.do(t, "POST", "/v1/executions/e1/redrive", nil, signer(ops.AccessKeyID, ops.SecretAccessKey, signedAt))
	if code != 200 || ev.RequestContext.Authorizer == nil || !strings.HasPrefix(ev.RequestContext.Authorizer.IAM.UserID, "AROA") ||
		!strings.HasSuffix(ev.RequestContext.Authorizer.IAM.UserID, ":ops-session") {
		t.Fatalf("operator redrive: %d %s %+v", code, resp, ev.RequestContext.Authorizer)
	}

	refused := []struct {
		name, method, path string
		body               []byte
		sign               func(*http.Request, []byte)
		message            string
		reason             string
	}{
		{"unsigned", "GET", "/v1/executions/e1", nil, nil, msgForbidden, "missing_signature"},
		{"wrong secret", "GET", "/v1/executions/e1", nil, signer(alice.AccessKeyID, "not-the-secret", signedAt), msgBadSignature, "signature_mismatch"},
		{"unknown key", "GET", "/v1/executions/e1", nil, signer("AKIAMALLORY", "whatever", signedAt), msgUnknownKey, "unknown_access_key"},
		{"signed 6 minutes ago", "GET", "/v1/executions/e1", nil, signer(alice.AccessKeyID, alice.SecretAccessKey, signedAt.Add(-6*time.Minute)),
			"Signature expired: 20260314T150326Z is now earlier than 20260314T150426Z (20260314T150926Z - 5 min.)", "signature_expired"},
		{"signed 6 minutes ahead", "GET", "/v1/executions/e1", nil, signer(alice.AccessKeyID, alice.SecretAccessKey, signedAt.Add(6*time.Minute)),
			"Signature not yet current: 20260314T151526Z is still later than 20260314T151426Z (20260314T150926Z + 5 min.)", "signature_expired"},
		{"body swapped after signing", "POST", "/v1/pipelines/checkout/executions", body, func(r *http.Request, b []byte) {
			asAlice(r, b)
			r.Body = io.NopCloser(strings.NewReader(`{"input":{"orderId":"6666"}}`))
		}, msgBadSignature, "signature_mismatch"},
		{"path changed after signing", "GET", "/v1/executions/e1", nil, func(r *http.Request, b []byte) {
			asAlice(r, b)
			r.URL.Path = "/v1/executions/e2"
		}, msgBadSignature, "signature_mismatch"},
		{"incomplete", "GET", "/v1/executions/e1", nil, func(r *http.Request, _ []byte) {
			r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIAALICE/20260314/eu-west-1/execute-api/aws4_request")
		}, "Authorization header requires 'Signature' parameter. Authorization header requires 'SignedHeaders' parameter.", "incomplete_signature"},
		{"policy lacks the route", "POST", "/v1/executions/e1/redrive", nil, asAlice, msgForbidden, "policy"},
	}
	for _, c := range refused {
		tf.invoked = nil
		code, resp, _ := tf.do(t, c.method, c.path, c.body, c.sign)
		want, _ := json.Marshal(map[string]string{"message": c.message})
		if code != 403 || resp != string(want) {
			t.Errorf("%s: %d %s, want 403 %s", c.name, code, resp, want)
		}
		if len(tf.invoked) != 0 {
			t.Errorf("%s: the function was invoked", c.name)
		}
		if !strings.Contains(tf.logs.String(), `"reason":"`+c.reason+`"`) {
			t.Errorf("%s: no route_denied with reason %s in the log", c.name, c.reason)
		}
	}
	// Within the 5 minutes the signature is current.
	tf.now = func() time.Time { return signedAt.Add(4 * time.Minute) }
	if code, resp, _ := tf.do(t, "GET", "/v1/executions/e1", nil, asAlice); code != 200 {
		t.Errorf("signed 4 minutes ago: %d %s", code, resp)
	}
	tf.now = func() time.Time { return signedAt }

	// The policy refusal is logged with the caller, the route and the
	// missing grant; no signature is ever logged.
	var denied map[string]any
	for line := range strings.SplitSeq(tf.logs.String(), "\n") {
		if strings.Contains(line, `"reason":"policy"`) {
			_ = json.Unmarshal([]byte(line), &denied)
		}
	}
	if denied["event"] != "route_denied" || denied["caller_arn"] != alice.ARN || denied["route"] != "POST /v1/executions/{executionId}/redrive" ||
		denied["missing"] != "Allow execute-api:Invoke on arn:aws:execute-api:eu-west-1:111122223333:api1/$default/POST/v1/executions/e1/redrive" {
		t.Errorf("route_denied %v", denied)
	}
	if strings.Contains(tf.logs.String(), "Signature=") || strings.Contains(tf.logs.String(), "alice-secret") {
		t.Error("a signature or a secret is in the log")
	}

	// The await completion route (NONE) needs no signature and gets no
	// authorizer.
	code, resp, ev = tf.do(t, "POST", "/v1/executions/e1/awaits/a1/complete", []byte(`{}`), nil)
	if code != 200 || ev.RequestContext.Authorizer != nil || ev.PathParameters["awaitId"] != "a1" {
		t.Errorf("await completion: %d %s %+v", code, resp, ev.RequestContext.Authorizer)
	}
}

// A caller without a policy may invoke every AWS_IAM route.
func TestCallerWithoutPolicyInvokesAnything(t *testing.T) {
	root := Caller{AccessKeyID: "AKIAROOT", SecretAccessKey: "root-secret", ARN: "arn:aws:iam::111122223333:user/root"}
	tf := newTestFront(t, []Route{{Key: "ANY /{proxy+}", Authorization: AuthIAM, Function: Submit}}, []Caller{root})
	for _, p := range []string{"/v1/executions/e1/redrive", "/anything/else"} {
		if code, resp, _ := tf.do(t, "POST", p, nil, signer(root.AccessKeyID, root.SecretAccessKey, signedAt)); code != 200 {
			t.Errorf("%s: %d %s", p, code, resp)
		}
	}
}

// Every AWS_IAM route of the dev template is granted by the client or
// the operator policy: a route the policies forgot fails here.
func TestDevTemplateIAMRoutesAreGranted(t *testing.T) {
	client, operator, routes := devPolicies(t)
	clientC := Caller{AccessKeyID: "AKIACLIENT", SecretAccessKey: "c", ARN: "arn:aws:iam::111122223333:user/client", Policy: client}
	opsC := Caller{AccessKeyID: "AKIAOPS", SecretAccessKey: "o", ARN: "arn:aws:iam::111122223333:user/ops", Policy: operator}
	tf := newTestFront(t, routes, []Caller{clientC, opsC})
	n := 0
	for _, rt := range routes {
		if rt.Authorization != AuthIAM {
			continue
		}
		n++
		method, path, _ := strings.Cut(rt.Key, " ")
		segs := strings.Split(path, "/")
		for i, seg := range segs {
			if m := routeVar.FindStringSubmatch(seg); m != nil {
				segs[i] = m[1] + "-1"
			}
		}
		path = strings.Join(segs, "/")
		var got []int
		for _, c := range []Caller{clientC, opsC} {
			code, _, ev := tf.do(t, method, path, nil, signer(c.AccessKeyID, c.SecretAccessKey, signedAt))
			got = append(got, code)
			if code == 200 && ev.RouteKey != rt.Key {
				t.Errorf("%s %s was routed to %q, want %q", method, path, ev.RouteKey, rt.Key)
			}
		}
		if got[0] != 200 && got[1] != 200 {
			t.Errorf("route %q: neither ClientInvokePolicy nor OperatorRedrivePolicy allows %s %s (%v)", rt.Key, method, path, got)
		}
	}
	if n < 16 {
		t.Errorf("%d AWS_IAM routes in the dev template, want 16", n)
	}
}
