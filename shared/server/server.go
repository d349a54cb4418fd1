// Package server is the local runtime as a library call: Serve runs the
// HTTP API, the workers and the sweeper of a registry in one process, on
// the backend the configuration names (or one of your own, WithBackend),
// and Main is the whole qasync command line (serve, provision, local,
// keys) for the caller's pipelines, so that a service's own main is one
// line, the same shape as a Lambda function's (lambdafn.Main):
//
//	func main() { os.Exit(server.Main(os.Args[1:], myapp.Registry())) }
package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/pipeline"
)

// drainTimeout bounds how long shutdown waits for in-flight steps before
// cancelling them (their leases are then released for another worker).
const drainTimeout = 20 * time.Second

// Main runs the qasync command line with args (os.Args[1:]) for reg (or
// the registry WithPipelines builds from the loaded configuration), and
// returns the process exit code: 0 on success, 1
// on a runtime failure, 2 on a usage or configuration error (the client
// commands add 3 not found, 4 conflict, 5 watch: not succeeded).
//
//	serve [flags]   the HTTP API, workers and sweeper in one process
//	provision       create the DynamoDB tables and SQS queues and print their settings
//	local [flags]   the Lambda functions under the emulator (make local-cloud)
//	keys            the configuration keys as a Markdown table
//	backup --to F   a consistent copy of the embedded store (also while serve runs)
//	submit, status, result, watch, list, history, cancel, redrive, dead-letters
//	                client commands against any deployment's API (--url)
//	--version       the binary's version
func Main(args []string, reg *pipeline.Registry, opts ...Option) int {
	if len(args) < 1 {
		usage(os.Stderr)
		return 2
	}
	if cli.Handles(args[0]) {
		return clientCmd(args)
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], reg, opts)
	case "provision":
		return provisionCmd(args[1:])
	case "local":
		return localCmd(args[1:])
	case "keys":
		fmt.Print(config.MarkdownTable())
		return 0
	case "backup":
		return backupCmd(args[1:])
	case "version":
		fmt.Println(cli.Version())
		return 0
	case "help", "-h", "--help":
		if len(args) > 1 && cli.Handles(args[1]) {
			return clientCmd([]string{args[1], "--help"})
		}
		usage(os.Stdout)
		return 0
	}
	fmt.Fprintf(os.Stderr, "qasync: %s\n", cli.UnknownCommand(args[0], "serve", "provision", "local", "keys", "backup", "version", "help"))
	usage(os.Stderr)
	return 2
}

// clientCmd runs a client command (package cli) until it ends or the
// process is interrupted.
func clientCmd(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, args, cli.OSEnv())
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  qasync serve [flags]   serve the HTTP API, workers and sweeper in one process
  qasync provision       create the DynamoDB tables and SQS queues (idempotent) and print their settings
  qasync local [flags]   run the Lambda functions under RIE with API Gateway, SQS and schedule glue (make local-cloud)
  qasync keys            list the configuration keys, their environment variables and defaults
  qasync backup --to F   write a consistent copy of the embedded store (--data-dir), also while serve runs
  qasync --version       print the version

Every key pipeline.orchestrator.K is read from the environment variable
PIPELINE_ORCHESTRATOR_K (upper-case, non-alphanumerics as _) and from the
flag --K, which wins. See 'qasync keys'.

`)
	cli.Usage(w)
}

// newServer is the HTTP server of qasync serve: handler behind the
// http.read-header-timeout, http.read-timeout, http.write-timeout and
// http.idle-timeout keys, so that a client that sends its headers or body
// slowly (or never) cannot hold a connection open indefinitely.
func newServer(cfg config.Config, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
	}
}

func serve(args []string, reg *pipeline.Registry, opts []Option) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveWith(ctx, processEnv{lookup: os.LookupEnv, environ: os.Environ(), stdout: os.Stdout, stderr: os.Stderr}, args, reg, opts)
}

// processEnv is what the serve command reads and writes besides its
// arguments: the environment and the standard streams (tests pass their
// own).
type processEnv struct {
	lookup         func(string) (string, bool)
	environ        []string
	stdout, stderr io.Writer
}

// serveWith is the serve command: the configuration from env and args
// (--help prints serveUsage), its warnings logged (unknown variables, a
// weak operator token), then Serve until ctx ends (serve's: SIGINT or
// SIGTERM).
func serveWith(ctx context.Context, env processEnv, args []string, reg *pipeline.Registry, opts []Option) int {
	cfg, _, err := config.Load(env.lookup, args)
	if errors.Is(err, flag.ErrHelp) {
		serveUsage(env.stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "qasync: %v\n", err)
		return 2
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	log := o.logger(cfg)
	warns, err := cfg.Check(env.environ, testkeys.EnvNames()...)
	for _, w := range warns {
		w.Log(ctx, log)
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "qasync: %v\n", err)
		return 2
	}
	if o.pipelines != nil {
		if reg, err = o.pipelines(cfg); err != nil {
			fmt.Fprintf(env.stderr, "qasync: %v\n", err)
			return 1
		}
	}
	tokenFile, _ := env.lookup(AdminTokenFileEnv)
	opts = append(opts[:len(opts):len(opts)], WithLogger(log), withStderr(env.stderr), withTokenFile(tokenFile))
	err = Serve(ctx, cfg, reg, opts...)
	var ce *configError
	switch {
	case errors.As(err, &ce):
		fmt.Fprintf(env.stderr, "qasync: %v\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(env.stderr, "qasync: %v\n", err)
		return 1
	}
	return 0
}

// AdminTokenFileEnv names the file that holds qasync serve's operator
// token (make run sets it to .qasync/admin-token, the token it generated).
// It is a hint for the startup lines only, which then say where to find
// the token to sign in: the token itself still comes from admin.token,
// and a file whose content is not that token is not named.
const AdminTokenFileEnv = "QASYNC_ADMIN_TOKEN_FILE"

// commonFlags are the flags serveUsage lists: the settings a first run
// changes most, each with one line (the keys table has the rest).
var commonFlags = []struct{ flag, key, line string }{
	{"addr", "http.addr", "listen address host:port; beyond loopback see --http.tenant-source"},
	{"state", "state-provider", "embedded (durable, in --data-dir), memory or dynamo"},
	{"data-dir", "embedded.data-dir", "the embedded store's directory"},
	{"http.tenant-source", "http.tenant-source", "header (X-Tenant-Id: development), none, iam, iam-account or jwt"},
	{"http.allow-header-tenant", "http.allow-header-tenant", "accept tenant-source header on an address beyond loopback"},
	{"idempotency-policy", "idempotency-policy", "OPTIONAL_CLIENT_KEY, CLIENT_KEY_REQUIRED or SERVER_KEY_ONLY"},
	{"strict-startup", "strict-startup", "refuse to start on anything unverified, weak or unknown"},
	{"worker-concurrency", "worker-concurrency", "workers of the in-process dispatcher"},
	{"max-retries", "max-retries", "retries of a failed step after its first attempt"},
	{"log-level", "log-level", "debug, info, warn or error (JSON logs on stdout)"},
}

// serveUsage is `qasync serve --help`: the usage line, the common flags
// with their defaults, and where every key is.
func serveUsage(w io.Writer) {
	def := map[string]string{}
	for _, k := range config.Keys() {
		def[k.Flag] = k.Default
	}
	fmt.Fprint(w, "usage: qasync serve [flags]\n\nServe the HTTP API, the web console (/console), the workers and the sweeper in one process.\n\ncommon flags:\n")
	for _, f := range commonFlags {
		d := def[f.key]
		if d == "" {
			d = `""`
		}
		fmt.Fprintf(w, "  --%-26s %s (default %s)\n", f.flag, f.line, d)
	}
	fmt.Fprintf(w, `
The operator token (cancel, re-drive, the console's sign-in) comes from the
environment only: PIPELINE_ORCHESTRATOR_ADMIN_TOKEN, %d characters or more.
Every key pipeline.orchestrator.K is the flag --K and the variable
PIPELINE_ORCHESTRATOR_K (upper-case, every . and - as _).
all keys: docs/configuration.md (or qasync keys)
`, config.MinAdminTokenLength)
}

// configError is an error of the configuration or of what it names (a
// missing table): Main's exit code 2.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// Option adjusts Serve, Start and Main.
type Option func(*options)

type options struct {
	log       *slog.Logger
	started   func(addr net.Addr)
	finished  func(Finished)
	pipelines func(config.Config) (*pipeline.Registry, error)
	backend   backend.Backend
	stderr    io.Writer // the startup lines' (os.Stderr when nil)
	tokenFile string    // AdminTokenFileEnv's value, for the sign-in line
}

// WithLogger sends the logs (JSON lines) to log instead of a JSON
// handler on stdout at the log-level key's level.
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// OnStarted calls f with the listening address once the server accepts
// requests (useful with http.addr port 0).
func OnStarted(f func(addr net.Addr)) Option { return func(o *options) { o.started = f } }

// WithPipelines makes Main build the registry its serve command serves
// from the configuration it loaded (for pipelines that depend on
// settings, such as a test drill served only where enabled), instead of
// taking Main's reg (pass nil).
func WithPipelines(p func(config.Config) (*pipeline.Registry, error)) Option {
	return func(o *options) { o.pipelines = p }
}

// WithBackend runs the runtime on b instead of the backend that
// state-provider names (embedded, memory or dynamo).
func WithBackend(b backend.Backend) Option { return func(o *options) { o.backend = b } }

// Serve runs the HTTP API (with the web console under /console), the
// workers and the sweeper (with the bulk re-drive jobs' driver) of reg in
// this process on the backend cfg names, until ctx ends; then it stops
// accepting requests and work, lets in-flight steps finish (at most 20 s,
// then their leases are handed back) and returns nil. With dlq-provider=sqs
// it also consumes the DLQ and poison queues, and with state-provider
// dynamo it reads the execution table's stream into the history table
// (history.stream-poller), so one process is the whole topology. Once it
// listens it prints the API's and the console's URLs and how to sign in
// (stderr, and the server_started event). It refuses tenant source
// header on an address beyond loopback without
// http.allow-header-tenant=true (config.Config.CheckListener). An error
// means it could not start (the configuration, the backend) or the
// listener failed.
func Serve(ctx context.Context, cfg config.Config, reg *pipeline.Registry, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.RedriveAuthorizedUpstream {
		return &configError{fmt.Errorf("%sadmin.redrive-authorized-upstream is for the submit function behind API Gateway; qasync serve needs admin.token", config.KeyPrefix)}
	}
	if err := cfg.CheckListener(); err != nil {
		return &configError{err}
	}
	log := o.logger(cfg)
	p, err := o.assemble(ctx, cfg, reg, log, true)
	if err != nil {
		return &configError{err}
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		_ = p.Close(context.Background())
		return fmt.Errorf("%shttp.addr: %w", config.KeyPrefix, err)
	}
	srv := newServer(cfg, p.Handler)

	stopBackground := runBackground(p)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	o.announce(log, cfg, ln.Addr(), p.Config, reg.IDs())
	if o.started != nil {
		o.started(ln.Addr())
	}

	var result error
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("server_failed", slog.String("event", "server_failed"), slog.String("error", err.Error()))
		result = err
	}
	log.Info("shutdown_started", slog.String("event", "shutdown_started"))
	drain, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	_ = srv.Shutdown(drain) // stop accepting; finish in-flight requests
	stopBackground()        // stop sweeping and receiving; the poller drains its in-flight work
	if err := p.Close(drain); err != nil {
		log.Warn("shutdown_drain_timeout", slog.String("event", "shutdown_drain_timeout"), slog.String("error", err.Error()))
	}
	log.Info("shutdown_completed", slog.String("event", "shutdown_completed"))
	return result
}
