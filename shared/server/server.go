// Package server is the local runtime as a library call: Serve runs the
// HTTP API, the workers and the sweeper of a registry in one process, on
// the providers the configuration names, and Main is the whole qasync
// command line (serve, provision, local, keys) for the caller's pipelines,
// so that a service's own main is a few lines:
//
//	func main() { os.Exit(server.Main(os.Args[1:], server.Static(myapp.Registry()))) }
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

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/apigw"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/pipeline"
)

// Pipelines builds the registry a process serves from its configuration
// (a registry that depends on settings, such as a test drill that is only
// served where enabled). Static wraps a fixed registry.
type Pipelines func(config.Config) (*pipeline.Registry, error)

// Static returns Pipelines that always yield reg (or err, when the
// registry could not be built: pipeline.NewRegistry's two results).
func Static(reg *pipeline.Registry, err ...error) Pipelines {
	return func(config.Config) (*pipeline.Registry, error) { return reg, errors.Join(err...) }
}

// drainTimeout bounds how long shutdown waits for in-flight steps before
// cancelling them (their leases are then released for another worker).
const drainTimeout = 20 * time.Second

// Main runs the qasync command line with args (os.Args[1:]) for the
// pipelines p builds, and returns the process exit code: 0 on success, 1
// on a runtime failure, 2 on a usage or configuration error (the client
// commands add 3 not found, 4 conflict, 5 watch: not succeeded).
//
//	serve [flags]   the HTTP API, workers and sweeper in one process
//	provision       create the DynamoDB tables and SQS queues and print their settings
//	local [flags]   the four Lambda functions under the emulator (make local-cloud)
//	keys            the configuration keys as a Markdown table
//	backup --to F   a consistent copy of the embedded store (also while serve runs)
//	submit, status, result, watch, list, history, cancel, redrive, dead-letters
//	                client commands against any deployment's API (--url)
//	--version       the binary's version
func Main(args []string, p Pipelines) int {
	if len(args) < 1 {
		usage(os.Stderr)
		return 2
	}
	if cli.Handles(args[0]) {
		return clientCmd(args)
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], p)
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
	fmt.Fprintf(os.Stderr, "qasync: unknown command %q\n", args[0])
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
  qasync local [flags]   run the four Lambda functions under RIE with API Gateway, SQS and schedule glue (make local-cloud)
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

func serve(args []string, p Pipelines) int {
	cfg, _, err := config.Load(os.LookupEnv, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(config.MarkdownTable())
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 2
	}
	reg, err := p(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = Serve(ctx, cfg, reg)
	var ce *configError
	switch {
	case errors.As(err, &ce):
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 1
	}
	return 0
}

// configError is an error of the configuration or of what it names (a
// missing table): Main's exit code 2.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// Option adjusts Serve.
type Option func(*options)

type options struct {
	log      *slog.Logger
	started  func(addr net.Addr)
	finished func(Finished)
}

// WithLogger sends Serve's logs (JSON lines) to log instead of a JSON
// handler on stdout at the log-level key's level.
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// OnStarted calls f with the listening address once the server accepts
// requests (useful with http.addr port 0).
func OnStarted(f func(addr net.Addr)) Option { return func(o *options) { o.started = f } }

// Serve runs the HTTP API (with the web console under /console), the
// workers and the sweeper (with the bulk re-drive jobs' driver) of reg in
// this process on the providers cfg names, until ctx ends; then it stops
// accepting requests and work, lets in-flight steps finish (at most 20 s,
// then their leases are handed back) and returns nil. With dlq-provider=sqs
// it also consumes the DLQ and poison queues, and with state-provider
// dynamo it reads the execution table's stream into the history table
// (history.stream-poller), so one process is the whole topology. An error means it could not start (the configuration, a
// provider) or the listener failed.
func Serve(ctx context.Context, cfg config.Config, reg *pipeline.Registry, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.RedriveAuthorizedUpstream {
		return &configError{fmt.Errorf("%sadmin.redrive-authorized-upstream is for the submit function behind API Gateway; qasync serve needs admin.token", config.KeyPrefix)}
	}
	log := o.logger(cfg)
	if err := wiring.ResolveAwaitSecret(ctx, &cfg, nil); err != nil {
		return &configError{err}
	}
	set, err := wiring.Open(ctx, cfg, reg, log, o.wiringOptions()...)
	if err != nil {
		return &configError{err}
	}
	// With dlq-provider=sqs this process is also the dead-letter consumer
	// (the dlq Lambda's job): the DLQ queue and the work queue's poison queue.
	consumers, err := set.DeadLetterConsumers(ctx, cfg, lambdahandlers.DLQ(set.Runtime, set.Recorder, set.Metrics, log), log)
	if err != nil {
		_ = set.Close(context.Background())
		return &configError{err}
	}
	// With state-provider dynamo this process also reads the execution
	// table's stream into the history table (the history Lambda's job),
	// unless history.stream-poller is off.
	feed, err := set.HistoryFeed(cfg, log)
	if err != nil {
		_ = set.Close(context.Background())
		return &configError{err}
	}
	// The tenant source the configuration names; iam and jwt need the API
	// Gateway request context, so here they refuse every request (401)
	// rather than fall back to a header.
	tenantFunc := apigw.TenantFunc(cfg)
	handler := console.Mount(httpapi.New(set.Runtime, httpapi.Options{
		MaxBodyBytes: cfg.MaxBodyBytes, AdminToken: cfg.AdminToken, TenantFunc: tenantFunc, Logger: log,
	}), console.New(console.Engine(set.Runtime), console.Options{
		AdminToken: cfg.AdminToken, TenantFunc: tenantFunc, TenantCookie: cfg.TenantSource == "header",
		Pipelines: reg.IDs(), Logger: log,
	}))
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		_ = set.Close(context.Background())
		return fmt.Errorf("%shttp.addr: %w", config.KeyPrefix, err)
	}
	srv := newServer(cfg, handler)

	stopBackground := runBackground(set, cfg, consumers, feed)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	log.Info("server_started", slog.String("event", "server_started"), slog.String("addr", ln.Addr().String()),
		slog.Any("config", cfg), slog.Any("pipelines", reg.IDs()))
	fmt.Fprintf(os.Stderr, "qasync serving on http://%s (pipelines: %v)\n", ln.Addr(), reg.IDs())
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
	if err := set.Close(drain); err != nil {
		log.Warn("shutdown_drain_timeout", slog.String("event", "shutdown_drain_timeout"), slog.String("error", err.Error()))
	}
	log.Info("shutdown_completed", slog.String("event", "shutdown_completed"))
	return result
}
