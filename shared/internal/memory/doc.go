// Package memstore holds the in-memory implementations of the state store
// and the payload store: fast, for local development and tests, and not
// durable: a restart loses everything.
package memory
