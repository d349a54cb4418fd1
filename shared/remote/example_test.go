package remote_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/remote"
)

type Order struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

type Quote struct {
	OrderID string `json:"orderId"`
	Tax     int64  `json:"tax"`
}

// A remote worker is any HTTP server that takes the step input as the
// request body and answers the output; remote.Handler turns a typed step
// function into one. The pipeline's step is remote.Step, pointed at it.
func ExampleStep() {
	// The remote worker (normally another service).
	tax := pipeline.NewStep("tax", func(ctx context.Context, info pipeline.StepInfo, o Order) (Quote, error) {
		// info.IdempotencyKey and info.TransitionKey come from the request headers.
		return Quote{OrderID: o.ID, Tax: o.Cents / 5}, nil
	})
	srv := httptest.NewServer(remote.Handler(tax.Run))
	defer srv.Close()

	// The pipeline's step: POST the input, the response is the output.
	step := remote.Step("tax", remote.Spec{URL: srv.URL + "/tax", Deadline: 10 * time.Second})
	p := pipeline.Pipeline{ID: "shop.tax", Steps: []pipeline.Step{step}}
	if err := p.Validate(); err != nil {
		panic(err)
	}

	// What the runtime does for one transition:
	in, _ := payload.JSON(Order{ID: "o-1", Cents: 1000})
	out, err := step.Run(context.Background(), pipeline.StepInfo{
		ExecutionID: "e-1", TenantID: "t1", StepName: "tax", StepIndex: 0, Attempt: 1,
		TransitionKey: "e-1:0:1", IdempotencyKey: "t1:e-1:0",
	}, in)
	fmt.Println(string(out.Data), err)
	// Output: {"orderId":"o-1","tax":200} <nil>
}
