package dispatch_test

import (
	"testing"
	"time"

	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/store"
)

// TestItemOfCarriesThePriority: the work item carries the execution's
// priority, which the SQS dispatcher routes by (the urgent lane), and
// its rank.
func TestItemOfCarriesThePriority(t *testing.T) {
	e := store.Execution{TenantID: "t", ExecutionID: "e", PipelineID: "p", Priority: 1, Rank: time.UnixMilli(5000)}
	got := dispatch.ItemOf(&e)
	if got.Priority != 1 || got.Rank != e.WaitRank().UnixMilli() || got.TenantID != "t" || got.ExecutionID != "e" || got.PipelineID != "p" {
		t.Fatalf("ItemOf = %+v, want priority 1 and the execution's key, pipeline and rank", got)
	}
}
