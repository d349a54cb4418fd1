// Package embedded is the embedded durable provider: every seam of the
// runtime in one data directory, in one file, on one process's disk, with
// no server to run. It is the default of qasync serve (make run): the
// data lives in .qasync/ under the working directory (key
// pipeline.orchestrator.embedded.data-dir), and a restart finds every
// execution, finished or resumed.
//
// One DB (Open) holds the execution rows with their sweep and list
// indexes and their history, and the operator's bulk re-drive jobs
// (State: store.Store, store.Lister, store.JobStore, history.Reader),
// the payload parts (Payloads: payload.Store), the effect
// log (Effects: effect.Log), the dead-letter records (DeadLetters:
// deadletter.Recorder, deadletter.Lister and a deadletter.Publisher that
// records), the item reject sink (Rejects: reject.Publisher) and the work
// queue (NewDispatcher: dispatch.Dispatcher). Every adapter passes the
// suites of package backendtest (TestConformance).
//
// The engine is go.etcd.io/bbolt (pure Go: CGO_ENABLED=0 builds keep
// working), chosen by measurement over pebble and SQLite (bench/engines,
// docs/embedded-store.md). Writes go through one
// group-commit loop (commit.go): every write pending when a commit starts
// joins it, and no writer is answered before its commit is fsync'd, so a
// submit's 202 and a step's commit are on disk when acknowledged. The work
// queue is kept in step with the rows in the same transactions (queue.go):
// a commit and its hand-over are one local transaction.
//
// The file carries its format and a schema version (SchemaVersion); a
// newer one is refused (ErrNewerSchema). At open the file's size is
// checked against its meta page (a truncated file), bbolt checks every
// page, and every value's CRC-32C is verified (ErrDamaged); reads verify
// values again. One process holds the directory (bbolt's file lock): a
// second Open fails with ErrLocked, naming the holder. The directory is
// created 0700, and one that other users can write is refused
// (ErrUnsafeDir): they could swap the store's file or the control socket
// for their own. Backup writes a consistent copy while a server runs,
// asking it over the directory's control socket, which only the owner can
// reach (backup.go). The server copies the store to a temporary file in
// the data directory before it sends it, so a stalled backup client never
// holds up the store, at the cost of room for one more copy of the store
// on the data directory's disk while a backup runs.
package embedded
