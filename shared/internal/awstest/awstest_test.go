package awstest_test

import (
	"context"
	"testing"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/schema"
)

// TestProvisionFromSchema creates every table and queue of the schema on
// the local stack and checks them as strict startup would.
func TestProvisionFromSchema(t *testing.T) {
	c, counter := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, c, schema.Tables(n)...)
	urls := awstest.Queues(t, c, schema.Queues(n)...)
	ctx := context.Background()
	if err := provision.CheckTables(ctx, c.DynamoDB, schema.Tables(n)); err != nil {
		t.Fatalf("CheckTables: %v", err)
	}
	for _, name := range []string{n.WorkQueue, n.PoisonQueue, n.DLQQueue} {
		if err := provision.CheckQueue(ctx, c.SQS, urls[name]); err != nil {
			t.Fatalf("CheckQueue %s: %v", name, err)
		}
	}
	missing := schema.Tables(n)
	missing[0].Name += "-missing"
	if err := provision.CheckTables(ctx, c.DynamoDB, missing); err == nil {
		t.Fatal("CheckTables passed for a missing table")
	}
	if counter.Snapshot()["DynamoDB.CreateTable"] != len(schema.Tables(n)) {
		t.Fatalf("counted %v", counter.Snapshot())
	}
}
