package engine_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// The engine's lifecycle and concurrency tests run on the memory
// provider, or, with QASYNC_ENGINE_PROVIDER=embedded or
// QASYNC_ENGINE_PROVIDER=dynamo (make test runs all three), on the
// embedded store (the state store, the payload store, the effect log and
// the dispatcher, its durable queue, of one data directory per test), or
// on the DynamoDB adapter against the in-process model of the DynamoDB API
// (the state store, the payload store and the effect log of fresh tables;
// the memory dispatcher).

// providerEnv names the provider the harness uses.
const providerEnv = "QASYNC_ENGINE_PROVIDER"

// onEmbedded reports whether the tests run on the embedded store.
func onEmbedded() bool { return os.Getenv(providerEnv) == "embedded" }

// closer is a dispatcher the harness stops at cleanup.
type closer interface {
	dispatch.Dispatcher
	Close(ctx context.Context) error
}

// providers are one test's backends.
type providers struct {
	store    store.Store
	payloads payload.Store
	effects  effect.Log
	// dispatcher returns a started dispatcher calling h.
	dispatcher func(h dispatch.Handler, workers int, redelivery time.Duration) closer
}

// memoryDispatcher is the in-process dispatcher of the memory and
// DynamoDB providers.
func memoryDispatcher(h dispatch.Handler, workers int, redelivery time.Duration) closer {
	return memory.NewDispatcher(h, memory.DispatcherOptions{Workers: workers, RedeliveryDelay: redelivery})
}

// newProviders returns the backends of the provider under test, closed
// at t's cleanup.
func newProviders(t testing.TB) providers {
	t.Helper()
	switch os.Getenv(providerEnv) {
	case "embedded":
		db, err := embedded.Open(t.TempDir(), embedded.Options{NoControl: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return providers{store: db.State(nil), payloads: db.Payloads(nil), effects: db.Effects(nil),
			dispatcher: func(h dispatch.Handler, workers int, redelivery time.Duration) closer {
				d := db.NewDispatcher(h, embedded.DispatcherOptions{Workers: workers, RedeliveryDelay: redelivery})
				d.Start()
				return d
			}}
	case "dynamo":
		clients := ddbmodel.New(ddbmodel.Options{Clock: clock.System{}}).Clients()
		names := schema.Prefixed("engine")
		if _, err := provision.CreateTables(context.Background(), clients.DynamoDB, schema.Tables(names)); err != nil {
			t.Fatal(err)
		}
		st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: names.ExecutionTable})
		if err != nil {
			t.Fatal(err)
		}
		return providers{store: st, payloads: dynamo.NewPayloadStore(clients.DynamoDB, names.PayloadTable, nil),
			effects: dynamo.NewEffects(clients.DynamoDB, names.EffectTable, nil), dispatcher: memoryDispatcher}
	}
	return providers{store: memory.NewStateStore(clock.System{}), payloads: memory.NewPayloadStore(clock.System{}),
		effects: memory.NewEffects(clock.System{}), dispatcher: memoryDispatcher}
}

// lossyDispatch skips a test that loses work items on purpose, to prove
// the sweeper's recovery or to run a step by hand (Process) on a row
// whose item it dropped or that it wrote to the store itself: on the
// embedded store a row write and its work item are one write, so the
// dropped item is delivered anyway (by the row's queue entry), and that
// recovery cannot be needed there.
func lossyDispatch(t testing.TB) {
	t.Helper()
	if onEmbedded() {
		t.Skip("the embedded store queues a row's work item in the row's own write: a dispatch lost after it loses nothing")
	}
}
