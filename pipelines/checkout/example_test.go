package checkout_test

import (
	"context"
	"fmt"

	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/pipelinetest"
)

// Each step runs in turn on the previous step's output, as the runtime
// runs them (there, each step is committed on its own).
func ExamplePipeline() {
	in, err := payload.RawJSON([]byte(`{"orderId":"ord-1001","items":[{"sku":"book-42","qty":2}],"amountCents":2598}`))
	if err != nil {
		panic(err)
	}
	p := checkout.Pipeline()
	effects := pipelinetest.Effects() // the runtime hands steps its effect log
	for i, step := range p.Steps {
		info := pipeline.StepInfo{
			ExecutionID: "exec-1", TenantID: "acme", PipelineID: p.ID,
			StepName: step.Name, StepIndex: i, Attempt: 1,
			IdempotencyKey: fmt.Sprintf("acme:exec-1:%d", i), Effects: effects,
		}
		if in, err = step.Run(context.Background(), info, in); err != nil {
			panic(err)
		}
	}
	fmt.Println(string(in.Data))
	// Output:
	// {"orderId":"ord-1001","status":"DELIVERY_SCHEDULED","reservationId":"res-0d2bccd899f1e6d7","paymentId":"pay-26f5010e2db1f298","deliveryId":"dlv-fe7bab10547ad599"}
}
