package dynamo_test

import (
	"context"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// TestConformance runs every seam's suite on the DynamoDB provider (the
// local stack): the state store and the payload store on fresh tables per
// case, the effect log and the dead-letter recorder on one table each,
// shared by their cases (each uses its own ids).
func TestConformance(t *testing.T) {
	clients, _ := awstest.Clients(t)
	conformance(t, clients)
}

// TestConformanceModel runs the same suites on the in-process DynamoDB
// model (package ddbmodel), so that one suite proves both the adapter and
// the model the simulator runs it on. It needs no stack.
func TestConformanceModel(t *testing.T) {
	conformance(t, ddbmodel.New(ddbmodel.Options{Clock: clock.System{}}).Clients())
}

// conformance lists the DynamoDB adapters on clients and exercises them.
func conformance(t *testing.T, clients awsclient.Clients) {
	fx, dl := awstest.Name(t, "fx"), awstest.Name(t, "dl")
	awstest.Tables(t, clients, schema.EffectTable(fx), schema.DeadLetterTable(dl))
	records := dynamo.NewDeadLetters(clients.DynamoDB, dl, clock.System{})
	// The history cases share one execution table, its history table and
	// one stream feed running until they all end.
	hx, hh := awstest.Name(t, "hx"), awstest.Name(t, "hh")
	awstest.Tables(t, clients, schema.ExecutionTable(hx), schema.HistoryTable(hh))
	runFeed(t, clients, hx, hh)
	backendtest.Exercise(t, backendtest.Provider{
		State: func(t *testing.T, c clock.Clock) store.Store {
			return newStateStoreOn(t, clients, c)
		},
		Payloads: func(t *testing.T) payload.Store {
			table := awstest.Name(t, "payload")
			awstest.Tables(t, clients, schema.PayloadTable(table))
			return dynamo.NewPayloadStore(clients.DynamoDB, table, clock.System{})
		},
		Effects:  func(t *testing.T, c clock.Clock) effect.Log { return dynamo.NewEffects(clients.DynamoDB, fx, c) },
		Recorder: func(*testing.T) deadletter.Recorder { return records },
		History: func(t *testing.T, c clock.Clock) (store.Store, history.Reader) {
			st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: hx, Clock: c})
			if err != nil {
				t.Fatal(err)
			}
			h, err := dynamo.NewHistory(clients.DynamoDB, st, dynamo.HistoryOptions{Table: hh})
			if err != nil {
				t.Fatal(err)
			}
			return st, h
		},
	})
}

// runFeed runs a stream feed of the execution table exec into the history
// table hist until the test ends.
func runFeed(t *testing.T, clients awsclient.Clients, exec, hist string) {
	t.Helper()
	st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: exec})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dynamo.NewHistory(clients.DynamoDB, st, dynamo.HistoryOptions{Table: hist})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := dynamo.NewStreamFeed(clients.DynamoDBStreams, clients.DynamoDB, h, dynamo.StreamOptions{ExecutionTable: exec, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = feed.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
