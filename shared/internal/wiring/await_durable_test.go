package wiring_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// TestDurableAwait parks an execution on DynamoDB, completes the await,
// and sees the next step run on the completion to SUCCEEDED.
func TestDurableAwait(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var id, tok string
	step := await.Step("approve", await.Spec{Timeout: time.Hour}, func(_ context.Context, r await.Request) error {
		mu.Lock()
		defer mu.Unlock()
		id, tok = r.AwaitID, r.Token
		return nil
	})
	after := pipeline.NewStep("after", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		in["after"] = true
		return in, nil
	})
	p := pipeline.Pipeline{ID: "durable.await", Steps: []pipeline.Step{step, after}}
	d := openDurable(t, func(c *config.Config) { c.AwaitResumeTokenSecret = "durable-secret" }, p)
	e := d.submit(p.ID, "await-1", map[string]any{"doc": 1})
	d.start()
	parked := d.await(e, store.WaitingExternal, 30*time.Second)
	mu.Lock()
	awaitID, token := id, tok
	mu.Unlock()
	if parked.Await == nil || parked.Await.ID != awaitID || parked.Await.TimeoutAt.IsZero() {
		t.Fatalf("parked = %+v await %+v", parked, parked.Await)
	}
	in, _ := payload.JSON(map[string]any{"approved": true})
	if _, _, err := d.set.Runtime.CompleteAwait(context.Background(), e.ExecutionID, awaitID, token, in); err != nil {
		t.Fatalf("CompleteAwait: %v", err)
	}
	got := d.await(e, store.Succeeded, 30*time.Second)
	if got.Await == nil || got.Await.Status != store.AwaitCompleted {
		t.Fatalf("await = %+v", got.Await)
	}
	_, res, err := d.set.Runtime.Result(context.Background(), e.Key())
	if err != nil || string(res.Data) != `{"after":true,"approved":true}` {
		t.Fatalf("result %s, %v", res.Data, err)
	}
}
