package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/internal/httpapi"
)

// Cookie names. Every console cookie has Path=/console, HttpOnly and
// SameSite=Strict (and Secure on HTTPS).
const (
	// SessionCookie holds an operator session: an expiry, a random
	// session id and their HMAC keyed by the admin token (never the
	// token).
	SessionCookie = "qasync_console_session"
	// CSRFCookie holds the random value every form must send back.
	CSRFCookie = "qasync_console_csrf"
	// TenantCookieName holds the tenant chosen in the tenant field.
	TenantCookieName = "qasync_console_tenant"
)

// SessionTTL is how long an operator sign-in lasts.
const SessionTTL = 8 * time.Hour

// csrfField is the form field carrying the CSRF token.
const csrfField = "csrf"

var defaultTenantFunc = httpapi.TenantFromHeader

// sessionKey derives the HMAC key of session cookies from the token, so
// that every process configured with the same token accepts the same
// sessions (several workers, Lambda instances) and a new token ends them.
func sessionKey(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("qasync console session key v1"))
	return m.Sum(nil)
}

// sessionValue is the cookie value of a new session that ends at exp:
// "v2.<expiry>.<session id>.<HMAC>", the id random (sign-out revokes it:
// Revocations).
func (c *Console) sessionValue(exp time.Time) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	e, id := strconv.FormatInt(exp.Unix(), 10), base64.RawURLEncoding.EncodeToString(b)
	return "v2." + e + "." + id + "." + c.sessionMAC(e, id)
}

// sessionMAC is the HMAC of a session's expiry and id.
func (c *Console) sessionMAC(exp, id string) string {
	m := hmac.New(sha256.New, c.sessionKey)
	m.Write([]byte("operator\n" + exp + "\n" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session is an operator session a cookie carries.
type session struct {
	id  string
	exp time.Time
}

// session returns the session r's cookie carries when its HMAC holds and
// it has not expired (whether it was revoked is operator's to ask).
func (c *Console) session(r *http.Request) (session, bool) {
	if c.adminHash == nil {
		return session{}, false
	}
	ck, err := r.Cookie(SessionCookie)
	if err != nil {
		return session{}, false
	}
	parts := strings.Split(ck.Value, ".")
	if len(parts) != 4 || parts[0] != "v2" {
		return session{}, false
	}
	sec, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !validSessionID(parts[2]) {
		return session{}, false
	}
	exp := time.Unix(sec, 0)
	if !c.now().Before(exp) || exp.After(c.now().Add(SessionTTL+time.Minute)) {
		return session{}, false
	}
	if !hmac.Equal([]byte(parts[3]), []byte(c.sessionMAC(parts[1], parts[2]))) {
		return session{}, false
	}
	return session{id: parts[2], exp: exp}, true
}

func validSessionID(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 16
}

// operator reports whether r carries a valid, unexpired operator session
// that was not signed out. The revocation is read once per request (the
// answer is kept in the request's state); a failed read refuses the
// session, and is logged.
func (c *Console) operator(r *http.Request) bool {
	st, _ := r.Context().Value(reqStateKey{}).(*reqState)
	if st != nil && st.opChecked {
		return st.op
	}
	op := false
	if s, ok := c.session(r); ok {
		revoked, err := c.revocations.Revoked(r.Context(), s.id)
		if err != nil {
			c.logAction(r, slog.LevelError, "console_session_check_failed", slog.String("error", err.Error()))
		}
		op = err == nil && !revoked
	}
	if st != nil {
		st.op, st.opChecked = op, true
	}
	return op
}

// tokenValid compares a submitted token with the admin token in constant
// time.
func (c *Console) tokenValid(token string) bool {
	if c.adminHash == nil || token == "" {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], c.adminHash[:]) == 1
}

// cookie returns a console cookie (Max-Age 0 for a session cookie,
// negative to delete).
func cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
}

// csrfToken returns the request's CSRF token, setting a new cookie when
// it has none (pages call it before writing, so that their forms carry
// the token the cookie holds).
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(CSRFCookie); err == nil && validCSRFValue(ck.Value) {
		return ck.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, cookie(r, CSRFCookie, v, 0))
	return v
}

func validCSRFValue(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 32
}

// errCSRF is the refusal of a cross-site or tokenless form post.
var errCSRF = errors.New("console: cross-site or stale form")

// checkPost refuses a POST that comes from another site (Sec-Fetch-Site,
// Origin) or whose CSRF field differs from the CSRF cookie, and parses
// its form (at most 64 KiB).
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request) error {
	if err := c.cop.Check(r); err != nil {
		return errCSRF
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("console: form: %w", err)
	}
	ck, err := r.Cookie(CSRFCookie)
	if err != nil || !validCSRFValue(ck.Value) {
		return errCSRF
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get(csrfField)), []byte(ck.Value)) != 1 {
		return errCSRF
	}
	return nil
}

// refusePost answers a POST that checkPost refused.
func (c *Console) refusePost(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errCSRF) {
		c.logAction(r, slog.LevelWarn, "console_csrf_refused", slog.String("route", r.Pattern))
		c.errorPage(w, r, http.StatusForbidden, "Form refused",
			"The form came from another site or is stale. Reload the page and try again.")
		return
	}
	c.errorPage(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
}

// tenantRequest returns r as the tenant function should see it: with the
// tenant cookie as the X-Tenant-Id header when the tenant source is the
// header and r carries none. editable says the tenant field applies.
func (c *Console) tenantRequest(r *http.Request) (_ *http.Request, editable bool) {
	if !c.tenantCk || len(r.Header.Values(httpapi.TenantHeader)) > 0 {
		return r, false
	}
	ck, err := r.Cookie(TenantCookieName)
	if err != nil || !httpapi.ValidTenantID(ck.Value) {
		return r, true
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set(httpapi.TenantHeader, ck.Value)
	return r2, true
}

// tenant resolves the request's tenant, or writes the error page and
// returns false.
func (c *Console) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	tr, _ := c.tenantRequest(r)
	t, err := c.tenantFunc(tr)
	if err == nil && !httpapi.ValidTenantID(t) {
		err = errors.New("the tenant function returned an invalid tenant id")
		c.logAction(r, slog.LevelError, "console_tenant_failed", slog.String("error", err.Error()))
		c.errorPage(w, r, http.StatusInternalServerError, "Internal error", "The tenant of the request could not be determined.")
		return "", false
	}
	switch {
	case err == nil:
	case errors.Is(err, httpapi.ErrUnauthenticated):
		c.errorPage(w, r, http.StatusUnauthorized, "No caller identity",
			"The request carries no caller identity, so the console cannot tell whose executions to show. "+
				"With an IAM or JWT tenant source, open the console through a proxy that authenticates you.")
		return "", false
	case errors.Is(err, httpapi.ErrInvalidTenant):
		c.errorPage(w, r, http.StatusBadRequest, "Invalid tenant", err.Error())
		return "", false
	default:
		c.logAction(r, slog.LevelError, "console_tenant_failed", slog.String("error", err.Error()))
		c.errorPage(w, r, http.StatusBadRequest, "Invalid tenant", "The tenant of the request could not be determined.")
		return "", false
	}
	if st, ok := r.Context().Value(reqStateKey{}).(*reqState); ok {
		st.tenant = t
	}
	return t, true
}

// login handles POST /console/login: a valid token sets the session
// cookie and returns to the page the form was on.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.adminHash == nil {
		c.errorPage(w, r, http.StatusNotFound, "Not found", "Operator actions are disabled: this server has no operator token (admin.token).")
		return
	}
	// Wrong tokens are limited per client address (shared with the API's
	// operator routes): past the limit the token is not looked at.
	now := c.now()
	if retry, ok := c.limiter.Check(r.Context(), c.log, r, "console", now); !ok {
		w.Header().Set("Retry-After", retry)
		c.errorPage(w, r, http.StatusTooManyRequests, "Too many sign-in attempts",
			"Too many wrong operator tokens came from this address. Try again in "+retry+" s.")
		return
	}
	if err := c.checkPost(w, r); err != nil {
		c.limiter.Done(r.Context(), c.log, r, "console", now, false) // no token was tried
		c.refusePost(w, r, err)
		return
	}
	valid := c.tokenValid(r.PostForm.Get("token"))
	c.limiter.Done(r.Context(), c.log, r, "console", now, !valid) // a failure is logged: operator_auth_failed
	if !valid {
		c.errorPage(w, r, http.StatusUnauthorized, "Sign-in failed", "The operator token is not valid.")
		return
	}
	exp := now.Add(SessionTTL)
	http.SetCookie(w, cookie(r, SessionCookie, c.sessionValue(exp), int(SessionTTL/time.Second)))
	c.logAction(r, slog.LevelInfo, "console_login")
	http.Redirect(w, r, backTo(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout handles POST /console/logout: the session is revoked (so that
// no console instance accepts its cookie again), then its cookie is
// deleted. When the revocation cannot be recorded the session stays (the
// page says so), so that the operator can try again.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if err := c.checkPost(w, r); err != nil {
		c.refusePost(w, r, err)
		return
	}
	if s, ok := c.session(r); ok {
		if err := c.revocations.Revoke(r.Context(), s.id, s.exp); err != nil {
			c.logAction(r, slog.LevelError, "console_logout_failed", slog.String("error", err.Error()))
			c.errorPage(w, r, http.StatusServiceUnavailable, "Sign-out failed",
				"The sign-out could not be recorded (the state store did not answer), so the session is still valid. Try again.")
			return
		}
		c.logAction(r, slog.LevelInfo, "console_logout")
	}
	http.SetCookie(w, cookie(r, SessionCookie, "", -1))
	http.Redirect(w, r, backTo(r.PostForm.Get("next")), http.StatusSeeOther)
}

// setTenant handles POST /console/tenant (header tenant source only).
func (c *Console) setTenant(w http.ResponseWriter, r *http.Request) {
	if _, editable := c.tenantRequest(r); !editable {
		c.errorPage(w, r, http.StatusNotFound, "Not found", "The tenant is not chosen in the console on this server.")
		return
	}
	if err := c.checkPost(w, r); err != nil {
		c.refusePost(w, r, err)
		return
	}
	t := strings.TrimSpace(r.PostForm.Get("tenant"))
	switch {
	case t == "":
		http.SetCookie(w, cookie(r, TenantCookieName, "", -1))
	case !httpapi.ValidTenantID(t):
		c.errorPage(w, r, http.StatusBadRequest, "Invalid tenant",
			fmt.Sprintf("A tenant id is 1-%d characters of A-Z, a-z, 0-9, '.', '_' and '-'.", httpapi.MaxTenantLen))
		return
	default:
		http.SetCookie(w, cookie(r, TenantCookieName, t, 0))
	}
	// Another tenant's pages (and cursors) do not apply: start at the list.
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// backTo returns next when it is a console path (with its query), else
// the console's first page: never another site (no open redirect).
func backTo(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.ContainsAny(next, "\\\r\n") ||
		(u.Path != Prefix && !strings.HasPrefix(u.Path, Prefix+"/")) || path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") {
		return Prefix
	}
	return u.RequestURI()
}
