package dynamo

// The attribute names of the items the DynamoDB provider writes (the
// tables' key and index attributes among them, as package schema defines
// the tables: TestAttributesMatchTheSchema).

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
	// AttrPauseReason, AttrPauseRequested and AttrPausedFrom are an
	// operator pause's (store.Execution.PauseReason, PauseRequestedAt,
	// PausedFrom): absent from every row that was never paused.
	AttrPauseReason    = "xr"
	AttrPauseRequested = "xq"
	AttrPausedFrom     = "xf"
	AttrCreated        = "c"
	AttrUpdated        = "u"
	// AttrTTL is the expiry (epoch seconds) of every table's items.
	AttrTTL = "ttl"
	// AttrRecordsExpire is when the records written for the execution
	// expire at the earliest (epoch seconds; see
	// store.Execution.RecordsExpireAt).
	AttrRecordsExpire = "rx"
	// AttrAwait is the map attribute of the current external await.
	AttrAwait = "aw"
	// AttrParent is a map child's link to its parent (a map attribute,
	// written at create and never changed).
	AttrParent = "pa"
	// AttrChildren is the map a parent waits for (a map attribute).
	AttrChildren = "ch"
	// AttrIncarnation is the incarnation of the row's execution id (the
	// part after store.IncarnationSep; the pk holds the slot), projected
	// into both indexes so that their entries name the full id. Every
	// write of a row is conditional on it: a writer that read one
	// incarnation never changes another.
	AttrIncarnation = "ic"
	// AttrListKey is the list index's partition key: the tenant and a
	// bucket fixed at submit, "<tenant>#<bucket>".
	AttrListKey = "lk"
	// AttrConcurrencyKey is the row's concurrency key (written at create,
	// never changed; absent on rows of pipelines without one).
	AttrConcurrencyKey = "ck"
	// AttrSlotHeld marks a keyed row that holds a slot of its key
	// (store.Execution.SlotHeld; absent when false).
	AttrSlotHeld = "sh"
	// AttrWaitKey is the waiting index's partition key, the scope of the
	// row's concurrency key (store.SlotScope.ID), present only while the
	// row is WAITING_KEY.
	AttrWaitKey = "wk"
	// AttrPriority is the execution's priority (store.Execution.Priority),
	// written at create, never changed.
	AttrPriority = "py"
	// AttrRank is the execution's rank (store.Execution.Rank, epoch ms),
	// written at create, never changed; it is the waiting index's sort
	// key. A keyed row written before priorities gets its CreatedAt here
	// when it begins to wait (store.Execution.WaitRank), so that it is in
	// the index too.
	AttrRank = "rk"
	// AttrSlotHolders is a concurrency key item's map of holders:
	// execution id to the life (redrive count) it acquired in.
	AttrSlotHolders = "kh"
	// AttrRateLimit and AttrRateKey are the row's rate limit name and key
	// (written at create, never changed; absent on rows of pipelines
	// without a rate limit).
	AttrRateLimit = "rn"
	AttrRateKey   = "rky"
	// AttrRateReservedAt and AttrRateReservedVersion are when a step waits
	// for its rate limit's turn and the version that holds its reservation
	// (written only on rows with a rate limit or a wait; absent when none).
	AttrRateReservedAt      = "ra"
	AttrRateReservedVersion = "rq"
	// AttrRateTAT is a rate limit bucket item's theoretical arrival time
	// (Unix nanoseconds).
	AttrRateTAT = "tat"
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
	// AttrEvents holds a page's events: binary, compressed JSON (this
	// package's encoding).
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

// Attribute names of a map's count items. They live in the execution
// table beside the rows, under keys no execution can have
// ("#map#<tenant>#<parent id>#<step>#<group>", the finished set's
// "...#f"), and outside both indexes.
const (
	// AttrEnded is a group item's number set of ended children (the
	// finished set's item: of finished groups).
	AttrEnded = "me"
	// AttrFailed is a group item's number set of children that ended
	// without success.
	AttrFailed = "mf"
)

// Attribute names of the payload table.
const (
	AttrPayloadID   = "payload_id"
	AttrPayloadPart = "payload_part"
	AttrData        = "data"
)

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

// Attribute names of the effect table (besides ttl).
const (
	AttrCommandID     = "command_id"
	AttrEffectState   = "state"
	AttrDispatcher    = "dispatcher"
	AttrDispatches    = "dispatches"
	AttrEffectOutput  = "output"
	AttrEffectVersion = AttrVersion
)
