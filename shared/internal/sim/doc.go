// Package sim is qasync's deterministic simulator: one seed drives a whole
// deployment (submitters, workers, the sweeper, the dead-letter consumer,
// operators, partners completing awaits, deploys) over virtual time, with
// faults at every point the crash table names and time itself as a fault
// (retention, TTL lag, long retries and parks), and checks the runtime's
// promises after every event and at the end.
//
// It runs the real engine (engine.Runtime: Submit, Process, Sweep, Cancel,
// Redrive, CompleteAwait, bulk re-drives), the real step kinds (plain,
// command, await) and the real Lambda handlers (the worker's SQS batch
// handler, the sweeper's, the dead-letter consumer's) on each store qasync
// ships: memory, embedded (bbolt, with its own work queue) and DynamoDB
// (the real adapter against an in-process model of the DynamoDB API).
//
// # Determinism
//
// A run happens inside a testing/synctest bubble: time is virtual and
// advances only when every goroutine is blocked, so a month passes in
// seconds and the same seed gives the same run. The main loop acts at
// event times drawn from the seed; anything that may take virtual time (a
// worker invocation, a sweep) runs in a goroutine of its own, and after
// every action the loop waits until all of them are blocked again, so
// only one goroutine runs at a time. Event times carry random nanoseconds
// so that no two background timers (lease renewals, slow steps) fall on
// the same instant. Randomness inside the runtime (create tokens, worker
// ids) comes from the seed too.
//
// # Faults
//
// Process crashes at any I/O of a worker (the call, or the call and then
// the crash with the answer lost), crashes inside a step before and after
// its side effect, commit failures before and after the write, lost,
// duplicated and delayed work items, paused workers (a frozen process
// whose lease lapses, then wakes), clock skew per worker, full disks
// (embedded), stalled backup readers (embedded), rolling deploys of a
// new pipeline version, and the operator and partner events: cancels,
// single and bulk re-drives, single and bulk pauses and resumes
// (pause.go), await completions on time, late, repeated and
// with another execution's token, and idempotency keys reused after the
// retention, with and without a client key.
//
// # Invariants
//
// Checked after every event and at quiescence (see invariants.go): every
// accepted execution ends terminal or visibly parked within a stated
// bound; no execution vanishes while it is live; no transition is
// committed twice; no effect, dead letter, await or token of one execution
// satisfies another's; no checkpoint is unreadable while its row lives;
// the history is complete and in order; nothing is stored for a refused
// request; a paused execution is never claimed, holds no lease, is not
// swept and does not expire while paused; no work item is poisoned unless a worker crashed or failed on
// it; every committed step attempt has its OpenTelemetry span in its
// execution's trace, under the receive and the dispatch of the work item
// that brought it (every process traces into one in-memory exporter of
// package tracing, its ids drawn from the seed; spans.go).
package sim
