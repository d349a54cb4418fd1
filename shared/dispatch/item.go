package dispatch

import "github.com/qasync/qasync/shared/store"

// ItemOf is the work item of execution e: its key, its pipeline (routing)
// its rank (store.Execution.WaitRank) and its priority, so that every producer of work
// items (the runtime's hand-overs, the sweeper, a store that keeps its
// own queue) carries the same order.
func ItemOf(e *store.Execution) WorkItem {
	return WorkItem{TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, Rank: e.WaitRank().UnixMilli(), Priority: e.Priority}
}
