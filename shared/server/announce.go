package server

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/qasync/qasync/shared/config"
)

// withStderr sends Serve's startup lines to w instead of os.Stderr.
func withStderr(w io.Writer) Option { return func(o *options) { o.stderr = w } }

// withTokenFile names the file of the operator token in the startup
// lines (AdminTokenFileEnv).
func withTokenFile(path string) Option { return func(o *options) { o.tokenFile = path } }

// announce says, once the listener accepts requests, where everything
// is: a human block on stderr (the first line, "qasync serving on URL",
// is what scripts and tests wait for) and the server_started event with
// the same URLs. Every serve start prints it, make run's and any other.
//
// The sign-in line names the file that holds the operator token when
// AdminTokenFileEnv names one whose content is the token (make run's
// generated one), and never prints the token itself, not even for make
// run: serve's stderr is often kept (a terminal's scrollback, a CI log, a
// shared screen), while the file (0600, in the git-ignored data
// directory) is one cat away for the user who may read it.
func (o *options) announce(log *slog.Logger, cfg config.Config, addr net.Addr, resolved config.Config, pipelines []string) {
	base := "http://" + browsable(addr)
	api, console := base+"/v1", base+"/console"
	operator, signIn, file := "off", "the operator routes (cancel, re-drive) are off: set PIPELINE_ORCHESTRATOR_ADMIN_TOKEN to turn them on", ""
	if cfg.AdminToken != "" {
		operator = "on"
		signIn = "with the operator token of PIPELINE_ORCHESTRATOR_ADMIN_TOKEN (" + config.FullKey("admin.token") + ")"
		if tokenFileHolds(o.tokenFile, cfg.AdminToken) {
			file = o.tokenFile
			signIn = fmt.Sprintf("with the operator token in %s (cat %s; the CLI takes it as QASYNC_ADMIN_TOKEN)", file, file)
		}
	}
	attrs := []any{slog.String("event", "server_started"), slog.String("addr", addr.String()),
		slog.String("api_url", api), slog.String("console_url", console), slog.String("operator_routes", operator)}
	if file != "" {
		attrs = append(attrs, slog.String("admin_token_file", file))
	}
	log.Info("server_started", append(attrs, slog.Any("config", resolved), slog.Any("pipelines", pipelines))...)
	w := o.stderr
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "qasync serving on %s (pipelines: %v)\n  API      %s\n  console  %s\n  sign in  %s\n", base, pipelines, api, console, signIn)
}

// browsable is addr as a browser on this machine reaches it: an
// unspecified address (0.0.0.0, ::) is served on loopback too.
func browsable(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}

// tokenFileHolds reports whether the file at path holds token (surrounding
// white space aside), compared in constant time.
func tokenFileHolds(path, token string) bool {
	if path == "" {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(bytes.TrimSpace(b), []byte(token)) == 1
}
