// Package effect defines the effect log seam: one record per command id,
// which a command step (package command) moves through its states so
// that an external side effect is dispatched once and its output recorded
// and replayed. Every implementation (in memory, DynamoDB) passes the
// effect log suite of package backendtest (Provider.Effects).
//
// Every write is conditional: a record is created only if no live record
// with its command id exists, and a transition happens only if the stored
// version is the one the caller read (optimistic concurrency), so two
// racing runs cannot both move a record to DISPATCHING.
package effect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// State is a command's state in the effect log.
type State string

// States of a command.
const (
	// Pending: recorded, not dispatched yet.
	Pending State = "PENDING"
	// Dispatching: a run is calling (or called) the side effect and has
	// not recorded its outcome. Found by a later run, it means that run
	// died (or lost its lease) after starting the side effect.
	Dispatching State = "DISPATCHING"
	// Succeeded: the side effect happened; Output is what it returned.
	Succeeded State = "SUCCEEDED"
	// FailedRetryable: the last dispatch failed with a retryable error.
	FailedRetryable State = "FAILED_RETRYABLE"
	// Ambiguous: a dispatch's outcome is unknown and could not be
	// reconciled; an operator has to find out what happened.
	Ambiguous State = "AMBIGUOUS"
	// Failed: the last dispatch failed with a non-retryable error.
	Failed State = "FAILED"
)

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	switch s {
	case Pending, Dispatching, Succeeded, FailedRetryable, Ambiguous, Failed:
		return true
	}
	return false
}

// MaxOutputBytes is the largest output a record holds. A command's output
// is meant to be small (an id, a status); it is kept inline in the record.
const MaxOutputBytes = 64 << 10

// Errors every Log returns (possibly wrapped; test with errors.Is).
var (
	// ErrNotFound: no live record with that command id.
	ErrNotFound = errors.New("effect: command not found")
	// ErrConflict: a transition's expected version is not the stored one.
	ErrConflict = errors.New("effect: conflicting concurrent transition")
	// ErrTooLarge: the output is larger than MaxOutputBytes.
	ErrTooLarge = errors.New("effect: command output larger than 64 KiB")
	// ErrInvalid: the record is malformed (no id, unknown state).
	ErrInvalid = errors.New("effect: invalid record")
)

// Failure is the error of a failed or ambiguous dispatch.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Dispatcher identifies the run that moved a record to DISPATCHING.
type Dispatcher struct {
	TenantID    string `json:"tenantId,omitempty"`
	ExecutionID string `json:"executionId,omitempty"`
	StepIndex   int    `json:"stepIndex"`
	// TransitionKey is executionId:stepIndex:attempt of the run.
	TransitionKey string `json:"transitionKey,omitempty"`
	// FencingToken is the execution row version at that run's claim.
	FencingToken int64 `json:"fencingToken"`
}

// Record is one command in the effect log.
//
// Times are kept to the millisecond, except ExpiresAt (the TTL), which is
// kept to the second.
type Record struct {
	// CommandID is the record's key (scoped by the caller; see package command).
	CommandID string
	State     State
	// Version is 1 when created and grows by one with every transition.
	Version int64
	// Dispatcher is the run that last moved the record to DISPATCHING
	// (zero before any dispatch).
	Dispatcher Dispatcher
	// Dispatches counts the moves to DISPATCHING.
	Dispatches int
	// Output is the side effect's output once SUCCEEDED (at most
	// MaxOutputBytes of Data).
	Output payload.Payload
	// Error is set in FAILED_RETRYABLE, FAILED and AMBIGUOUS.
	Error     *Failure
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt is the TTL (zero: kept forever); an expired record reads
	// as ErrNotFound and may be created again.
	ExpiresAt time.Time
}

// Check validates what every write of r needs: an id, a known state and
// an output within MaxOutputBytes.
func (r *Record) Check() error {
	switch {
	case r.CommandID == "":
		return fmt.Errorf("%w: empty command id", ErrInvalid)
	case !r.State.Valid():
		return fmt.Errorf("%w: unknown state %q", ErrInvalid, r.State)
	case len(r.Output.Data) > MaxOutputBytes:
		return fmt.Errorf("command %s: output of %d bytes: %w", r.CommandID, len(r.Output.Data), ErrTooLarge)
	}
	return nil
}

// Log is the effect log seam.
type Log interface {
	// CreateOrGet stores r (its Version is set to 1) unless a live record
	// with r.CommandID exists; it returns the stored record and whether
	// it created it. A live record that expires before r.ExpiresAt is kept
	// until then (its expiry moves, nothing else; the returned record says
	// so): a command's record lives as long as the execution that may run
	// its step again.
	CreateOrGet(ctx context.Context, r Record) (rec Record, created bool, err error)

	// Get reads one record; a missing or expired one is ErrNotFound.
	Get(ctx context.Context, commandID string) (Record, error)

	// Transition replaces the record's mutable fields (State, Dispatcher,
	// Dispatches, Output, Error, UpdatedAt) with next's and sets its
	// version to expectVersion+1, if and only if the stored version equals
	// expectVersion. CommandID is the one of next; CreatedAt and ExpiresAt
	// are not changed. When the condition fails it returns the current
	// record and ErrConflict, so that the loser of a race sees the
	// winner's state; a missing record is ErrNotFound.
	Transition(ctx context.Context, expectVersion int64, next Record) (Record, error)
}
