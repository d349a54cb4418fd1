// Command qasync is the runtime's command line for this repository's
// example pipelines: `qasync serve` runs the HTTP API, the workers and the
// sweeper in one process (server.Main does the work; a service of your own
// has a main just like this one with its own registry).
//
//	qasync serve [--addr 127.0.0.1:8080] [--lease-ms 30000] ...
//	qasync keys          # print every configuration key as a Markdown table
package main

import (
	"os"

	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/server"
)

func main() { os.Exit(server.Main(os.Args[1:], nil, server.WithPipelines(pipelines.FromConfig))) }
