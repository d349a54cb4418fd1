package dynamo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// newStateStoreOn makes fresh tables for one test on clients.
func newStateStoreOn(t *testing.T, clients awsclient.Clients, c clock.Clock) *dynamo.StateStore {
	t.Helper()
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(n.ExecutionTable))
	st, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// onBoth runs f on the local stack (skipped without it) and on the
// in-process model (package ddbmodel): tests of DynamoDB's semantics run
// on both, so that the model cannot drift from them.
func onBoth(t *testing.T, f func(t *testing.T, clients awsclient.Clients, counter *awsclient.Counter)) {
	t.Run("local", func(t *testing.T) {
		clients, counter := awstest.Clients(t)
		f(t, clients, counter)
	})
	t.Run("model", func(t *testing.T) {
		counter := awsclient.NewCounter()
		cfg := ddbmodel.New(ddbmodel.Options{Clock: clock.System{}}).Config()
		cfg.APIOptions = append(cfg.APIOptions, counter.APIOption)
		f(t, awsclient.FromConfig(cfg), counter)
	})
}

// dueRow is a QUEUED row due (and to be swept) at now.
// stateEpoch is the fake clocks' start: near the wall clock, because
// DynamoDB Local deletes an item once its TTL attribute is past by the
// wall clock (a fixed date made these rows, which expire an hour after
// it, vanish from the day after).
var stateEpoch = time.Now().UTC().Truncate(time.Second)

func dueRow(id string, now time.Time) store.Execution {
	return store.Execution{TenantID: "t", ExecutionID: id, PipelineID: "p", Status: store.Queued, Version: 1,
		StepName: "s", Attempt: 1, NextDueAt: now, SweepAt: now, IdempotencyKey: "k-" + id, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
		Input: payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, SHA256: payload.Digest(nil), Inline: []byte{}}}
}

// TestLoweredShardCountStillSweepsEveryRow: rows written by processes
// sized for a high step rate (many index shards) stay visible to the
// sweep of a process configured with fewer: the table remembers the
// largest shard count used.
func TestLoweredShardCountStillSweepsEveryRow(t *testing.T) {
	t.Parallel()
	onBoth(t, loweredShardCount)
}

func loweredShardCount(t *testing.T, clients awsclient.Clients, _ *awsclient.Counter) {
	c := clock.NewFake(stateEpoch)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.ExecutionTable(n.ExecutionTable))
	wide, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable, DueShards: 40, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const rows = 60
	for i := range rows {
		if _, _, err := wide.CreateOrGet(ctx, store.CreateRequest{Execution: dueRow(fmt.Sprintf("e%02d", i), c.Now())}); err != nil {
			t.Fatal(err)
		}
	}
	narrow, err := dynamo.NewStateStore(clients.DynamoDB, dynamo.Options{ExecutionTable: n.ExecutionTable, DueShards: 4, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	cursor := ""
	for range rows {
		page, err := narrow.Due(ctx, store.DueQuery{By: c.Now(), Limit: 25, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Refs {
			seen[r.Key.ExecutionID] = true
		}
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	if len(seen) != rows {
		t.Fatalf("a 4-shard sweep found %d of %d rows written over 40 shards", len(seen), rows)
	}
}

// TestDueReadsOnlyDueRows: a table holding many finished executions and a
// few due ones; the due query reads the due ones only, and nothing scans.
func TestDueReadsOnlyDueRows(t *testing.T) {
	t.Parallel()
	onBoth(t, dueReadsOnlyDueRows)
}

func dueReadsOnlyDueRows(t *testing.T, clients awsclient.Clients, counter *awsclient.Counter) {
	c := clock.NewFake(stateEpoch)
	st := newStateStoreOn(t, clients, c)
	counter.Reset()
	ctx := context.Background()
	now := c.Now()
	const finished, due = 300, 7
	for i := range finished + due {
		e := dueRow(fmt.Sprintf("e%04d", i), now)
		if _, _, err := st.CreateOrGet(ctx, store.CreateRequest{Execution: e}); err != nil {
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
	if counts["DynamoDB.Scan"] != 0 || counts["DynamoDB.Query"] != schema.DefaultDueShards || counts["DynamoDB.GetItem"] > 1 {
		t.Fatalf("requests = %v, want one Query per shard, at most one read of the shard count, no Scan", counts)
	}
	t.Logf("due query over %d rows (%d due): %d items read, requests %v", finished+due, due, st.DueItemsRead()-before, counts)
}
