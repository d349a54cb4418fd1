package console

import (
	"log/slog"
	"net/http"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
)

// Site is the HTTP handler of a process that serves HTTP (qasync serve,
// the submit function): the HTTP API of rt serving the console under
// Prefix, both configured from c (http.max-body-bytes, admin.token,
// admin.redrive-authorized-upstream, http.tenant-source and
// http.tenant-claim). The tenant function is chosen here, once, for both:
// behind API Gateway the identity sources read the request context that
// package apigw puts on every request; served directly (qasync serve) the
// iam and jwt sources find none and refuse every request with 401 rather
// than fall back to a header. Both count wrong operator tokens against
// one authlimit.Limiter (per client address), on the runtime's clock. It
// is wiring's Options.HTTP.
func Site(rt *engine.Runtime, c config.Config, log *slog.Logger) http.Handler {
	tenant := httpapi.TenantFunc(c.TenantSource, c.TenantClaim)
	// One limit on wrong operator tokens per client, whichever door
	// they are tried at.
	limiter := authlimit.New(authlimit.Config{})
	con := New(Engine(rt), Options{
		AdminToken: c.AdminToken, TenantFunc: tenant, TenantCookie: c.TenantSource == "header",
		Pipelines: rt.Registry().IDs(), Logger: log, Now: rt.Now, AuthLimiter: limiter,
	})
	return httpapi.New(rt, httpapi.Options{
		MaxBodyBytes: c.MaxBodyBytes, AdminToken: c.AdminToken,
		RedriveAuthorizedUpstream: c.RedriveAuthorizedUpstream, TenantFunc: tenant, Logger: log, Console: con,
		AuthLimiter: limiter,
	})
}
