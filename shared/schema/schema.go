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
}

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

// Attribute names of the execution table.
const (
	AttrTenantID          = "tenant_id"
	AttrExecutionID       = "execution_id"
	AttrPipelineID        = "pipeline_id"
	AttrStatus            = "status"
	AttrVersion           = "version"
	AttrStepIndex         = "current_step_index"
	AttrStepName          = "step_name"
	AttrAttempt           = "attempt"
	AttrMaxAttempt        = "max_attempt"
	AttrLeaseOwner        = "lease_owner"
	AttrLeaseExpires      = "lease_expires_epoch_ms"
	AttrNextDue           = "next_due_epoch_ms"
	AttrSweepAt           = "sweep_at_epoch_ms"
	AttrSweeps            = "sweep_count"
	AttrDueShard          = "due_shard"
	AttrPipelineVersion   = "pipeline_version"
	AttrReleases          = "release_count"
	AttrVersionWaitSince  = "version_wait_since_epoch_ms"
	AttrLastTransitionKey = "last_transition_key"
	AttrIdempotencyKey    = "idempotency_key"
	AttrInput             = "input"
	AttrResult            = "result"
	AttrErrorCode         = "error_code"
	AttrErrorMessage      = "error_message"
	AttrTerminalReason    = "terminal_reason"
	AttrDLQPending        = "dlq_pending"
	AttrNote              = "note"
	AttrRedriveCount      = "redrive_count"
	AttrCreated           = "created_epoch_ms"
	AttrUpdated           = "updated_epoch_ms"
	AttrTTL               = "ttl_epoch_s"
	// AttrAwait is the map attribute of the current external await.
	AttrAwait = "await"
)

// Attribute names of the idempotency key table.
const (
	AttrKeyID       = "tenant_execution_key"
	AttrFingerprint = "fingerprint"
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

// DefaultDueShards spreads the sweep index over this many partition key
// values so that no single index partition takes every write.
const DefaultDueShards = 4

// Names are the physical names of the tables and queues.
type Names struct {
	ExecutionTable string
	KeyTable       string
	PayloadTable   string
	// DeadLetterTable keeps the dead-letter consumer's records.
	DeadLetterTable string
	// EffectTable is the command steps' effect log.
	EffectTable string
	WorkQueue   string
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
		KeyTable:        prefix + "-execution-keys",
		PayloadTable:    prefix + "-execution-payloads",
		DeadLetterTable: prefix + "-dead-letters",
		EffectTable:     prefix + "-effects",
		WorkQueue:       prefix + "-work",
		PoisonQueue:     prefix + "-work-poison",
		DLQQueue:        prefix + "-dlq",
		RejectQueue:     prefix + "-item-rejects",
	}
}

// ExecutionTable is the execution table: PK tenant_id, SK execution_id,
// the sweep index, TTL.
func ExecutionTable(name string) Table {
	return Table{
		Name:         name,
		PartitionKey: Attr{AttrTenantID, String},
		SortKey:      Attr{AttrExecutionID, String},
		Indexes: []Index{{
			Name:             DueIndexName,
			PartitionKey:     Attr{AttrDueShard, Number},
			SortKey:          Attr{AttrSweepAt, Number},
			NonKeyAttributes: []string{AttrPipelineID},
		}},
		TTLAttribute: AttrTTL,
	}
}

// KeyTable is the idempotency key table: PK tenant_execution_key, TTL.
func KeyTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{AttrKeyID, String}, TTLAttribute: AttrTTL}
}

// PayloadTable is the payload chunk table: PK payload_id, SK payload_part, TTL.
func PayloadTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{AttrPayloadID, String}, SortKey: Attr{AttrPayloadPart, String}, TTLAttribute: AttrTTL}
}

// Attribute names of the dead-letter table.
const (
	AttrRecordID = "record_id"
	AttrRecord   = "record"
)

// DeadLetterTable keeps dead-letter records: PK record_id, the record as
// JSON in record, TTL.
func DeadLetterTable(name string) Table {
	return Table{Name: name, PartitionKey: Attr{AttrRecordID, String}, TTLAttribute: AttrTTL}
}

// Attribute names of the effect table (besides ttl_epoch_s).
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
	return []Table{ExecutionTable(n.ExecutionTable), KeyTable(n.KeyTable), PayloadTable(n.PayloadTable), DeadLetterTable(n.DeadLetterTable), EffectTable(n.EffectTable)}
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
