package dynamo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// newStateStore makes fresh tables for one test.
func newStateStore(t *testing.T, c clock.Clock) (*dynamo.StateStore, *awsclient.Counter) {
	t.Helper()
	clients, counter := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(n.ExecutionTable), schema.KeyTable(n.KeyTable))
	st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable, KeyTable: n.KeyTable, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	return st, counter
}

// TestDueReadsOnlyDueRows: a table holding many finished executions and a
// few due ones; the due query reads the due ones only, and nothing scans.
func TestDueReadsOnlyDueRows(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	st, counter := newStateStore(t, c)
	ctx := context.Background()
	now := c.Now()
	const finished, due = 300, 7
	for i := range finished + due {
		e := store.Execution{TenantID: "t", ExecutionID: fmt.Sprintf("e%04d", i), PipelineID: "p", Status: store.Queued, Version: 1,
			StepName: "s", Attempt: 1, NextDueAt: now, SweepAt: now, IdempotencyKey: fmt.Sprint("k", i), CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
			Input: payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, SHA256: payload.Digest(nil), Inline: []byte{}}}
		if _, _, err := st.CreateOrGet(ctx, store.CreateRequest{Execution: e, IdempotencyKey: e.IdempotencyKey, Fingerprint: "f"}); err != nil {
			t.Fatal(err)
		}
		if i < finished {
			done := e
			done.Status, done.NextDueAt, done.SweepAt = store.Succeeded, time.Time{}, time.Time{}
			if _, err := st.Update(ctx, store.Guard{Key: e.Key(), Version: 1}, done); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := st.DueItemsRead()
	counter.Reset()
	page, err := st.Due(ctx, store.DueQuery{By: now, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if refs := page.Refs; len(refs) != due || page.Cursor != "" {
		t.Fatalf("%d due refs (cursor %q), want %d and no cursor", len(refs), page.Cursor, due)
	}
	if read := st.DueItemsRead() - before; read != due {
		t.Fatalf("the due query read %d items for %d due rows among %d", read, due, finished+due)
	}
	counts := counter.Snapshot()
	if counts["DynamoDB.Scan"] != 0 || counts["DynamoDB.Query"] != schema.DefaultDueShards {
		t.Fatalf("requests = %v, want one Query per shard and no Scan", counts)
	}
	t.Logf("due query over %d rows (%d due): %d items read, requests %v", finished+due, due, st.DueItemsRead()-before, counts)
}
