// Package deadletter defines the dead-letter publisher seam: where an
// execution that cannot finish is reported for an operator. Publication
// is at-least-once (the sweeper retries a publish that failed or was cut
// short by a crash), so consumers must treat envelopes idempotently, keyed
// by TransitionKey. Implementations (log, SQS) pass the dead-letter
// publisher suite of package backendtest (Provider.DeadLetters).
package deadletter

import (
	"context"
	"time"
)

// Envelope describes one dead-lettered execution. It never carries
// payload bytes.
type Envelope struct {
	TenantID    string `json:"tenantId"`
	ExecutionID string `json:"executionId"`
	PipelineID  string `json:"pipelineId"`
	StepIndex   int    `json:"stepIndex"`
	StepName    string `json:"stepName"`
	// TransitionKey is executionId:stepIndex:attempt of the failed attempt.
	TransitionKey string `json:"transitionKey"`
	// TerminalReason is retry_exhausted or non_retryable.
	TerminalReason string `json:"terminalReason"`
	ErrorCode      string `json:"errorCode"`
	ErrorMessage   string `json:"errorMessage"`
	// RetriesObserved is how many retries the failed step had (attempt-1).
	RetriesObserved int       `json:"retriesObserved"`
	FailedAt        time.Time `json:"failedAt"`
}

// Publisher publishes dead-letter envelopes.
type Publisher interface {
	// Publish reports env. A nil error means it is stored durably where
	// the implementation promises durability.
	Publish(ctx context.Context, env Envelope) error
}
