package pipeline

import (
	"errors"
	"fmt"
	"time"
)

// CodeRemoteOutcomeUnknown is the error code recorded on an execution
// parked as REMOTE_OUTCOME_UNKNOWN.
const CodeRemoteOutcomeUnknown = "remote_outcome_unknown"

// OutcomeUnknownError is returned by a step whose call to a remote worker
// reached its deadline without an answer (package remote). The runtime
// does not retry it: it parks the execution as REMOTE_OUTCOME_UNKNOWN
// (never claimed, swept or retried) until an operator, having confirmed
// that the remote invocation can make no more effects, re-drives it.
type OutcomeUnknownError struct {
	// Protocol is the remote protocol, e.g. "rest".
	Protocol string
	// Target names the remote worker (its URL without query or user info).
	Target string
	// Deadline is the request deadline that passed.
	Deadline time.Duration
	// Elapsed is how long the call ran.
	Elapsed time.Duration
}

// Error implements error.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("%s call to %s reached its %s deadline after %s; its outcome is unknown",
		e.Protocol, e.Target, e.Deadline, e.Elapsed.Round(time.Millisecond))
}

// AsOutcomeUnknown reports whether err is (or wraps) an OutcomeUnknownError.
func AsOutcomeUnknown(err error) (*OutcomeUnknownError, bool) {
	var ou *OutcomeUnknownError
	ok := errors.As(err, &ou)
	return ou, ok
}

// Error codes of external awaits (package await).
const (
	// CodeAwaitTimeout: the await's timeout passed before its completion
	// arrived; the await step failed (and retries under its policy).
	CodeAwaitTimeout = "AWAIT_TIMEOUT"
	// CodeAwaitTokenSecretMissing: a step awaited but the runtime has no
	// resume-token secret configured, so nobody could complete the await.
	CodeAwaitTokenSecretMissing = "await_resume_token_secret_missing"
)

// AwaitError is returned by a step that suspends until an external party
// completes an await (package await builds it). The runtime parks the
// execution as WAITING_EXTERNAL; the completion payload becomes the next
// step's input (or the result, after the last step).
type AwaitError struct {
	// ID is the await's id (AwaitID of the step attempt).
	ID string
	// Timeout, when positive, fails the step with AWAIT_TIMEOUT if no
	// completion arrived that long after the execution was parked.
	Timeout time.Duration
}

// Error implements error.
func (e *AwaitError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("awaiting external completion %s (timeout %s)", e.ID, e.Timeout)
	}
	return fmt.Sprintf("awaiting external completion %s", e.ID)
}

// AsAwait reports whether err is (or wraps) an AwaitError.
func AsAwait(err error) (*AwaitError, bool) {
	var ae *AwaitError
	ok := errors.As(err, &ae)
	return ae, ok
}
