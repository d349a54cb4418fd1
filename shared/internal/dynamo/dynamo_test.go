package dynamo_test

import (
	"testing"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/internal/awstest"
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
	fx, dl := awstest.Name(t, "fx"), awstest.Name(t, "dl")
	awstest.Tables(t, clients, schema.EffectTable(fx), schema.DeadLetterTable(dl))
	records := dynamo.NewDeadLetters(clients.DynamoDB, dl, clock.System{})
	backendtest.Exercise(t, backendtest.Provider{
		State: func(t *testing.T, c clock.Clock) store.Store {
			st, _ := newStateStore(t, c)
			return st
		},
		Payloads: func(t *testing.T) payload.Store {
			table := awstest.Name(t, "payload")
			awstest.Tables(t, clients, schema.PayloadTable(table))
			return dynamo.NewPayloadStore(clients.DynamoDB, table, clock.System{})
		},
		Effects:  func(t *testing.T, c clock.Clock) effect.Log { return dynamo.NewEffects(clients.DynamoDB, fx, c) },
		Recorder: func(*testing.T) deadletter.Recorder { return records },
	})
}
