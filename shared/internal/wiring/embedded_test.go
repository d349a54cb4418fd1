package wiring_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// embeddedRegistry serves "e.ok" (two steps) and "e.fail" (a step that
// fails non-retryably).
func embeddedRegistry(t *testing.T) *pipeline.Registry {
	t.Helper()
	inc := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]int) (map[string]int, error) {
			in[name]++
			return in, nil
		})
	}
	fail := pipeline.NewStep("boom", func(context.Context, pipeline.StepInfo, map[string]int) (map[string]int, error) {
		return nil, pipeline.NonRetryable("broken", errors.New("scripted"))
	})
	reg, err := pipeline.NewRegistry(
		pipeline.Pipeline{ID: "e.ok", Steps: []pipeline.Step{inc("a"), inc("b")}},
		pipeline.Pipeline{ID: "e.fail", Steps: []pipeline.Step{fail}})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func waitStatus(t *testing.T, rt *engine.Runtime, key store.Key, want store.Status) store.Execution {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err := rt.Status(context.Background(), key)
		if err == nil && e.Status == want {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s: status %s (err %v), want %s", key, e.Status, err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOpenDefaultsToTheEmbeddedStore: without provider settings the
// runtime runs on the embedded store (state, payloads, effects, dead
// letters, rejects and its durable queue in the data directory), with the
// whole operator plane: a dead letter is recorded there and listed by the
// runtime, histories are read, a bulk re-drive runs on its job store; a
// second Open of the same directory is refused naming embedded.data-dir,
// and after Close a new Open finds every execution and the re-drive job.
func TestOpenDefaultsToTheEmbeddedStore(t *testing.T) {
	c := config.Default()
	c.EmbeddedDataDir = t.TempDir()
	c.TenantSource = "none"
	reg := embeddedRegistry(t)
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Seams.Dispatcher.(*embedded.Dispatcher); !ok {
		t.Fatalf("default configuration dispatches with %T, want the embedded store's queue", set.Seams.Dispatcher)
	}
	if _, ok := set.Seams.Recorder.(*embedded.DeadLetters); !ok {
		t.Fatalf("recorder %T, want the embedded store's", set.Seams.Recorder)
	}
	ctx := context.Background()
	in, _ := payload.JSON(map[string]int{})
	ok, err := set.Runtime.Submit(ctx, engine.SubmitRequest{TenantID: "default", PipelineID: "e.ok", IdempotencyKey: "k1", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := set.Runtime.Submit(ctx, engine.SubmitRequest{TenantID: "default", PipelineID: "e.fail", IdempotencyKey: "k2", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, set.Runtime, ok.Execution.Key(), store.Succeeded)
	waitStatus(t, set.Runtime, bad.Execution.Key(), store.DLQ)
	page, err := set.Runtime.DeadLetters(ctx, deadletter.ListQuery{TenantID: "default"})
	if err != nil || len(page.Records) != 1 || page.Records[0].ExecutionID != bad.Execution.ExecutionID {
		t.Fatalf("dead letters %+v, %v; want the failed execution's", page.Records, err)
	}
	events, err := set.Runtime.History(ctx, ok.Execution.Key())
	if err != nil || len(events) == 0 || events[0].Type != history.Submitted || events[len(events)-1].Type != history.Succeeded {
		t.Fatalf("history %+v, %v; want SUBMITTED ... SUCCEEDED", events, err)
	}
	job, err := set.Runtime.StartRedrives(ctx, "default", engine.RedriveFilter{PipelineID: "e.fail"}, "try again", 0, false)
	if err != nil || job.Matched != 1 {
		t.Fatalf("StartRedrives on the embedded store: %+v, %v; want the dead letter matched", job, err)
	}
	if _, err := set.Runtime.DriveRedrives(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := set.Runtime.RedriveJob(ctx, "default", job.ID); err != nil || got.Redriven != 1 || !got.Done {
		t.Fatalf("re-drive job %+v, %v; want the one re-driven, done", got, err)
	}
	if e := waitStatus(t, set.Runtime, bad.Execution.Key(), store.DLQ); e.RedriveCount != 1 {
		t.Fatalf("the dead letter was re-driven %d times, want once", e.RedriveCount)
	}

	_, err = open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, embedded.ErrLocked) || !strings.Contains(err.Error(), "pipeline.orchestrator.embedded.data-dir") {
		t.Fatalf("second Open of the directory: %v, want ErrLocked naming the key", err)
	}
	if err := set.Close(ctx); err != nil {
		t.Fatal(err)
	}

	again, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	e, err := again.Runtime.Status(ctx, ok.Execution.Key())
	if err != nil || e.Status != store.Succeeded {
		t.Fatalf("after reopen: %+v, %v", e, err)
	}
	if _, p, err := again.Runtime.Result(ctx, ok.Execution.Key()); err != nil || string(p.Data) != `{"a":1,"b":1}` {
		t.Fatalf("result after reopen: %s, %v", p.Data, err)
	}
	if got, err := again.Runtime.RedriveJob(ctx, "default", job.ID); err != nil || got.Redriven != 1 || !got.Done {
		t.Fatalf("re-drive job after reopen: %+v, %v", got, err)
	}
}
