// Package httpapi is the runtime's HTTP interface: submit an execution,
// read its status and result, and (for operators) list, cancel and
// re-drive executions. New returns a plain http.Handler, served as is by
// a local server and adapted to API Gateway events on Lambda. The OpenAPI
// 3.1 document of every route (OpenAPI) is served at /openapi.json.
//
// Routes:
//
//	POST /v1/pipelines/{pipelineId}/executions   submit: 202 new, 200 duplicate
//	GET  /v1/pipelines                           the registered pipelines: versions, steps, input schema
//	GET  /v1/pipelines/{pipelineId}              one of them
//	GET  /v1/executions                          list the tenant's executions, newest first
//	                                             (pipelineId, status, limit, cursor), or the one
//	                                             live execution of an idempotencyKey
//	GET  /v1/executions/{executionId}            status document
//	GET  /v1/executions/{executionId}/result     result bytes once SUCCEEDED, else 409
//	GET  /v1/executions/{executionId}/history    a page of the execution's events in commit
//	                                             order (limit, default 100, at most 1000;
//	                                             cursor; nextCursor, endCursor)
//	POST /v1/executions/{executionId}/redrive    operator re-drive (Bearer admin token; a
//	                                             REMOTE_OUTCOME_UNKNOWN execution needs
//	                                             "confirmedNoRemoteEffect": true)
//	POST /v1/executions/{executionId}/cancel     operator cancel (as re-drive): 202, 200 when
//	                                             already CANCELLED, 409 when ended
//	POST /v1/redrives                            operator bulk re-drive (as re-drive): 202 new,
//	                                             200 when its Idempotency-Key named the job
//	GET  /v1/redrives/{redriveId}                its progress (as re-drive)
//	POST/GET /v1/schedules, GET/DELETE /v1/schedules/{scheduleId},
//	POST /v1/schedules/{scheduleId}/pause|resume schedules (as re-drive)
//	GET  /v1/dead-letters                        the tenant's dead letters, newest first, each
//	                                             with its execution's current status and
//	                                             whether it is outstanding (outstanding=true)
//	GET  /v1/dead-letters/counts                 the dead letters counted by error code
//	GET  /v1/inputs/{executionId}                operator: an execution's input (as re-drive;
//	                                             at most 1 MiB, every view logged)
//	POST /v1/executions/{executionId}/awaits/{awaitId}/complete
//	                                             complete an await step (X-Resume-Token;
//	                                             body = completion payload): 200
//	GET  /openapi.json                           the OpenAPI document
//	GET  /healthz                                {"status":"ok"}
//
// The operator routes (re-drive, cancel, bulk re-drive and its progress)
// are always routed: without an admin token (and not authorized
// upstream) they answer 403 operator-routes-disabled naming the setting
// that enables them. Wrong tokens are limited per client address
// (package authlimit, Options.AuthLimiter): past the limit a request is
// answered 429 too-many-attempts with Retry-After before its token is
// looked at.
//
// Every error is an RFC 9457 application/problem+json document (Problem)
// whose type is ProblemTypePrefix followed by one of these kinds:
// invalid-request, invalid-pipeline-id, invalid-tenant,
// invalid-idempotency-key, idempotency-key-required, invalid-content-type,
// invalid-json, invalid-cursor, invalid-input (the pipeline's first step
// refuses the input: a decode error, a map's limits) (400); unauthorized
// (401); forbidden, operator-routes-disabled (403);
// not-found, pipeline-not-found, execution-not-found, redrive-not-found,
// schedule-not-found, history-unavailable (404); method-not-allowed (405, with Allow);
// execution-not-succeeded, execution-not-redrivable,
// execution-not-cancellable, version-mismatch, await-conflict,
// too-many-schedules (409);
// payload-too-large, input-too-large (413); unsupported-media-type (415: a body whose
// Content-Type the pipeline's first step does not take, such as
// text/plain for a step that decodes JSON); idempotency-key-mismatch
// (422); too-many-attempts (429, with Retry-After);
// headers-too-large (431: the request line and headers over
// Options.MaxHeaderBytes); internal (500); unavailable, awaits-disabled,
// dead-letters-unavailable, redrives-unavailable, schedules-unavailable
// (503).
//
// A request is validated completely before the runtime is called, so a
// rejected request stores nothing. Each request is logged once as event
// "http_request"; bodies and payload bytes are never logged.
package httpapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/engine"
)

// DefaultMaxBodyBytes is the default Options.MaxBodyBytes: 6 MiB, the
// request payload limit of a synchronously invoked Lambda function.
const DefaultMaxBodyBytes = 6 << 20

// DefaultMaxHeaderBytes is the default Options.MaxHeaderBytes: 64 KiB,
// far above what a client of the API sends (API Gateway's own limit is
// about 10 KB) and well below net/http's (http.DefaultMaxHeaderBytes, 1
// MiB, what qasync serve's http.Server keeps), which stays the backstop
// and answers text/plain.
const DefaultMaxHeaderBytes = 64 << 10

// Options configure the handler. The zero value is usable.
type Options struct {
	// MaxBodyBytes is the largest accepted request body; a larger one is
	// answered with 413. Zero or negative means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds the request line and headers (their sizes
	// summed as net/http counts them); a larger request is answered 431
	// problem+json. Zero or negative means DefaultMaxHeaderBytes. It only
	// acts below the server's own limit (http.Server.MaxHeaderBytes,
	// default 1 MiB), past which net/http answers 431 text/plain before
	// any handler runs.
	MaxHeaderBytes int
	// AdminToken is the Bearer token of the operator routes: re-drive,
	// cancel, bulk re-drive and its progress, an execution's input. Empty
	// disables them (they then answer 403 operator-routes-disabled, naming
	// the setting), unless RedriveAuthorizedUpstream is set. A result read
	// with it is an operator's view, logged as payload_viewed.
	AdminToken string
	// AuthLimiter limits wrong admin tokens per client address (the
	// console's sign-in shares it in Site). Nil: a limiter of the
	// handler's own with authlimit's defaults (10 failures, then one a
	// second).
	AuthLimiter *authlimit.Limiter
	// RedriveAuthorizedUpstream serves the operator routes without a token
	// because something in front has already authorized them: API
	// Gateway, where each has its own IAM permission (or JWT scope) that
	// submitting callers lack. Never set it on a listener callers reach
	// directly.
	RedriveAuthorizedUpstream bool
	// TenantFunc returns the tenant of a request. Default TenantFromHeader.
	// An error is answered with 400 (see ErrInvalidTenant).
	TenantFunc func(*http.Request) (string, error)
	// Logger receives one "http_request" event per request, and the
	// errors behind 5xx responses. Default slog.Default().
	Logger *slog.Logger
	// Console, when set, serves ConsolePrefix and the paths under it (the
	// web console, package console), so that one handler serves both.
	Console http.Handler
	// BasePath is prepended to the URLs the API returns (statusUrl,
	// resultUrl, Location), for a deployment that serves the routes under
	// a prefix the handler does not see, e.g. an API Gateway stage
	// ("/prod"). Routes are always matched without it. Default "".
	BasePath string
}

// ConsolePrefix is the path under which Options.Console is served.
const ConsolePrefix = "/console"

// Route patterns, as logged in the "route" key of "http_request" events.
const (
	routeSubmit  = "POST /v1/pipelines/{pipelineId}/executions"
	routeStatus  = "GET /v1/executions/{executionId}"
	routeResult  = "GET /v1/executions/{executionId}/result"
	routeRedrive = "POST /v1/executions/{executionId}/redrive"
	routeHealth  = "GET /healthz"
	routeAwait   = "POST /v1/executions/{executionId}/awaits/{awaitId}/complete"
	// The operator plane.
	routeList        = "GET /v1/executions"
	routeHistory     = "GET /v1/executions/{executionId}/history"
	routeCancel      = "POST /v1/executions/{executionId}/cancel"
	routeRedrives    = "POST /v1/redrives"
	routeRedriveJob  = "GET /v1/redrives/{redriveId}"
	routeDeadLetters = "GET /v1/dead-letters"
	routeDLQCounts   = "GET /v1/dead-letters/counts"
	routeInput       = "GET /v1/inputs/{executionId}"
	routeOpenAPI     = "GET /openapi.json"
)

// The pipeline catalog's routes (pipelines.go).
const (
	routePipelines = "GET /v1/pipelines"
	routePipeline  = "GET /v1/pipelines/{pipelineId}"
)

// api is the handler New returns.
type api struct {
	rt         *engine.Runtime
	mux        *http.ServeMux
	maxBody    int64
	maxHeader  int
	adminHash  *[sha256.Size]byte // nil: re-drive disabled
	limiter    *authlimit.Limiter
	tenantFunc func(*http.Request) (string, error)
	// redriveUpstream: the re-drive route is authorized in front of us.
	redriveUpstream bool
	log             *slog.Logger
	basePath        string
	console         http.Handler
	// catalog is the answer of GET /v1/pipelines, built on first use.
	catalog func() []client.Pipeline
}

// New returns the HTTP handler of rt. It panics if rt is nil.
func New(rt *engine.Runtime, opts Options) http.Handler {
	if rt == nil {
		panic("httpapi: New: nil runtime")
	}
	a := &api{
		rt:         rt,
		mux:        http.NewServeMux(),
		maxBody:    opts.MaxBodyBytes,
		maxHeader:  opts.MaxHeaderBytes,
		limiter:    opts.AuthLimiter,
		tenantFunc: opts.TenantFunc,
		log:        opts.Logger,
		basePath:   strings.TrimRight(opts.BasePath, "/"),
		console:    opts.Console,
	}
	if a.maxBody <= 0 {
		a.maxBody = DefaultMaxBodyBytes
	}
	if a.maxHeader <= 0 {
		a.maxHeader = DefaultMaxHeaderBytes
	}
	if a.limiter == nil {
		a.limiter = authlimit.New(authlimit.Config{})
	}
	a.catalog = sync.OnceValue(func() []client.Pipeline { return catalog(rt.Registry(), a.log) })
	if a.tenantFunc == nil {
		a.tenantFunc = TenantFromHeader
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.basePath != "" && !strings.HasPrefix(a.basePath, "/") {
		a.basePath = "/" + a.basePath
	}
	a.route(routeSubmit, a.submit)
	a.route(routePipelines, a.pipelines)
	a.route(routePipeline, a.pipeline)
	a.route(routeStatus, a.status)
	a.route(routeResult, a.result)
	a.route(routeHealth, a.health)
	a.route(routeAwait, a.completeAwait)
	a.route(routeList, a.list)
	a.route(routeHistory, a.history)
	a.route(routeDeadLetters, a.deadLetters)
	a.route(routeDLQCounts, a.deadLetterCounts)
	a.route(routeOpenAPI, a.openAPI)
	switch {
	case opts.RedriveAuthorizedUpstream:
		a.redriveUpstream = true
	case opts.AdminToken != "":
		h := sha256.Sum256([]byte(opts.AdminToken))
		a.adminHash = &h
	}
	// The operator routes, authorized as re-drive is (authorized): 403
	// when disabled, so that a caller learns what to configure.
	a.route(routeRedrive, a.redrive)
	a.route(routeCancel, a.cancel)
	a.route(routeRedrives, a.startRedrives)
	a.route(routeRedriveJob, a.redriveProgress)
	a.routePauses()
	a.route(routeInput, a.input)
	a.routeSchedules()
	// Everything else: a problem+json 404, never the mux's text/plain one.
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, kindNotFound.problem("No route matches the request path."))
	})
	return a
}

// route registers h under "METHOD /path", and under "/path" alone a
// problem+json 405 naming the allowed methods, so that the mux's own
// text/plain 405 never answers.
func (a *api) route(pattern string, h http.HandlerFunc) {
	method, p, _ := strings.Cut(pattern, " ")
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	a.mux.HandleFunc(pattern, h)
	a.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeProblem(w, kindMethodNotAllowed.problem(fmt.Sprintf("This resource supports %s only.", allow)))
	})
}

// reqInfoKey is the context key of the *reqInfo of a request.
type reqInfoKey struct{}

// reqInfo carries what handlers learn about a request to its log event.
type reqInfo struct {
	tenant string
}

// ServeHTTP routes the request and logs it; the console's paths go to
// the console, which logs its own.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; a.console != nil && (p == ConsolePrefix || strings.HasPrefix(p, ConsolePrefix+"/")) {
		a.console.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	info := &reqInfo{}
	rec := &recorder{ResponseWriter: w}
	r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.log.LogAttrs(r.Context(), slog.LevelError, "http_panic", slog.String("event", "http_panic"),
				slog.String("method", r.Method), slog.String("route", r.Pattern), slog.String("panic", fmt.Sprint(v)))
			if !rec.wrote {
				writeProblem(rec, kindInternal.problem("The request could not be processed."))
			}
		}
		route := r.Pattern
		if route == "/" {
			route = "" // the not-found catch-all
		}
		level := slog.LevelInfo
		if rec.status >= 500 {
			level = slog.LevelError
		}
		a.log.LogAttrs(r.Context(), level, "http_request", slog.String("event", "http_request"),
			slog.String("method", r.Method), slog.String("route", route), slog.Int("status", rec.status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000), slog.String("tenant", info.tenant))
	}()
	if n := headerBytes(r); n > a.maxHeader {
		writeProblem(rec, kindHeadersTooLarge.problem(fmt.Sprintf("The request line and headers are %d bytes; this server takes at most %d.", n, a.maxHeader)))
		return
	}
	// The mux would redirect a non-canonical path ("/a/../b", "//x") with a
	// text/plain 307; an API has no use for that, so it is not found.
	if p := r.URL.EscapedPath(); r.RequestURI == "*" || p != cleanPath(p) {
		writeProblem(rec, kindNotFound.problem("No route matches the request path."))
		return
	}
	a.mux.ServeHTTP(rec, r)
}

// headerBytes is the size of r's request line and header block as
// net/http reads them ("METHOD URI PROTO", the Host header and every
// "Name: value" line, each with its CRLF), the measure of
// Options.MaxHeaderBytes.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + len(v) + 4
		}
	}
	return n
}

// cleanPath is the mux's canonical form of p: rooted, without "." and ".."
// elements or repeated slashes, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// recorder remembers the response status for the log.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

// WriteHeader implements http.ResponseWriter.
func (rec *recorder) WriteHeader(code int) {
	if !rec.wrote && code >= 200 {
		rec.status, rec.wrote = code, true
	}
	rec.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (rec *recorder) Write(b []byte) (int, error) {
	if !rec.wrote {
		rec.status, rec.wrote = http.StatusOK, true
	}
	return rec.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// statusURL is the URL of an execution's status document.
func (a *api) statusURL(id string) string {
	return a.basePath + "/v1/executions/" + url.PathEscape(id)
}

// resultURL is the URL of an execution's result.
func (a *api) resultURL(id string) string { return a.statusURL(id) + "/result" }

func (a *api) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
