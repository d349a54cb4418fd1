// Package schema defines, once, the DynamoDB tables and SQS queues the
// durable providers use: key schemas, the sparse due-work index, TTL, and
// queue redrive. `qasync provision` creates them locally from this
// definition and the CDK app provisions them in AWS from the same one, so
// local and cloud schemas cannot drift. It imports no AWS SDK.
package schema

import "time"

// AttrType is a DynamoDB scalar key type.
type AttrType string

// Key attribute types.
const (
	String AttrType = "S"
	Number AttrType = "N"
	Binary AttrType = "B"
)

// Attr is a key attribute.
type Attr struct {
	Name string
	Type AttrType
}

// Index is a global secondary index with an INCLUDE projection.
type Index struct {
	Name         string
	PartitionKey Attr
	SortKey      Attr
	// NonKeyAttributes are projected besides the table and index keys.
	NonKeyAttributes []string
}

// Table is a DynamoDB table (on-demand billing).
type Table struct {
	Name         string
	PartitionKey Attr
	// SortKey is zero for a table without one.
	SortKey Attr
	Indexes []Index
	// TTLAttribute names the epoch-seconds expiry attribute.
	TTLAttribute string
	// Stream is the view type of the table's change stream ("" for none):
	// StreamNewAndOldImages on the execution table, whose stream feeds the
	// history table.
	Stream StreamView
}

// StreamView is a DynamoDB stream view type.
type StreamView string

// StreamNewAndOldImages: every stream record carries the item before and
// after the change, from which history.Derive tells what the write did.
const StreamNewAndOldImages StreamView = "NEW_AND_OLD_IMAGES"

// Queue is an SQS standard queue.
type Queue struct {
	Name              string
	VisibilityTimeout time.Duration
	Retention         time.Duration
	// RedriveTo names the queue that receives messages after
	// MaxReceiveCount receives ("" for none).
	RedriveTo       string
	MaxReceiveCount int
}

// The names of the key and index attributes the tables are defined with
// (package dynamo names every attribute of the items it writes, and
// checks that its names are these).
const (
	keyCommandID      = "command_id"
	keyCreated        = "c"
	keyDueShard       = "ds"
	keyIncarnation    = "ic"
	keyListKey        = "lk"
	keyPK             = "pk"
	keyPage           = "pg"
	keyPayloadID      = "payload_id"
	keyPayloadPart    = "payload_part"
	keyPipelineID     = "p"
	keyRank           = "rk"
	keyRecord         = "record"
	keyRecordID       = "record_id"
	keyRecordPipeline = "pipeline_id"
	keyRecordTenant   = "tenant"
	keyRecordedAt     = "recorded_ms"
	keySweepAt        = "sw"
	keyTTL            = "ttl"
	keyWaitKey        = "wk"
)

// DueIndexName is the sparse sweep GSI: PK due_shard (fixed at submit),
// SK sweep_at_epoch_ms, present only on rows the sweeper has to look at
// some time (not on terminal rows, nor on parked rows without a timeout).
// It projects only pipeline_id besides the keys, an attribute that never
// changes, so that no commit writes the index unless it moves sweep_at;
// the happy path never does (see execution.Execution.SweepAt).
const DueIndexName = "sweep"

// ListIndexName is the list GSI: PK list_key (the tenant and a bucket,
// fixed at submit), SK created_at, on every row. It projects pipeline_id
// besides the keys. All three are written once at submit, so the index
// takes one write per execution and none per step; listing reads the
// rows it finds for their status.
const ListIndexName = "list"

// WaitLineIndexName is the sparse waiting GSI of concurrency keys: PK
// wait_key (the key's scope: tenant, pipeline and key value), SK rank
// (the execution's rank: its submission time aged by its priority, fixed
// at submit, so that the index is the key's wait line in rank order),
// present only on rows waiting for a slot of their key
// (status WAITING_KEY). It projects the incarnation besides the keys, so
// that an entry names the full execution id. A keyed execution that
// waits writes it twice (in, out); one that never waits, and every
// execution without a key, never.
const WaitLineIndexName = "waitline"

// WaitIndexName is the first waiting GSI of concurrency keys (PK
// wait_key, SK created_at: submission order), which stacks deployed
// before priorities have. It is kept, and no longer read, because
// CloudFormation can neither change an index's keys nor add one index
// and remove another in one update: a stack deployed with it could not
// be updated to the rank-sorted WaitLineIndexName otherwise. It costs
// what the wait line costs (two index writes per execution that waits
// for its key, none otherwise); a later release drops it.
const WaitIndexName = "wait"

// DefaultDueShards spreads the sweep index over this many partition key
// values so that no single index partition takes every write (see
// DueShardsFor).
const DefaultDueShards = 4

// IndexWritesPerExecution is what one execution writes to the indexes on
// its happy path: the submit puts it in the sweep index and the list
// index, the terminal commit takes it out of the sweep index.
const IndexWritesPerExecution = 3

// DueShardsFor is the number of shards (partition key values) of the
// sweep and the list index a deployment needs for a target of
// stepsPerSecond: every step may be a whole execution (the worst case, a
// one-step pipeline), each execution writes the sweep index twice (the
// busier of the two), and one index partition takes 1,000 write units per
// second, which the shards are sized to use at most half of. Never fewer
// than DefaultDueShards.
func DueShardsFor(stepsPerSecond int) int {
	const perShard = 500 // write units per second, half a partition's 1,000
	const sweepWrites = 2
	return max(DefaultDueShards, (stepsPerSecond*sweepWrites+perShard-1)/perShard)
}

// Names are the physical names of the tables and queues.
type Names struct {
	ExecutionTable string
	PayloadTable   string
	// DeadLetterTable keeps the dead-letter consumer's records.
	DeadLetterTable string
	// EffectTable is the command steps' effect log.
	EffectTable string
	// HistoryTable keeps executions' histories, fed from the execution
	// table's stream.
	HistoryTable string
	WorkQueue    string
	// UrgentQueue is the urgent work queue (queue.urgent-url): work items
	// of urgent executions, received before the work queue's. Empty: none
	// (Queues leaves it out).
	UrgentQueue string
	// PoisonQueue receives work items the work queue gave up on.
	PoisonQueue string
	// DLQQueue receives execution dead-letter envelopes.
	DLQQueue string
	// RejectQueue receives the Item Reject Sink's envelopes (items and
	// streams that steps rejected and went on without).
	RejectQueue string
	// HistoryFailureQueue receives the history event source's failure
	// records: batches of the execution table's stream that the history
	// function could not store after its retries (local-cloud's stream
	// mapping, the deployed stack's on-failure destination).
	HistoryFailureQueue string
}

// DefaultNames are the names used when nothing else is configured.
var DefaultNames = Prefixed("qasync")

// Prefixed names every table and queue after prefix.
func Prefixed(prefix string) Names {
	return Names{
		ExecutionTable:  prefix + "-executions",
		PayloadTable:    prefix + "-execution-payloads",
		DeadLetterTable: prefix + "-dead-letters",
		EffectTable:     prefix + "-effects",
		HistoryTable:    prefix + "-execution-history",
		WorkQueue:       prefix + "-work",
		UrgentQueue:     prefix + "-work-urgent",
		PoisonQueue:     prefix + "-work-poison",
		DLQQueue:        prefix + "-dlq",
		RejectQueue:     prefix + "-item-rejects",
		// Named like the stack's (qasync-<stage>-history-failures).
		HistoryFailureQueue: prefix + "-history-failures",
	}
}

// ExecutionTable is the execution table: PK pk (tenant and the execution
// id's slot, which derives from the idempotency key, so the row is its own
// idempotency record; the incarnation is the attribute ic), the sweep
// index, TTL, and a stream of new and
// old images, which feeds the history table (no request on the write
// path: DynamoDB writes the stream itself).
func ExecutionTable(name string) Table {
	return Table{
		Name:         name,
		PartitionKey: Attr{keyPK, String},
		Indexes: []Index{{
			Name:         DueIndexName,
			PartitionKey: Attr{keyDueShard, Number},
			SortKey:      Attr{keySweepAt, Number},
			// Not the incarnation: an index entry is its row's, and the
			// sweeper reads the row itself by its slot; an index's
			// projection cannot change in a deployed stack.
			NonKeyAttributes: []string{keyPipelineID},
		}, {
			Name:             ListIndexName,
			PartitionKey:     Attr{keyListKey, String},
			SortKey:          Attr{keyCreated, Number},
			NonKeyAttributes: []string{keyPipelineID},
		}, {
			Name:             WaitIndexName,
			PartitionKey:     Attr{keyWaitKey, String},
			SortKey:          Attr{keyCreated, Number},
			NonKeyAttributes: []string{keyIncarnation},
		}, {
			Name:             WaitLineIndexName,
			PartitionKey:     Attr{keyWaitKey, String},
			SortKey:          Attr{keyRank, Number},
			NonKeyAttributes: []string{keyIncarnation},
		}},
		TTLAttribute: keyTTL,
		Stream:       StreamNewAndOldImages,
	}
}

// HistoryTable keeps executions' histories: PK pk (the execution's own
// key), SK pg (a page: the events one stream batch carried for one
// execution, "<created ms>#<first version>" so that an execution's
// pages sort in commit order), TTL.
func HistoryTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{keyPK, String}, SortKey: Attr{keyPage, String}, TTLAttribute: keyTTL}
}

// PayloadTable is the payload chunk table: PK payload_id, SK payload_part, TTL.
func PayloadTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{keyPayloadID, String}, SortKey: Attr{keyPayloadPart, String}, TTLAttribute: keyTTL}
}

// DeadLetterTenantIndexName is the dead-letter table's GSI listing one
// tenant's execution records newest first: PK tenant, SK recorded_ms,
// projecting the record itself (and pipeline and TTL), so that a list
// reads the index alone. Dead letters are rare, so one partition key
// value per tenant is far from a partition's write limit, and the index
// write is off every step's path.
const DeadLetterTenantIndexName = "tenant"

// DeadLetterTable keeps dead-letter records: PK record_id, the record as
// JSON in record, TTL, and the tenant index.
func DeadLetterTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{keyRecordID, String}, TTLAttribute: keyTTL, Indexes: []Index{{
		Name:             DeadLetterTenantIndexName,
		PartitionKey:     Attr{keyRecordTenant, String},
		SortKey:          Attr{keyRecordedAt, Number},
		NonKeyAttributes: []string{keyRecord, keyRecordPipeline, keyTTL},
	}}}
}

// EffectTable is the command steps' effect log: one item per command,
// PK command_id, TTL.
func EffectTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{keyCommandID, String}, TTLAttribute: keyTTL}
}

// Tables lists every table.
func Tables(n Names) []Table {
	return []Table{ExecutionTable(n.ExecutionTable), PayloadTable(n.PayloadTable), DeadLetterTable(n.DeadLetterTable), EffectTable(n.EffectTable),
		HistoryTable(n.HistoryTable)}
}

// Queue settings.
const (
	// Retention keeps messages 14 days, SQS's maximum.
	Retention = 14 * 24 * time.Hour
	// WorkVisibility is the work queue's default visibility timeout.
	WorkVisibility = 60 * time.Second
	// PoisonAfter is how many receives a work item gets before it is moved
	// to the poison queue.
	PoisonAfter = 5
)

// Queues lists every queue: the work queue and the urgent work queue
// (both redriving to the poison queue after the same receives; the
// urgent one only when n names it), the poison queue, the DLQ queue, the
// item reject queue and the history failure queue.
func Queues(n Names) []Queue {
	qs := []Queue{
		{Name: n.PoisonQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.DLQQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.RejectQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.HistoryFailureQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.WorkQueue, VisibilityTimeout: WorkVisibility, Retention: Retention, RedriveTo: n.PoisonQueue, MaxReceiveCount: PoisonAfter},
	}
	if n.UrgentQueue != "" {
		qs = append(qs, Queue{Name: n.UrgentQueue, VisibilityTimeout: WorkVisibility, Retention: Retention, RedriveTo: n.PoisonQueue, MaxReceiveCount: PoisonAfter})
	}
	return qs
}
