package command_test

import (
	"context"
	"fmt"

	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// A command step charges an order once: the second run (a retry, a
// takeover after a crash, a duplicate submission) returns the recorded
// payment without calling the provider again.
func ExampleStep() {
	type Order struct {
		ID    string `json:"id"`
		Cents int64  `json:"cents"`
	}
	type Payment struct {
		PaymentID string `json:"paymentId"`
	}
	charges := 0
	charge := command.Step("charge", command.Spec[Order, Payment]{
		ID: func(o Order) string { return o.ID }, // the command id: one charge per order
		// Reconcile asks the provider about a charge whose outcome a dead
		// run did not record; without it such a command becomes AMBIGUOUS.
		Reconcile: func(ctx context.Context, info pipeline.StepInfo, o Order) (Payment, bool, error) {
			return Payment{}, false, nil // "not charged": dispatch again
		},
	}, func(ctx context.Context, info pipeline.StepInfo, o Order) (Payment, error) {
		charges++ // provider.Charge(ctx, o.ID, o.Cents, info.IdempotencyKey)
		return Payment{PaymentID: fmt.Sprintf("pay-%s-%d", o.ID, charges)}, nil
	})

	effects := pipelinetest.Effects() // the runtime hands steps its effect log
	in, _ := payload.JSON(Order{ID: "o-1", Cents: 1200})
	for attempt := 1; attempt <= 2; attempt++ {
		info := pipeline.StepInfo{TenantID: "acme", ExecutionID: "exec-1", PipelineID: "shop.pay", StepName: "charge",
			Attempt: attempt, FencingToken: int64(attempt), IdempotencyKey: "acme:exec-1:0", Effects: effects}
		out, err := charge.Run(context.Background(), info, in)
		fmt.Println(string(out.Data), err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// {"paymentId":"pay-o-1-1"} <nil>
	// {"paymentId":"pay-o-1-1"} <nil>
	// charges: 1
}
