package httpapi_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/internal/httpapi"
)

// raw sends the bytes of one request to srv over a new connection and
// reads the response.
func raw(t *testing.T, srv *httptest.Server, request string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request[:min(len(request), 60)], err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// TestHeadersOverTheLimitAre431Problems: a request whose request line
// and headers are over Options.MaxHeaderBytes is answered 431
// headers-too-large as problem+json, naming the limit; at the limit it is
// served.
func TestHeadersOverTheLimitAre431Problems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := get(e, "/healthz", "X-Padding", strings.Repeat("p", httpapi.DefaultMaxHeaderBytes))
	p := wantProblem(t, w, http.StatusRequestHeaderFieldsTooLarge, "headers-too-large")
	if !strings.Contains(p.Detail, "65536") {
		t.Errorf("the detail %q does not name the limit", p.Detail)
	}
	small := newEnv(t, withHTTP(func(o *httpapi.Options) { o.MaxHeaderBytes = 200 }))
	// "GET /healthz HTTP/1.1\r\n" (23), "Host: example.com\r\n" (19) and
	// "X-Padding: \r\n" (13): 55 bytes besides the value.
	if w := get(small, "/healthz", "X-Padding", strings.Repeat("p", 200-55)); w.Code != http.StatusOK {
		t.Errorf("headers at the limit: %d %s", w.Code, w.Body)
	}
	wantProblem(t, get(small, "/healthz", "X-Padding", strings.Repeat("p", 200-54)), http.StatusRequestHeaderFieldsTooLarge, "headers-too-large")
}

// TestProtocolErrorsThroughAServer: through net/http's server, what a
// handler sees is answered problem+json (a 431 under the handler's
// limit, a 404 for an unknown or non-canonical path, a 405, a 413);
// what net/http answers before any handler runs (headers over its own
// MaxHeaderBytes, a malformed request line or header, an unsupported
// HTTP version) stays text/plain, as docs/http-api.md says.
func TestProtocolErrorsThroughAServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withHTTP(func(o *httpapi.Options) { o.MaxBodyBytes = 16 }))
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	pad := func(n int) string { return "X-Padding: " + strings.Repeat("p", n) + "\r\n" }
	for _, c := range []struct {
		name, request string
		status        int
		problem       bool
	}{
		{"handler 431", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + pad(100<<10) + "\r\n", 431, true},
		{"unknown path", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, true},
		{"dot segments", "GET /v1/x/../../healthz HTTP/1.1\r\nHost: x\r\n\r\n", 404, true},
		{"double slash", "GET //healthz HTTP/1.1\r\nHost: x\r\n\r\n", 404, true},
		{"wrong method", "DELETE /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 405, true},
		{"body too large", "POST /v1/pipelines/echo/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n" +
			`{"padding":"0123456789012345678901234"}` + "\n", 413, true},
		{"net/http 431", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + pad(http.DefaultMaxHeaderBytes+8<<10) + "\r\n", 431, false},
		{"malformed header", "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, false},
		{"malformed request line", "GET\r\nHost: x\r\n\r\n", 400, false},
		{"unsupported version", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, false},
	} {
		res := raw(t, srv, c.request)
		ct := res.Header.Get("Content-Type")
		if res.StatusCode != c.status || (ct == httpapi.ContentTypeProblem) != c.problem {
			t.Errorf("%s: %d %q, want %d (problem+json %v)", c.name, res.StatusCode, ct, c.status, c.problem)
		}
	}
}
