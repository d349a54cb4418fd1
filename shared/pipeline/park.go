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
