package await_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// An await step hands its await id and resume token to whoever completes
// it, then parks the execution as WAITING_EXTERNAL. The completion
// (POST /v1/executions/{executionId}/awaits/{awaitId}/complete with
// X-Resume-Token) becomes the next step's input.
func ExampleStep() {
	approve := await.Step("approve", await.Spec{}, func(ctx context.Context, req await.Request) error {
		// Normally: e-mail a link, or call a partner with a callback URL.
		fmt.Println("await", req.AwaitID != "", "token", len(req.Token))
		return nil
	})
	p := pipeline.Pipeline{ID: "docs.approval", Steps: []pipeline.Step{approve}}
	if err := p.Validate(); err != nil {
		panic(err)
	}

	// What the runtime does for one transition (its secret signs tokens).
	secret := []byte("resume-token-secret")
	info := pipeline.StepInfo{ExecutionID: "e-1", TenantID: "t1", StepName: "approve", Attempt: 1,
		ResumeToken: func(id string) string { return await.Sign(secret, "t1", "e-1", id) }}
	in, _ := payload.JSON(map[string]string{"doc": "d-1"})
	_, err := approve.Run(context.Background(), info, in)
	var aw *pipeline.AwaitError
	fmt.Println(errors.As(err, &aw), aw.ID == await.ID(info))
	// Output:
	// await true token 70
	// true true
}
