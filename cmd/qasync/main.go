// Command qasync runs the queue-async runtime locally: `qasync serve`
// starts the HTTP API, an in-process worker pool and the sweeper in one
// process, on the providers the configuration names.
//
//	qasync serve [--addr 127.0.0.1:8080] [--lease-ms 30000] ...
//	qasync keys          # print every configuration key as a Markdown table
package main

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
	"sync"
	"syscall"
	"time"

	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/pipelines/diag"
	"github.com/qasync/qasync/shared/apigw"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/httpapi"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/providers"
)

// drainTimeout bounds how long shutdown waits for in-flight steps before
// cancelling them (their leases are then released for another worker).
const drainTimeout = 20 * time.Second

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "provision":
		os.Exit(provisionCmd(os.Args[2:]))
	case "local":
		os.Exit(localCmd(os.Args[2:]))
	case "keys":
		fmt.Print(config.MarkdownTable())
	case "help", "-h", "--help":
		usage(os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "qasync: unknown command %q\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  qasync serve [flags]   serve the HTTP API, workers and sweeper in one process
  qasync provision       create the DynamoDB tables and SQS queues (idempotent) and print their settings
  qasync local [flags]   run the four Lambda functions under RIE with API Gateway, SQS and schedule glue (make local-cloud)
  qasync keys            list the configuration keys, their environment variables and defaults

Every key pipeline.orchestrator.K is read from the environment variable
PIPELINE_ORCHESTRATOR_K (upper-case, non-alphanumerics as _) and from the
flag --K, which wins. See 'qasync keys'.
`)
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

func serve(args []string) int {
	cfg, _, err := config.Load(os.LookupEnv, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(config.MarkdownTable())
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 2
	}
	if cfg.RedriveAuthorizedUpstream {
		fmt.Fprintf(os.Stderr, "qasync: %sadmin.redrive-authorized-upstream is for the submit function behind API Gateway; qasync serve needs admin.token\n", config.KeyPrefix)
		return 2
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))

	reg, err := pipelines.Registry(pipelines.Options{Diag: cfg.DiagEnabled, DrillVersions: cfg.DiagDrillVersions})
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 1
	}
	// Test only: lets diag.drill's crashAttempts exit this process.
	diag.AllowCrash(cfg.DiagAllowCrash)
	// Test only: checkout charges a payment ledger file that outlives
	// this process (and pauses after each charge).
	if cfg.DiagPaymentLedger != "" {
		checkout.UsePayments(&checkout.LedgerPayments{Path: cfg.DiagPaymentLedger, Pause: cfg.DiagPaymentPause})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := providers.ResolveAwaitSecret(ctx, &cfg, nil); err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 2
	}
	set, err := providers.Open(ctx, cfg, reg, log, providers.WithDrainTimeout(drainTimeout))
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		return 2
	}
	// With dlq-provider=sqs this process is also the dead-letter consumer
	// (the dlq Lambda's job): the DLQ queue and the work queue's poison queue.
	consumers, err := set.DeadLetterConsumers(ctx, cfg, lambdafn.DLQ(set.Runtime, set.Recorder, set.Metrics, log), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %v\n", err)
		_ = set.Close(context.Background())
		return 2
	}
	// The tenant source the configuration names; iam and jwt need the API
	// Gateway request context, so here they refuse every request (401)
	// rather than fall back to a header.
	handler := httpapi.New(set.Runtime, httpapi.Options{
		MaxBodyBytes: cfg.MaxBodyBytes, AdminToken: cfg.AdminToken, TenantFunc: apigw.TenantFunc(cfg), Logger: log,
	})
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qasync: %shttp.addr: %v\n", config.KeyPrefix, err)
		_ = set.Close(context.Background())
		return 1
	}
	srv := newServer(cfg, handler)

	bg, stopBackground := context.WithCancel(context.Background())
	swept, worked := make(chan struct{}), make(chan struct{})
	go func() { defer close(swept); set.Runtime.RunSweeper(bg, cfg.SweepInterval) }()
	go func() { defer close(worked); _ = set.Work(bg) }()
	var consumed sync.WaitGroup
	for _, c := range consumers {
		consumed.Go(func() { _ = c.Run(bg) })
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	log.Info("server_started", slog.String("event", "server_started"), slog.String("addr", ln.Addr().String()),
		slog.Any("config", cfg), slog.Any("pipelines", reg.IDs()))
	fmt.Fprintf(os.Stderr, "qasync serving on http://%s (pipelines: %v)\n", ln.Addr(), reg.IDs())
	if cfg.DiagEnabled {
		fmt.Fprintf(os.Stderr, "try:\n  curl -si -X POST http://%s/v1/pipelines/diag.drill/executions -H 'Content-Type: application/json' -d '{\"echo\":\"hello\"}'\n", ln.Addr())
	}

	code := 0
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("server_failed", slog.String("event", "server_failed"), slog.String("error", err.Error()))
		code = 1
	}
	stop()
	log.Info("shutdown_started", slog.String("event", "shutdown_started"))
	drain, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	_ = srv.Shutdown(drain) // stop accepting; finish in-flight requests
	stopBackground()        // stop sweeping and receiving; the poller drains its in-flight work
	<-swept
	<-worked
	consumed.Wait()
	if err := set.Close(drain); err != nil {
		log.Warn("shutdown_drain_timeout", slog.String("event", "shutdown_drain_timeout"), slog.String("error", err.Error()))
	}
	log.Info("shutdown_completed", slog.String("event", "shutdown_completed"))
	return code
}
