package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestAdminTokenOnlyOnOperatorRoutes: the admin token goes on the
// operator routes the server authorizes with it (re-drive, cancel, bulk
// re-drive and its progress) and on no other request: submissions and
// reads (status, result, list, history, dead letters, the OpenAPI
// document) carry no Authorization header.
func TestAdminTokenOnlyOnOperatorRoutes(t *testing.T) {
	hc, got := capture(t)
	c, err := New("http://127.0.0.1:8080", WithHTTPClient(hc), WithAdminToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	calls := []struct {
		name     string
		operator bool
		call     func() error
	}{
		{"submit", false, func() error { _, err := c.Submit(ctx, SubmitRequest{PipelineID: "p"}); return err }},
		{"status", false, func() error { _, err := c.Status(ctx, "e-1"); return err }},
		{"result", false, func() error { _, err := c.Result(ctx, "e-1"); return err }},
		{"result to", false, func() error { _, _, err := c.ResultTo(ctx, "e-1", io.Discard); return err }},
		{"list", false, func() error { _, err := c.List(ctx, ListQuery{}); return err }},
		{"history", false, func() error { _, err := c.HistoryPage(ctx, "e-1", HistoryPageOptions{}); return err }},
		{"dead letters", false, func() error { _, err := c.DeadLetters(ctx, DeadLetterQuery{}); return err }},
		{"openapi", false, func() error { _, err := c.OpenAPI(ctx); return err }},
		{"redrive", true, func() error { _, err := c.Redrive(ctx, "e-1", RedriveRequest{Reason: "r"}); return err }},
		{"cancel", true, func() error { _, err := c.Cancel(ctx, "e-1", CancelRequest{Reason: "r"}); return err }},
		{"bulk redrive", true, func() error { _, err := c.StartRedrives(ctx, BulkRedriveRequest{Reason: "r"}); return err }},
		{"redrive progress", true, func() error { _, err := c.RedriveProgress(ctx, "r-1"); return err }},
	}
	for i, k := range calls {
		if err := k.call(); err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		want := ""
		if k.operator {
			want = "Bearer s3cret"
		}
		if auth := (*got)[i].header.Get("Authorization"); auth != want {
			t.Errorf("%s sent Authorization %q, want %q", k.name, auth, want)
		}
	}
}

// recorder is a server that records the headers of every request it
// gets and answers 200 {}.
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) seen() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// TestRedirectIsNotFollowed: an answer that redirects to another port of
// the same host (where net/http would keep the Authorization header) is
// an *Error naming the Location, and the other server gets nothing: no
// request, so no admin token; so for every redirect status, reads and
// operator calls alike, even with a caller's http.Client that would
// follow it.
func TestRedirectIsNotFollowed(t *testing.T) {
	other := newRecorder(t)
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.srv.URL+r.URL.Path, code)
		}))
		t.Cleanup(redirector.Close)
		follows := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
		c, err := New(redirector.URL, WithAdminToken("s3cret"), WithHTTPClient(follows))
		if err != nil {
			t.Fatal(err)
		}
		_, errRedrive := c.Redrive(t.Context(), "e-1", RedriveRequest{Reason: "r"})
		_, errStatus := c.Status(t.Context(), "e-1")
		_, _, errResult := c.ResultTo(t.Context(), "e-1", io.Discard)
		for _, err := range []error{errRedrive, errStatus, errResult} {
			var e *Error
			if !errors.As(err, &e) || e.StatusCode != code || !strings.Contains(e.Error(), other.srv.URL+"/v1/executions/e-1") ||
				!strings.Contains(e.Error(), "follows no redirect") {
				t.Errorf("%d: error %v, want an *Error naming the Location", code, err)
			}
		}
		if follows.CheckRedirect == nil {
			t.Fatal("the caller's http.Client was changed")
		}
	}
	if h := other.seen(); len(h) != 0 {
		t.Fatalf("the redirect target got %d requests (first Authorization %q)", len(h), h[0].Get("Authorization"))
	}
}

// endless answers every request with status and a body that never ends
// (chunked, no Content-Length), until the client goes away.
func endless(t *testing.T, status int, contentType string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		chunk := []byte(`{"detail":"` + strings.Repeat("x", 64<<10))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEndlessAnswerIsBounded: an answer without end (a 200 document, a
// 500 problem, a result read by Result) or one whose Content-Length is
// over MaxDocumentBytes fails with ErrResponseTooLarge after at most
// MaxDocumentBytes read, instead of taking the memory.
func TestEndlessAnswerIsBounded(t *testing.T) {
	for _, tc := range []struct {
		status      int
		contentType string
	}{{200, "application/json"}, {500, "application/problem+json"}, {200, "application/octet-stream"}} {
		srv := endless(t, tc.status, tc.contentType)
		c, err := New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Status(t.Context(), "e-1")
		if !errors.Is(err, ErrResponseTooLarge) || !strings.Contains(err.Error(), "exceeds 16 MiB") {
			t.Errorf("status %d: error %v, want ErrResponseTooLarge", tc.status, err)
		}
		if _, err := c.Result(t.Context(), "e-1"); !errors.Is(err, ErrResponseTooLarge) {
			t.Errorf("result %d: error %v, want ErrResponseTooLarge", tc.status, err)
		}
	}
	declared := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(MaxDocumentBytes+1))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(declared.Close)
	c, err := New(declared.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(t.Context(), "e-1"); !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("declared too large: error %v", err)
	}
}

// counter counts the bytes written to it and keeps none.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// TestResultToStreamsALargeResult: ResultTo writes a result larger than
// MaxDocumentBytes to its writer as it arrives, with its media type and
// message type; an error answer is the *Error Result gives.
func TestResultToStreamsALargeResult(t *testing.T) {
	size := MaxDocumentBytes + 5<<20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "missing") {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"urn:qasync:problem:execution-not-found","title":"Execution not found","status":404}`))
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Header().Set(MessageTypeHeader, "acme.Big")
		chunk := make([]byte, 1<<20)
		for i := 0; i < size>>20; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var w counter
	r, n, err := c.ResultTo(context.Background(), "e-1", &w)
	if err != nil || n != int64(size) || w.n != int64(size) || r.ContentType != "application/x-protobuf" || r.MessageType != "acme.Big" || r.Data != nil {
		t.Fatalf("ResultTo: %+v, %d bytes (%d written), %v", r, n, w.n, err)
	}
	if _, _, err := c.ResultTo(context.Background(), "missing", &w); !IsNotFound(err) {
		t.Fatalf("ResultTo of a missing execution: %v", err)
	}
}
