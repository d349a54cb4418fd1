// Priorities: an execution's priority (1 most urgent to 5, given at
// submit or by its pipeline, inherited by a map's children) and its rank,
// fixed at create: its creation aged by its priority (pipeline.Rank with
// Config.PriorityAging). Where executions compete, the smaller rank goes
// first: the wait line of a concurrency key (store.SlotStore.Waiting
// reads it in rank order) and a local queue's due work items (the rank
// rides on the work item: dispatch.ItemOf). Nothing is written
// for it after the create: a priority costs no write per step.

package engine

import (
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// prioritize sets a new row's priority and its rank (from its CreatedAt).
func (r *Runtime) prioritize(row *store.Execution, prio int) {
	row.Priority, row.Rank = prio, pipeline.Rank(row.CreatedAt, prio, r.cfg.PriorityAging)
}
