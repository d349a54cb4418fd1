// Map children: the parent reference a child row carries, the map a
// parent row carries while it waits, and the seam of the map's counts
// (MapStore).

package store

import (
	"context"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// GroupSize is how many children share one group row of a map's counts:
// a child's end is one write to its group's row, and the write that
// completes a group is one write to the map's finished set, so that no
// single item takes more than GroupSize writes whatever the map's size.
const GroupSize = 100

// ParentRef is a child's link to its parent (same tenant).
type ParentRef struct {
	// ExecutionID is the parent's execution id.
	ExecutionID string
	// CreateToken is the parent's create token (its incarnation): a
	// child never acts on another incarnation of its parent's slot.
	CreateToken string
	// StepIndex is the index of the parent's map step.
	StepIndex int
	// Round is the map's round the child belongs to: 0 for the fan-out,
	// n for the n-th re-drive of the map's failed children.
	Round int
	// Index is the child's index in its round (from 0); in round 0 it is
	// the element's index in the map's input.
	Index int
	// Element is the element's index in the map's input (Index in round
	// 0; the stores keep it only for later rounds).
	Element int
	// Total is the number of children of the round.
	Total int
	// MaxInFlight is the map's in-flight limit: the end of child i
	// releases child i+MaxInFlight.
	MaxInFlight int
}

// Map returns the key of the map round the child belongs to.
func (p *ParentRef) Map(tenantID string) MapKey {
	return MapKey{TenantID: tenantID, ParentID: p.ExecutionID, StepIndex: p.StepIndex, Round: p.Round}
}

// Children is the map a parent waits for.
type Children struct {
	// StepIndex is the map step's index.
	StepIndex int
	// Total is the number of children.
	Total int
	// MaxInFlight is the map's in-flight limit.
	MaxInFlight int
	// Done marks a map whose every group has finished: the parent is
	// queued at its map step again, whose next run collects the outcomes.
	Done bool
	// Round is the map's round: 0 for the fan-out, n for the n-th
	// re-drive of its failed children (Total is then the round's size).
	Round int
	// Retry marks a map whose round ended beyond its tolerance (the
	// parent failed with children_failed): a re-drive of the parent runs
	// the failed elements again as round Round+1.
	Retry bool
	// Prior is the MapResult of every element as the rounds before this
	// one left them (nil in round 0): what a later round's outcomes
	// replace. A payload of the parent's, kept as its input is.
	Prior *payload.Ref
	// Kept counts the elements a later round does not run again, for the
	// status counts: those that succeeded, and those that ended otherwise
	// (rejected, cancelled).
	KeptSucceeded, KeptOther int
}

// Groups returns the number of group rows of a map of total children.
func Groups(total int) int { return (total + GroupSize - 1) / GroupSize }

// GroupLen returns how many children group g of a map of total children
// holds.
func GroupLen(total, g int) int { return min(GroupSize, total-g*GroupSize) }

// MapKey names one map of one parent.
type MapKey struct {
	TenantID string
	ParentID string
	// StepIndex is the parent's map step.
	StepIndex int
	// Round is the map's round (see Children.Round): each round counts in
	// rows of its own.
	Round int
}

// MapCounts is what a map's count rows hold.
type MapCounts struct {
	// Ended holds the indexes of the children counted as ended, ascending.
	Ended []int
	// Failed holds the indexes of those that ended without success
	// (a subset of Ended), ascending.
	Failed []int
	// Finished holds the finished groups, ascending.
	Finished []int
}

// MapStore is the seam of a map's counts, kept by the state store beside
// the executions, outside every index. Every write adds to a set, so a
// write repeated (a retry, a repair) changes nothing: a count cannot be
// counted twice.
type MapStore interface {
	// CountChild adds index to the ended set of its group's row
	// (index/GroupSize), and to the group's failed set when failed, in one
	// write; it returns how many of the group's children have ended after
	// the write. expires is the row's TTL (a later write keeps the later
	// one).
	CountChild(ctx context.Context, m MapKey, index int, failed bool, expires time.Time) (ended int, err error)
	// FinishGroup adds group to the map's set of finished groups in one
	// write and returns how many groups are finished after it.
	FinishGroup(ctx context.Context, m MapKey, group int, expires time.Time) (finished int, err error)
	// MapCounts reads the groups rows of a map of total children and its
	// finished set, strongly consistent; a map nothing was counted for
	// yet reads empty. Expired rows read as absent.
	MapCounts(ctx context.Context, m MapKey, total int) (MapCounts, error)
}
