package reject_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
)

// A step rejects the lines it cannot use and goes on with the others; the
// runtime hands it the sink configured by pipeline.item-reject.* as
// StepInfo.Rejects.
func ExampleRejectItem() {
	type Line struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	validate := pipeline.NewStep("validate", func(ctx context.Context, info pipeline.StepInfo, lines []Line) ([]Line, error) {
		var ok []Line
		for _, l := range lines {
			if l.SKU == "" {
				if err := reject.RejectItem(ctx, info, l, errors.New("line has no sku")); err != nil {
					return nil, err // publish-failure policy FAIL_PIPELINE
				}
				continue
			}
			ok = append(ok, l)
		}
		return ok, nil
	})

	rejects := reject.NewMemory() // provider memory; log and sqs in production
	info := pipeline.StepInfo{TenantID: "acme", ExecutionID: "exec-1", PipelineID: "shop.import", StepName: "validate",
		Attempt: 1, TransitionKey: "exec-1:0:1", Rejects: &reject.Sink{Publisher: rejects, Policy: reject.Continue}}
	in, _ := payload.JSON([]Line{{SKU: "pen", Qty: 1}, {Qty: 2}})
	out, err := validate.Run(context.Background(), info, in)
	fmt.Println(string(out.Data), err)
	for _, env := range rejects.Envelopes() {
		fmt.Println(env.Scope, env.TransitionKey, env.ErrorCode, env.ErrorMessage, env.Fingerprint[:12], env.Payload == nil)
	}
	// Output:
	// [{"sku":"pen","qty":1}] <nil>
	// ITEM exec-1:0:1 item_rejected line has no sku 8b6bd02e823f true
}
