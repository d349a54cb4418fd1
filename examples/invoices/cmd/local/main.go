// Command local runs the invoices service on this machine: `go run
// ./cmd/local serve` serves the HTTP API, the workers and the sweeper in
// one process on in-memory providers (127.0.0.1:8080; --addr changes it).
// It is qasync's command line (server.Main) for this service's pipelines:
// provision, local and keys work as they do for qasync itself.
package main

import (
	"os"

	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/server"
)

func main() { os.Exit(server.Main(os.Args[1:], invoices.Registry())) }
