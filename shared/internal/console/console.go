// Package console is the operator plane's web console: server-rendered
// HTML pages (written by the console's own code, html.go; a stylesheet
// and a little script, all embedded in the binary; nothing is fetched
// from outside) that list a tenant's executions, show one execution's
// timeline a page of its history at a time, list its dead letters, and
// cancel or re-drive an execution.
//
// New returns an http.Handler for the paths under Prefix; the HTTP API
// serves it there (httpapi.Options.Console, which Site sets), so that
// `qasync serve` and the submit function serve both on one listener.
//
//	GET  /console                              executions, newest first (?pipeline=&status=&createdAfter=&createdBefore=&limit=&cursor=)
//	GET  /console/search                       an execution by id or by idempotency key (?q=)
//	GET  /console/executions/{id}              one execution: summary, a map's children counts or a child's parent, steps, timeline, actions (?cursor=: its history's next page; ?show=input|result: the payload, operator)
//	GET  /console/executions/{id}/input        the input bytes, as an attachment (operator)
//	GET  /console/executions/{id}/result       the result bytes, as an attachment (operator)
//	GET  /console/dead-letters                 dead-letter records with their executions' status now, counts by error code, the bulk re-drive form (?pipeline=&outstanding=1&limit=&cursor=)
//	POST /console/redrives                     a bulk re-drive's dry run (operator), then GET /console/redrives/{id}
//	POST /console/redrives/{id}/start          start the bulk re-drive a dry run counted (operator)
//	GET  /console/redrives/{id}                a bulk re-drive's progress (operator)
//	POST /console/pauses, /console/resumes     the same for a bulk pause and a bulk resume (and .../{id}/start, GET .../{id})
//	GET  /console/schedules                    the tenant's schedules, and the create form (operator)
//	POST /console/schedules                    create a schedule (operator)
//	POST /console/schedules/{id}/{op}          pause, resume or delete a schedule (operator)
//	POST /console/executions/{id}/cancel       cancel (operator; reason required)
//	POST /console/executions/{id}/pause        pause (operator; reason required)
//	POST /console/executions/{id}/resume       resume (operator; reason required)
//	POST /console/executions/{id}/redrive      re-drive (operator; reason required)
//	POST /console/login, /console/logout       operator sign-in with the admin token (a cookie); sign-out revokes the session
//	POST /console/tenant                       the tenant to show (http.tenant-source=header only)
//	GET  /console/assets/{name}                the embedded stylesheet and script
//
// Tenancy: every page shows the tenant the HTTP API's tenant function
// gives the request. With the header tenant source a browser cannot send
// X-Tenant-Id, so the console offers a tenant field that stores the tenant
// in a cookie and passes it to the tenant function as that header (a
// header the request does carry wins).
//
// Actions, and the payloads (input and result), need the operator token
// (admin.token): the sign-in form checks it and sets an HttpOnly,
// SameSite=Strict session cookie that holds an expiry, a random session
// id and their HMAC keyed by the token, never the token itself. Sign-out
// revokes the session id in a store every instance reads (Revocations,
// sessions.go). Every POST is checked against cross-site requests
// (http.CrossOriginProtection) and carries a CSRF token that must equal
// the console's CSRF cookie. Without a configured token the actions and
// payloads are neither shown nor served; every view of a payload is
// logged (payload_viewed, never its bytes).
package console

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// Prefix is the path under which the console is served (the HTTP API
// hands it the paths under it: httpapi.Options.Console).
const Prefix = httpapi.ConsolePrefix

// Backend is what the console reads and acts through: the engine's
// operator API (*engine.Runtime, through Engine).
type Backend interface {
	// List returns a page of one tenant's executions, newest first.
	List(ctx context.Context, q store.ListQuery) (store.ListPage, error)
	// Status returns one execution's row (store.ErrNotFound for another
	// tenant's).
	Status(ctx context.Context, key store.Key) (store.Execution, error)
	// Result returns a SUCCEEDED execution's result (an error wrapping
	// engine.ErrNotSucceeded otherwise).
	Result(ctx context.Context, key store.Key) (store.Execution, payload.Payload, error)
	// History returns an execution's history, its events in commit
	// order (store.ErrNotFound when none is recorded). The console pages
	// it with history.PageAfter, as the HTTP API's history route does, so
	// that a cursor naming no event of this history is refused.
	History(ctx context.Context, key store.Key) ([]history.Event, error)
	// ChildCounts returns the counts of the map e waits for (or last
	// waited for): nil when e has none, or when the deployment keeps no
	// counts.
	ChildCounts(ctx context.Context, e store.Execution) (*engine.ChildCounts, error)
	// Input returns an execution's input (store.ErrNotFound for another
	// tenant's).
	Input(ctx context.Context, key store.Key) (store.Execution, payload.Payload, error)
	// DeadLetterViews returns a page of one tenant's dead-letter records,
	// each with its execution's row now and whether its failure is still
	// outstanding.
	DeadLetterViews(ctx context.Context, q engine.DeadLetterViewQuery) (engine.DeadLetterViewPage, error)
	// DeadLetterCounts counts one tenant's dead-letter records by error
	// code, over a bounded number of the newest.
	DeadLetterCounts(ctx context.Context, q deadletter.ListQuery) (engine.DeadLetterCounts, error)
	// Cancel cancels an execution; changed is false when it was already
	// CANCELLED. SUCCEEDED, FAILED and DLQ executions are refused.
	Cancel(ctx context.Context, key store.Key, reason string) (e store.Execution, changed bool, err error)
	// RedriveWith re-drives a DLQ, FAILED (or, confirmed,
	// REMOTE_OUTCOME_UNKNOWN) execution.
	RedriveWith(ctx context.Context, key store.Key, opts engine.RedriveOptions) (store.Execution, error)
	// Pause pauses an execution (engine.Runtime.Pause): at once when it
	// is queued or waiting, as a request honoured at its next commit when
	// it runs; changed is false when it was already paused or asked to be.
	Pause(ctx context.Context, key store.Key, opts engine.PauseOptions) (e store.Execution, changed bool, err error)
	// Resume resumes a PAUSED execution, or withdraws a pause request
	// not yet honoured (engine.ErrNotPaused otherwise).
	Resume(ctx context.Context, key store.Key, opts engine.PauseOptions) (store.Execution, error)
	// StartRedrivesWith starts a bulk re-drive, pause or resume (or its
	// dry run) of a tenant's executions that match a filter.
	StartRedrivesWith(ctx context.Context, tenant string, opts engine.RedrivesOptions) (engine.RedriveJob, error)
	// RedriveJob returns a tenant's bulk re-drive and its progress
	// (store.ErrNotFound for another tenant's or an unknown id).
	RedriveJob(ctx context.Context, tenant, id string) (engine.RedriveJob, error)
}

// ErrNotSupported is returned by a Backend that cannot do what the console
// asks (a deployment whose engine lacks the operation); the page says so.
var ErrNotSupported = errors.New("console: not supported by this deployment")

// Options configure the console. The zero value serves the default tenant
// from the X-Tenant-Id header with actions disabled.
type Options struct {
	// AdminToken is the operator token (admin.token). Empty hides and
	// refuses the actions (cancel, re-drive, sign-in).
	AdminToken string
	// TenantFunc returns the tenant of a request: the HTTP API's tenant
	// function. Default httpapi.TenantFromHeader.
	TenantFunc func(*http.Request) (string, error)
	// TenantCookie says the tenant function reads the X-Tenant-Id header
	// (http.tenant-source=header): the console then offers a tenant field
	// and passes its value (a cookie) as that header when the request has
	// none.
	TenantCookie bool
	// Pipelines are the registered pipeline ids, offered by the pipeline
	// filter.
	Pipelines []string
	// Logger receives one "console_request" event per request, and the
	// console's action and sign-in events. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of ages and session expiry. Default time.Now.
	Now func() time.Time
	// Revocations keep the signed-out sessions. Default
	// LocalRevocations: this process only; Site shares the state store's
	// (StoreRevocations), so that a sign-out holds on every instance.
	Revocations Revocations
	// AuthLimiter limits wrong operator tokens at sign-in per client
	// address (Site shares the HTTP API's). Nil: a limiter of the
	// console's own with authlimit's defaults.
	AuthLimiter *authlimit.Limiter
}

// Console is the console's http.Handler (New).
type Console struct {
	b          Backend
	mux        *http.ServeMux
	adminHash  *[sha256.Size]byte // nil: actions disabled
	sessionKey []byte             // HMAC key of session cookies (derived from the token)
	tenantFunc func(*http.Request) (string, error)
	tenantCk   bool
	pipelines  []string
	log        *slog.Logger
	now        func() time.Time
	cop        *http.CrossOriginProtection
	// revocations keep the signed-out sessions.
	revocations Revocations
	limiter     *authlimit.Limiter
}

// New returns the console over b. It panics if b is nil.
func New(b Backend, opts Options) *Console {
	if b == nil {
		panic("console: New: nil backend")
	}
	c := &Console{
		b:          b,
		mux:        http.NewServeMux(),
		tenantFunc: opts.TenantFunc,
		tenantCk:   opts.TenantCookie,
		pipelines:  append([]string(nil), opts.Pipelines...),
		log:        opts.Logger,
		now:        opts.Now,
		cop:        http.NewCrossOriginProtection(),
		limiter:    opts.AuthLimiter,
	}
	if c.limiter == nil {
		c.limiter = authlimit.New(authlimit.Config{})
	}
	if c.tenantFunc == nil {
		c.tenantFunc = defaultTenantFunc
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.revocations = opts.Revocations
	if c.revocations == nil {
		c.revocations = LocalRevocations(c.now)
	}
	if opts.AdminToken != "" {
		h := sha256.Sum256([]byte(opts.AdminToken))
		c.adminHash = &h
		c.sessionKey = sessionKey(opts.AdminToken)
	}
	c.mux.HandleFunc("GET "+Prefix+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	})
	c.mux.HandleFunc("GET "+Prefix, c.listPage)
	c.mux.HandleFunc("GET "+Prefix+"/executions/{id}", c.executionPage)
	c.mux.HandleFunc("GET "+Prefix+"/search", c.search)
	c.mux.HandleFunc("GET "+Prefix+"/executions/{id}/input", c.inputBytes)
	c.mux.HandleFunc("GET "+Prefix+"/executions/{id}/result", c.resultBytes)
	c.mux.HandleFunc("GET "+Prefix+"/dead-letters", c.deadLettersPage)
	for _, k := range bulkKinds {
		c.mux.HandleFunc("POST "+Prefix+k.Path, c.bulkDryRun(k))
		c.mux.HandleFunc("POST "+Prefix+k.Path+"/{job}/start", c.bulkStart(k))
		c.mux.HandleFunc("GET "+Prefix+k.Path+"/{job}", c.bulkPage(k))
	}
	c.mux.HandleFunc("POST "+Prefix+"/executions/{id}/pause", c.pause)
	c.mux.HandleFunc("POST "+Prefix+"/executions/{id}/resume", c.resume)
	c.registerSchedules()
	c.mux.HandleFunc("POST "+Prefix+"/executions/{id}/cancel", c.cancel)
	c.mux.HandleFunc("POST "+Prefix+"/executions/{id}/redrive", c.redrive)
	c.mux.HandleFunc("POST "+Prefix+"/login", c.login)
	c.mux.HandleFunc("POST "+Prefix+"/logout", c.logout)
	c.mux.HandleFunc("POST "+Prefix+"/tenant", c.setTenant)
	c.mux.HandleFunc("GET "+Prefix+"/assets/{name}", serveAsset)
	c.mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, http.StatusNotFound, "Not found", "No console page has this address.")
	})
	return c
}

// reqState is what the handlers of one request learn, for its log event.
type reqState struct {
	tenant string
	// op is whether the request carries an operator session (operator),
	// once opChecked.
	op, opChecked bool
}

type reqStateKey struct{}

// ServeHTTP serves a console path, with the security headers every
// response carries, and logs the request (never its query, form or
// cookies).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	st := &reqState{}
	rec := &statusRecorder{ResponseWriter: w}
	r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, st))
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c.log.LogAttrs(r.Context(), slog.LevelError, "console_panic", slog.String("event", "console_panic"),
				slog.String("method", r.Method), slog.String("route", r.Pattern))
			if !rec.wrote {
				c.errorPage(rec, r, http.StatusInternalServerError, "Internal error", "The page could not be shown.")
			}
		}
		level := slog.LevelInfo
		if rec.status >= 500 {
			level = slog.LevelError
		}
		c.log.LogAttrs(r.Context(), level, "console_request", slog.String("event", "console_request"),
			slog.String("method", r.Method), slog.String("route", r.Pattern), slog.Int("status", rec.status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000), slog.String("tenant", st.tenant))
	}()
	c.mux.ServeHTTP(rec, r)
}

// statusRecorder remembers the response status for the log.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

// WriteHeader implements http.ResponseWriter.
func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote && code >= 200 {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wrote {
		s.status, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logAction logs an operator action or sign-in (ids and outcomes only).
func (c *Console) logAction(r *http.Request, level slog.Level, event string, attrs ...slog.Attr) {
	c.log.LogAttrs(r.Context(), level, event, append([]slog.Attr{slog.String("event", event)}, attrs...)...)
}
