package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
)

// A two-step pipeline served locally: submit over HTTP, get the
// execution id at once, and read the result when it is SUCCEEDED. Each
// step is its own committed transition.
func ExampleServe() {
	type Name struct {
		Name string `json:"name"`
	}
	type Greeting struct {
		Greeting string `json:"greeting"`
	}
	greet := pipeline.NewStep("greet", func(_ context.Context, _ pipeline.StepInfo, in Name) (Greeting, error) {
		return Greeting{Greeting: "hello, " + in.Name}, nil
	})
	shout := pipeline.NewStep("shout", func(_ context.Context, _ pipeline.StepInfo, in Greeting) (Greeting, error) {
		return Greeting{Greeting: strings.ToUpper(in.Greeting)}, nil
	})
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "hello", Steps: []pipeline.Step{greet, shout}})
	if err != nil {
		panic(err)
	}

	cfg := config.Default()
	cfg.StateProvider = "memory" // in memory, in-process workers (the default, embedded, keeps the data in .qasync/)
	cfg.HTTPAddr, cfg.TenantSource = "127.0.0.1:0", "none"
	ctx, stop := context.WithCancel(context.Background())
	started, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, cfg, reg, server.WithLogger(slog.New(slog.DiscardHandler)),
			server.OnStarted(func(a net.Addr) { started <- a }))
	}()
	base := "http://" + (<-started).String()

	resp, err := http.Post(base+"/v1/pipelines/hello/executions", "application/json", strings.NewReader(`{"name":"ada"}`))
	if err != nil {
		panic(err)
	}
	var sub struct {
		Status    string `json:"status"`
		ResultURL string `json:"resultUrl"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, sub.Status)

	for range 100 { // the result is 409 until the execution has succeeded
		r, err := http.Get(base + sub.ResultURL)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			fmt.Println(string(body))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	fmt.Println(<-done)
	// Output:
	// 202 QUEUED
	// {"greeting":"HELLO, ADA"}
	// <nil>
}

// A service's own command line: `go run ./cmd/myapp serve`, `... keys`,
// `... provision` (the same commands as qasync, for its pipelines).
func ExampleMain() {
	reg, err := pipeline.NewRegistry( /* your pipelines */ )
	if err != nil {
		panic(err)
	}
	_ = func() int { return server.Main([]string{"serve", "--addr", "127.0.0.1:8080"}, reg) }
	// In a main: os.Exit(server.Main(os.Args[1:], reg))
}
