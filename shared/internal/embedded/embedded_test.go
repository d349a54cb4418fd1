package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// open opens a store in a fresh directory, closed at the end of the test.
func open(t testing.TB, opts embedded.Options) *embedded.DB {
	t.Helper()
	opts.NoControl = true
	db, err := embedded.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestConformance runs every seam's suite on the embedded provider: the
// state store (with its list and job cases), payload store, effect log,
// dead-letter recorder (with its list cases) and publisher, reject sink,
// dispatcher and history (lifecycles the real engine runs on the store),
// each on stores opened on disk. The effect, recorder and history cases
// share one store (their keys and tenants are unique per case); the
// others open a store per case (the state suite pages the whole sweep
// index).
func TestConformance(t *testing.T) {
	shared := open(t, embedded.Options{})
	backendtest.Exercise(t, backendtest.Provider{
		State:    func(t *testing.T, c clock.Clock) store.Store { return open(t, embedded.Options{}).State(c) },
		Payloads: func(t *testing.T) payload.Store { return open(t, embedded.Options{}).Payloads(nil) },
		Effects:  func(t *testing.T, c clock.Clock) effect.Log { return shared.Effects(c) },
		Recorder: func(*testing.T) deadletter.Recorder { return shared.DeadLetters(nil) },
		Dispatcher: func(t *testing.T, h dispatch.Handler) dispatch.Dispatcher {
			d := open(t, embedded.Options{}).NewDispatcher(h, embedded.DispatcherOptions{Workers: 4, RedeliveryDelay: 20 * time.Millisecond})
			d.Start()
			t.Cleanup(func() { _ = d.Close(context.Background()) })
			return d
		},
		DeadLetters: func(t *testing.T) (deadletter.Publisher, backendtest.ReadBack[deadletter.Envelope]) {
			dl := open(t, embedded.Options{}).DeadLetters(nil)
			return dl, func(ctx context.Context, _ int) ([]deadletter.Envelope, error) {
				page, err := dl.List(ctx, deadletter.ListQuery{TenantID: "tenant-a", Limit: 500})
				envs := make([]deadletter.Envelope, 0, len(page.Records))
				for _, r := range page.Records {
					envs = append(envs, *r.Envelope)
				}
				return envs, err
			}
		},
		History: func(t *testing.T, c clock.Clock) (store.Store, history.Reader) {
			st := shared.State(c)
			return st, st
		},
		Rejects: func(t *testing.T) (reject.Publisher, backendtest.ReadBack[reject.Envelope]) {
			r := open(t, embedded.Options{}).Rejects()
			return r, func(ctx context.Context, _ int) ([]reject.Envelope, error) { return r.Envelopes(ctx) }
		},
	})
}
