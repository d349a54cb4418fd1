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

// Attribute names of the execution table. They are short on purpose:
// DynamoDB counts every attribute name in an item's size, and every
// conditional write of a row costs one write unit per started kilobyte
// of the whole item, so a row kept under 1 KB costs one unit per step.
const (
	// AttrPK is the partition key: the tenant and the execution id,
	// "<tenant>#<executionId>" (neither may contain '#'). One key per
	// execution spreads a tenant's load over every partition; the tenant
	// in the key keeps one tenant from reading another's rows.
	AttrPK                = "pk"
	AttrPipelineID        = "p"
	AttrPipelineVersion   = "pv"
	AttrStatus            = "s"
	AttrVersion           = "v"
	AttrStepIndex         = "si"
	AttrStepName          = "sn"
	AttrAttempt           = "at"
	AttrMaxAttempt        = "ma"
	AttrLeaseOwner        = "lo"
	AttrLeaseExpires      = "le"
	AttrNextDue           = "nd"
	AttrSweepAt           = "sw"
	AttrSweeps            = "sc"
	AttrDueShard          = "ds"
	AttrReleases          = "rl"
	AttrVersionWaitSince  = "vw"
	AttrLastTransitionKey = "lt"
	AttrIdempotencyKey    = "ik"
	AttrFingerprint       = "fp"
	AttrCreateToken       = "ct"
	AttrInput             = "in"
	AttrResult            = "rs"
	AttrErrorCode         = "ec"
	AttrErrorMessage      = "em"
	AttrTerminalReason    = "tr"
	AttrDLQPending        = "dp"
	AttrNote              = "no"
	AttrRedriveCount      = "rc"
	AttrCancelReason      = "cx"
	AttrCancelRequested   = "cq"
	AttrCreated           = "c"
	AttrUpdated           = "u"
	// AttrTTL is the expiry (epoch seconds) of every table's items.
	AttrTTL = "ttl"
	// AttrRecordsExpire is when the records written for the execution
	// expire at the earliest (epoch seconds; see
	// store.Execution.RecordsExpireAt).
	AttrRecordsExpire = "rx"
	// AttrAwait is the map attribute of the current external await.
	AttrAwait = "aw"
	// AttrIncarnation is the incarnation of the row's execution id (the
	// part after store.IncarnationSep; the pk holds the slot), projected
	// into both indexes so that their entries name the full id. Every
	// write of a row is conditional on it: a writer that read one
	// incarnation never changes another.
	AttrIncarnation = "ic"
	// AttrListKey is the list index's partition key: the tenant and a
	// bucket fixed at submit, "<tenant>#<bucket>".
	AttrListKey = "lk"
	// AttrShards is the meta item's record of the largest index shard
	// count rows were written with.
	AttrShards = "n"
)

// Attribute names of the history table (besides pk and ttl).
const (
	// AttrPage is the history table's sort key: a page of one
	// execution's events, "<created ms>#<first version>" (both zero
	// padded), so that an execution's pages sort in commit order and the
	// pages of an earlier execution under the same key (an id reused
	// after its row expired) have a prefix of their own.
	AttrPage = "pg"
	// AttrEvents holds a page's events: binary, compressed JSON (package
	// dynamo's encoding).
	AttrEvents = "ev"
	// AttrLastVersion is the version of a page's last event: a page
	// written again (a stream batch delivered again) is replaced only by
	// one reaching further.
	AttrLastVersion = "lv"
	// AttrSequence is a stream poller's checkpoint: the sequence number of
	// the last stream record of a shard whose events are stored.
	AttrSequence = "sq"
	// AttrShardDone marks a shard the poller read to its end.
	AttrShardDone = "dn"
)

// Attribute names of operator job items (bulk re-drives). They live in
// the execution table beside the rows, under keys no execution can have
// ("#job#<tenant>#<id>", its pages "#job#<tenant>#<id>#<n>", and the one
// "#jobs" item listing the active ones), and outside both indexes: a job
// costs nothing on a step's path.
const (
	// AttrJobActive marks a job a driver still advances.
	AttrJobActive = "ja"
	// AttrJobState is the job's own document.
	AttrJobState = "js"
	// AttrJobIDs holds a job page's ids, one per line.
	AttrJobIDs = "ji"
	// AttrActiveJobs is the "#jobs" item's string set of active jobs,
	// "<tenant>#<id>".
	AttrActiveJobs = "aj"
)

// Attribute names of the payload table.
const (
	AttrPayloadID   = "payload_id"
	AttrPayloadPart = "payload_part"
	AttrData        = "data"
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
	// PoisonQueue receives work items the work queue gave up on.
	PoisonQueue string
	// DLQQueue receives execution dead-letter envelopes.
	DLQQueue string
	// RejectQueue receives the Item Reject Sink's envelopes (items and
	// streams that steps rejected and went on without).
	RejectQueue string
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
		PoisonQueue:     prefix + "-work-poison",
		DLQQueue:        prefix + "-dlq",
		RejectQueue:     prefix + "-item-rejects",
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
		PartitionKey: Attr{AttrPK, String},
		Indexes: []Index{{
			Name:         DueIndexName,
			PartitionKey: Attr{AttrDueShard, Number},
			SortKey:      Attr{AttrSweepAt, Number},
			// Not the incarnation: an index entry is its row's, and the
			// sweeper reads the row itself by its slot; an index's
			// projection cannot change in a deployed stack.
			NonKeyAttributes: []string{AttrPipelineID},
		}, {
			Name:             ListIndexName,
			PartitionKey:     Attr{AttrListKey, String},
			SortKey:          Attr{AttrCreated, Number},
			NonKeyAttributes: []string{AttrPipelineID},
		}},
		TTLAttribute: AttrTTL,
		Stream:       StreamNewAndOldImages,
	}
}

// HistoryTable keeps executions' histories: PK pk (the execution's own
// key), SK pg (a page: the events one stream batch carried for one
// execution, see AttrPage), TTL.
func HistoryTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{AttrPK, String}, SortKey: Attr{AttrPage, String}, TTLAttribute: AttrTTL}
}

// PayloadTable is the payload chunk table: PK payload_id, SK payload_part, TTL.
func PayloadTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{AttrPayloadID, String}, SortKey: Attr{AttrPayloadPart, String}, TTLAttribute: AttrTTL}
}

// Attribute names of the dead-letter table.
const (
	AttrRecordID = "record_id"
	AttrRecord   = "record"
	// AttrRecordTenant is an execution record's tenant, the partition key
	// of the tenant index (absent on poison records, which it does not
	// list).
	AttrRecordTenant = "tenant"
	// AttrRecordedAt is when the record was stored (epoch milliseconds),
	// the tenant index's sort key.
	AttrRecordedAt = "recorded_ms"
	// AttrRecordPipeline is an execution record's pipeline id, projected
	// into the tenant index for its pipeline filter.
	AttrRecordPipeline = "pipeline_id"
)

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
	return Table{Name: name, PartitionKey: Attr{AttrRecordID, String}, TTLAttribute: AttrTTL, Indexes: []Index{{
		Name:             DeadLetterTenantIndexName,
		PartitionKey:     Attr{AttrRecordTenant, String},
		SortKey:          Attr{AttrRecordedAt, Number},
		NonKeyAttributes: []string{AttrRecord, AttrRecordPipeline, AttrTTL},
	}}}
}

// Attribute names of the effect table (besides ttl).
const (
	AttrCommandID     = "command_id"
	AttrEffectState   = "state"
	AttrDispatcher    = "dispatcher"
	AttrDispatches    = "dispatches"
	AttrEffectOutput  = "output"
	AttrEffectVersion = AttrVersion
)

// EffectTable is the command steps' effect log: one item per command,
// PK command_id, TTL.
func EffectTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{AttrCommandID, String}, TTLAttribute: AttrTTL}
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

// Queues lists every queue: the work queue (redriving to the poison
// queue), the poison queue, the DLQ queue and the item reject queue.
func Queues(n Names) []Queue {
	return []Queue{
		{Name: n.PoisonQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.DLQQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.RejectQueue, VisibilityTimeout: WorkVisibility, Retention: Retention},
		{Name: n.WorkQueue, VisibilityTimeout: WorkVisibility, Retention: Retention, RedriveTo: n.PoisonQueue, MaxReceiveCount: PoisonAfter},
	}
}
