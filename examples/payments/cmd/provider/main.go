// Command provider runs the fake payment provider (package provider) on
// its own, for trying the payments service by hand:
//
//	go run ./payments/cmd/provider --addr 127.0.0.1:8090 --max-delay 2s --duplicate-every 3 --drop-every 50
//
// The faults select payments by a hash of their reference (the merchant's
// payment id), so the same ids meet the same faults on every run. On
// SIGINT or SIGTERM it prints its counts and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/qasync/qasync/examples/payments/provider"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	maxDelay := flag.Duration("max-delay", time.Second, "largest random delay of a settlement's delivery")
	dupEvery := flag.Int("duplicate-every", 0, "deliver the settlement of one payment in N twice (0: none)")
	dropEvery := flag.Int("drop-every", 0, "never deliver the settlement of one payment in N (0: none)")
	failEvery := flag.Int("fail-first-create-every", 0, "answer the first create of one payment in N with 503 after charging (0: none)")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	prov := provider.NewServer(provider.Options{Logger: log, Faults: provider.Faults{
		MaxDelay: *maxDelay, Duplicate: every(*dupEvery, "duplicate"), Drop: every(*dropEvery, "drop"),
		FailFirstCreate: every(*failEvery, "fail"), Seed: uint64(time.Now().UnixNano()),
	}})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: prov, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("provider_serving", slog.String("event", "provider_serving"), slog.String("addr", ln.Addr().String()))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
	prov.Close()
	fmt.Printf("%+v\n", prov.Stats())
}

// every selects one reference in n by a hash of salt and the reference.
func every(n int, salt string) func(string) bool {
	if n <= 0 {
		return nil
	}
	return func(ref string) bool {
		h := fnv.New32a()
		_, _ = h.Write([]byte(salt + ":" + ref))
		return h.Sum32()%uint32(n) == 0
	}
}
