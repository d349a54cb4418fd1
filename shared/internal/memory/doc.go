// Package memory is the in-memory provider: the state store
// (NewStateStore), the payload store (NewPayloadStore), the effect log
// (NewEffects) and the dead-letter recorder (NewDeadLetters) held in
// memory, the in-process "event" dispatcher (NewDispatcher) and the log
// dead-letter publisher (NewLogDLQ); Backend offers them to the runtime
// as one backend. They are fast, for local development
// and tests, and not durable: a restart loses everything. Every adapter
// passes the suites of package backendtest (TestConformance).
package memory
