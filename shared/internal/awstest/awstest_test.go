package awstest_test

import (
	"context"
	"strings"
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

// TestProvisionAddsTheStreamToAnOlderTable: an execution table provisioned
// before the history (no stream) fails strict startup's check, naming the
// stream, until provisioning again turns the stream on.
func TestProvisionAddsTheStreamToAnOlderTable(t *testing.T) {
	c, _ := awstest.Clients(t)
	want := schema.ExecutionTable(awstest.Name(t, "exec"))
	older := want
	older.Stream = ""
	awstest.Tables(t, c, older)
	ctx := context.Background()
	if err := provision.CheckTables(ctx, c.DynamoDB, []schema.Table{want}); err == nil || !strings.Contains(err.Error(), "NEW_AND_OLD_IMAGES stream") {
		t.Fatalf("CheckTables of a table without its stream: err = %v, want one naming the stream", err)
	}
	if _, err := provision.CreateTables(ctx, c.DynamoDB, []schema.Table{want}); err != nil {
		t.Fatalf("CreateTables over the older table: %v", err)
	}
	if err := provision.CheckTables(ctx, c.DynamoDB, []schema.Table{want}); err != nil {
		t.Fatalf("CheckTables after provisioning again: %v", err)
	}
}
