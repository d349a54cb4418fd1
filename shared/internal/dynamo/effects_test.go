package dynamo_test

import (
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/effect/effecttest"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/schema"
)

// TestEffectsConformance runs the suite on one fresh table shared by its
// parallel subtests (each uses its own command ids).
func TestEffectsConformance(t *testing.T) {
	clients, _ := awstest.Clients(t)
	table := awstest.Name(t, "fx")
	awstest.Tables(t, clients, schema.EffectTable(table))
	effecttest.Run(t, func(t *testing.T, c clock.Clock) effect.Log {
		return dynamo.NewEffects(clients.DynamoDB, table, c)
	})
}
