// Command local runs the payments service on this machine: `go run
// ./payments/cmd/local serve` serves the HTTP API, the workers and the
// sweeper in one process on the embedded store (127.0.0.1:8080; --addr
// changes it). It is qasync's command line (server.Main) for this
// service's pipelines; the service's own settings are the PAYMENTS_*
// environment variables (payments.FromEnv). Without PAYMENTS_API_URL the
// provider is given callback URLs on the address serve listens on.
package main

import (
	"fmt"
	"os"

	"github.com/qasync/qasync/examples/payments"
	"github.com/qasync/qasync/shared/server"
)

func main() {
	cfg, err := payments.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	svc := payments.New(cfg)
	os.Exit(server.Main(os.Args[1:], svc.Registry(), server.OnStarted(svc.Serving)))
}
