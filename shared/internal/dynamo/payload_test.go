package dynamo_test

import (
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/payload/payloadtest"
	"github.com/qasync/qasync/shared/schema"
)

func TestPayloadStoreConformance(t *testing.T) {
	payloadtest.Run(t, func(t *testing.T) payload.Store {
		clients, _ := awstest.Clients(t)
		table := awstest.Name(t, "payload")
		awstest.Tables(t, clients, schema.PayloadTable(table))
		return dynamo.NewPayloadStore(clients.DynamoDB, table, clock.System{})
	})
}
