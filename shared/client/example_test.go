package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/server"
	"github.com/qasync/qasync/shared/store"
)

// serveHello serves a one-step pipeline "hello" locally and returns its
// base URL and a function that stops it.
func serveHello() (string, func()) {
	type Name struct {
		Name string `json:"name"`
	}
	type Greeting struct {
		Greeting string `json:"greeting"`
	}
	greet := pipeline.NewStep("greet", func(_ context.Context, _ pipeline.StepInfo, in Name) (Greeting, error) {
		return Greeting{Greeting: "hello, " + strings.ToUpper(in.Name)}, nil
	})
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "hello", Steps: []pipeline.Step{greet}})
	if err != nil {
		panic(err)
	}
	cfg := config.Default()
	cfg.StateProvider = "memory" // a throwaway server (the default, embedded, keeps its data in .qasync/ and would remember the key)
	cfg.HTTPAddr = "127.0.0.1:0"
	ctx, stop := context.WithCancel(context.Background())
	started, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, cfg, reg, server.WithLogger(slog.New(slog.DiscardHandler)),
			server.OnStarted(func(a net.Addr) { started <- a }))
	}()
	return "http://" + (<-started).String(), func() { stop(); <-done }
}

// Submit an execution, wait until it is terminal, and read its result.
func ExampleClient() {
	url, stop := serveHello()
	defer stop()

	c, err := client.New(url, client.WithTenant("acme"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	sub, err := c.Submit(ctx, client.SubmitRequest{PipelineID: "hello", IdempotencyKey: "greet-ada", Body: []byte(`{"name":"ada"}`)})
	if err != nil {
		panic(err)
	}
	fmt.Println(sub.Status, sub.Duplicate)
	e, err := c.Wait(ctx, sub.ExecutionID, client.WaitOptions{})
	if err != nil {
		panic(err)
	}
	res, err := c.Result(ctx, sub.ExecutionID)
	if err != nil {
		panic(err)
	}
	fmt.Println(e.Status, string(res.Data))
	// Output:
	// QUEUED false
	// SUCCEEDED {"greeting":"hello, ADA"}
}

// A client of the deployed API signs every request with SigV4 (the
// standard AWS credential chain; the region comes from the URL), so it
// works with the IAM-authorized routes unchanged.
func ExampleNew_apiGateway() {
	c, err := client.New("https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod")
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Signs(), c.BaseURL())
	// Output:
	// true https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod
}

// Errors are *client.Error values carrying the server's problem document;
// IsNotFound, IsConflict and IsBadRequest test for the common cases.
func ExampleIsNotFound() {
	url, stop := serveHello()
	defer stop()

	c, _ := client.New(url)
	_, err := c.Status(context.Background(), "no-such-execution")
	fmt.Println(client.IsNotFound(err))
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.StatusCode, e.Problem.Kind())
	}
	// Output:
	// true
	// 404 execution-not-found
}

// List a tenant's dead-lettered executions of one pipeline, newest first,
// following the cursors (200 per page), and re-drive each.
func ExampleClient_ListAll() {
	c, err := client.New(client.DefaultURL, client.WithTenant("acme"), client.WithAdminToken("s3cret"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	q := client.ListQuery{PipelineID: "checkout.deliver-order", Statuses: []store.Status{store.DLQ}, Limit: 200}
	for e, err := range c.ListAll(ctx, q) {
		if err != nil {
			fmt.Println("list:", err)
			return
		}
		if _, err := c.Redrive(ctx, e.ExecutionID, client.RedriveRequest{Reason: "payment provider fixed, OPS-42"}); err != nil && !client.IsConflict(err) {
			fmt.Println("redrive:", err)
		}
	}
}

// helloDone serves the pipeline "hello" (serveHello), runs one execution
// of it to its end, and returns a client of the server, the execution's
// id, and a function that stops the server.
func helloDone(ctx context.Context) (*client.Client, string, func()) {
	url, stop := serveHello()
	c, err := client.New(url, client.WithTenant("acme"))
	if err == nil {
		var sub client.Submission
		if sub, err = c.Submit(ctx, client.SubmitRequest{PipelineID: "hello", Body: []byte(`{"name":"ada"}`)}); err == nil {
			if _, err = c.Wait(ctx, sub.ExecutionID, client.WaitOptions{}); err == nil {
				return c, sub.ExecutionID, stop
			}
		}
	}
	stop()
	panic(err)
}

// Read an execution's history a page at a time: each page's NextCursor
// reads the next one, and the last page has none. (History reads every
// page for you; a page is for a caller that shows one, or stops early.)
func ExampleClient_HistoryPage() {
	ctx := context.Background()
	c, id, stop := helloDone(ctx)
	defer stop()

	o := client.HistoryPageOptions{Limit: 2}
	for {
		page, err := c.HistoryPage(ctx, id, o)
		if err != nil {
			panic(err)
		}
		for _, ev := range page.Events {
			fmt.Println(ev.Seq, ev.Type)
		}
		if page.NextCursor == "" {
			break
		}
		fmt.Println("-- next page")
		o.Cursor = page.NextCursor
	}
	// Output:
	// 1 SUBMITTED
	// 2 STEP_STARTED
	// -- next page
	// 3 STEP_SUCCEEDED
	// 4 SUCCEEDED
}
