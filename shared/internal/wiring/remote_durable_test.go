package wiring_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/remote"
	"github.com/qasync/qasync/shared/store"
)

// TestDurableRemoteOutcomeUnknown runs a remote REST step against a worker
// on loopback that hangs past the deadline, on DynamoDB and SQS: the
// execution is parked as REMOTE_OUTCOME_UNKNOWN, the sweeper and the work
// queue leave it alone, and only a confirmed re-drive runs it again.
func TestDurableRemoteOutcomeUnknown(t *testing.T) {
	var hang atomic.Bool
	hang.Store(true)
	var calls atomic.Int32
	release := make(chan struct{})
	worker := remote.Handler(pipeline.NewStep("echo", func(_ context.Context, info pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		in["remoteAttempt"] = info.Attempt
		return in, nil
	}).Run)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if hang.Load() {
			select { // hang well past the caller's deadline
			case <-release:
			case <-time.After(10 * time.Second):
			}
			return
		}
		worker.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	p := pipeline.Pipeline{ID: "t.remote", Steps: []pipeline.Step{
		remote.Step("call", remote.Spec{URL: srv.URL + "/run", Deadline: 2 * time.Second}),
	}}
	var unknown atomic.Int32
	d := openDurableWith(t, nil, nil, []option{withObserver(engine.ObserverFunc(func(_ context.Context, ev engine.Event) {
		if ev.Kind == engine.EventOutcomeUnknown {
			unknown.Add(1)
		}
	}))}, p)
	d.start()
	d.sweepEvery(200 * time.Millisecond)

	e := d.submit("t.remote", "remote-1", map[string]any{"order": "o-1"})
	parked := d.await(e, store.RemoteOutcomeUnknown, 20*time.Second)
	if parked.Error == nil || parked.Error.Code != pipeline.CodeRemoteOutcomeUnknown || !parked.NextDueAt.IsZero() || parked.Attempt != 1 {
		t.Fatalf("parked row = %+v %+v", parked, parked.Error)
	}
	// The event follows the commit that await saw: wait for it (under load
	// the worker may not have reached it yet), then make sure it came once.
	for end := time.Now().Add(10 * time.Second); unknown.Load() == 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if unknown.Load() != 1 {
		t.Errorf("%d outcome-unknown events", unknown.Load())
	}
	// Lease (1.5s), retry delay (1s) and sweep grace (1s) all pass: nothing
	// claims, sweeps or retries it.
	time.Sleep(4 * time.Second)
	still, err := d.set.Runtime.Status(context.Background(), e.Key())
	if err != nil {
		t.Fatal(err)
	}
	if still.Status != store.RemoteOutcomeUnknown || still.Version != parked.Version || calls.Load() != 1 {
		t.Fatalf("parked row changed: %+v, %d calls", still, calls.Load())
	}
	ctx := context.Background()
	if _, err := d.set.Runtime.Redrive(ctx, e.Key(), "retry", nil); !errors.Is(err, engine.ErrRemoteEffectUnconfirmed) {
		t.Fatalf("unconfirmed redrive err = %v", err)
	}
	hang.Store(false)
	if _, err := d.set.Runtime.RedriveWith(ctx, e.Key(), engine.RedriveOptions{Reason: "worker confirmed stopped", ConfirmedNoRemoteEffect: true}); err != nil {
		t.Fatal(err)
	}
	done := d.await(e, store.Succeeded, 20*time.Second)
	if done.Attempt != 2 || calls.Load() != 2 {
		t.Fatalf("final = %+v, %d calls", done, calls.Load())
	}
	_, res, err := d.set.Runtime.Result(ctx, e.Key())
	if err != nil || string(res.Data) != `{"order":"o-1","remoteAttempt":2}` {
		t.Fatalf("result %s, %v", res.Data, err)
	}
}
