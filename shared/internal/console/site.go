package console

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/authlimit"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/store"
)

// Site is the HTTP handler of a process that serves HTTP (qasync serve,
// the submit function): the HTTP API of rt serving the console under
// Prefix, both configured from c (http.max-body-bytes, admin.token,
// admin.redrive-authorized-upstream, http.tenant-source and
// http.tenant-claim), the console's sign-outs kept in the state store's
// job store (StoreRevocations). The tenant function is chosen here, once, for both:
// behind API Gateway the identity sources read the request context that
// package apigw puts on every request; served directly (qasync serve) the
// iam and jwt sources find none and refuse every request with 401 rather
// than fall back to a header. Both count wrong operator tokens against
// one authlimit.Limiter (per client address), on the runtime's clock. It
// is wiring's Options.HTTP.
func Site(rt *engine.Runtime, c config.Config, log *slog.Logger) http.Handler {
	tenant := httpapi.TenantFunc(c.TenantSource, c.TenantClaim)
	// Sign-outs are kept beside the rows (the state store's job store),
	// so that every instance refuses a signed-out session.
	var revocations Revocations
	if js, ok := rt.Store().(store.JobStore); ok {
		revocations = StoreRevocations(js, rt.Now)
	} else if c.AdminToken != "" {
		log.LogAttrs(context.Background(), slog.LevelWarn, "console_revocations_local", slog.String("event", "console_revocations_local"),
			slog.String("detail", "the state store keeps no jobs: a console sign-out holds in this process only"))
	}
	// One limit on wrong operator tokens per client, whichever door
	// they are tried at.
	limiter := authlimit.New(authlimit.Config{})
	con := New(Engine(rt), Options{
		AdminToken: c.AdminToken, TenantFunc: tenant, TenantCookie: c.TenantSource == "header",
		Pipelines: rt.Registry().IDs(), Logger: log, Now: rt.Now, AuthLimiter: limiter, Revocations: revocations,
	})
	return httpapi.New(rt, httpapi.Options{
		MaxBodyBytes: c.MaxBodyBytes, AdminToken: c.AdminToken,
		RedriveAuthorizedUpstream: c.RedriveAuthorizedUpstream, TenantFunc: tenant, Logger: log, Console: con,
		AuthLimiter: limiter,
	})
}
