// Priorities: an execution's urgency, 1 (most urgent) to 5, given at
// submit or by the pipeline's default. Where executions compete (the
// wait line of a concurrency key, a local queue's due work) a more
// urgent one goes first, aged so that a less urgent one waits a bounded
// time (the runtime's priority aging).

package pipeline

import (
	"fmt"
	"time"
)

// The priority range: a lower number is more urgent (Temporal's and
// River's convention).
const (
	// HighestPriority is the most urgent priority.
	HighestPriority = 1
	// LowestPriority is the least urgent priority.
	LowestPriority = 5
	// DefaultPriority is the priority of an execution submitted without
	// one, of a pipeline that declares none.
	DefaultPriority = 3
)

// CheckPriority refuses a priority outside HighestPriority to
// LowestPriority.
func CheckPriority(p int) error {
	if p < HighestPriority || p > LowestPriority {
		return fmt.Errorf("pipeline: priority %d outside %d (most urgent) to %d (least urgent)", p, HighestPriority, LowestPriority)
	}
	return nil
}

// PriorityOf is the priority of an execution submitted with requested
// (0: none given) for p: requested, else p's Priority, else
// DefaultPriority.
func PriorityOf(p *Pipeline, requested int) int {
	switch {
	case requested != 0:
		return requested
	case p != nil && p.Priority != 0:
		return p.Priority
	}
	return DefaultPriority
}

// Rank is the sort key of an execution of priority prio created at
// created: created plus (prio-1) times aging. A smaller rank goes first,
// so an execution is passed over only by executions of a more urgent
// priority submitted less than (its priority - their priority) times
// aging after it: with priorities 1 to 5, starvation is bounded by four
// agings.
func Rank(created time.Time, prio int, aging time.Duration) time.Time {
	return created.Add(time.Duration(prio-HighestPriority) * aging)
}
