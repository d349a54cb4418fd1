// Package reject is the Item Reject Sink: the step-level
// recover-and-continue failure channel (configuration keys
// pipeline.item-reject.*), apart from the execution-level dead-letter
// queue. A step that processes a list of items rejects one item, or the
// whole stream, and goes on:
//
//	for _, it := range batch.Items {
//		if err := validate(it); err != nil {
//			if err := reject.RejectItem(ctx, info, it, err); err != nil {
//				return Out{}, err // publish-failure policy FAIL_PIPELINE
//			}
//			continue
//		}
//		...
//	}
//
// Each rejection becomes an Envelope (tenant, execution, pipeline, step,
// scope ITEM or STREAM, attempt, transition key, error, the SHA-256
// fingerprint of the item's bytes, the item count of a stream, and the
// item's bytes only with include-payload) published through a Publisher:
// the log (default), memory or SQS (package sqsreject). Publication is
// at-least-once: a retried step rejects its items again, with the same
// fingerprints, so consumers deduplicate by (execution, step index,
// fingerprint).
//
// When a publish fails, the Sink's Policy decides: Continue (default)
// logs reject_publish_failed and the step goes on; FailPipeline returns a
// retryable step error (code item_reject_publish_failed) for the step to
// return.
package reject

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// Scope says what was rejected.
type Scope string

// Scopes.
const (
	// ScopeItem: one item of the step's input.
	ScopeItem Scope = "ITEM"
	// ScopeStream: the step's whole stream of items.
	ScopeStream Scope = "STREAM"
)

// Policy is what happens when a publish fails.
type Policy string

// Publish-failure policies (key pipeline.item-reject.publish-failure-policy).
const (
	// Continue logs the failure (event reject_publish_failed) and the
	// step goes on. The default.
	Continue Policy = "CONTINUE"
	// FailPipeline fails the step retryably with CodePublishFailed.
	FailPipeline Policy = "FAIL_PIPELINE"
)

// CodePublishFailed is the retryable step error code under FailPipeline.
const CodePublishFailed = "item_reject_publish_failed"

// CodeRejected is the error code of an envelope whose cause is not a
// *pipeline.Error (whose own code is kept).
const CodeRejected = "item_rejected"

// Envelope describes one rejected item or stream.
type Envelope struct {
	TenantID    string `json:"tenantId"`
	ExecutionID string `json:"executionId"`
	PipelineID  string `json:"pipelineId"`
	StepIndex   int    `json:"stepIndex"`
	StepName    string `json:"stepName"`
	Scope       Scope  `json:"scope"`
	Attempt     int    `json:"attempt"`
	// TransitionKey is executionId:stepIndex:attempt of the rejecting run.
	TransitionKey string `json:"transitionKey"`
	ErrorCode     string `json:"errorCode"`
	ErrorMessage  string `json:"errorMessage"`
	// Fingerprint is the hex SHA-256 of the item's bytes (ITEM only).
	Fingerprint string `json:"fingerprint,omitempty"`
	// ItemCount is the number of items of a rejected stream (STREAM only).
	ItemCount int `json:"itemCount,omitempty"`
	// Payload is the item's bytes, only with include-payload (ITEM only).
	Payload    []byte    `json:"payload,omitempty"`
	RejectedAt time.Time `json:"rejectedAt"`
}

// Publisher publishes envelopes: the seam every provider implements and
// the reject suite of package backendtest (Provider.Rejects) checks.
type Publisher interface {
	// Publish reports env; a nil error means the provider accepted it.
	Publish(ctx context.Context, env Envelope) error
}

// Sink turns rejections into envelopes and publishes them; it implements
// pipeline.RejectSink, which the runtime hands steps as
// pipeline.StepInfo.Rejects.
type Sink struct {
	Publisher Publisher
	// IncludePayload puts the item's bytes in ITEM envelopes.
	IncludePayload bool
	// Policy defaults to Continue.
	Policy Policy
	// Logger receives reject_publish_failed (defaults to the step's
	// logger, then slog.Default()).
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

var _ pipeline.RejectSink = (*Sink)(nil)

// RejectItem implements pipeline.RejectSink.
func (s *Sink) RejectItem(ctx context.Context, info pipeline.StepInfo, item []byte, cause error) error {
	env := s.envelope(info, ScopeItem, cause)
	sum := sha256.Sum256(item)
	env.Fingerprint = hex.EncodeToString(sum[:])
	if s.IncludePayload {
		env.Payload = slices.Clone(item)
	}
	return s.publish(ctx, info, env)
}

// RejectStream implements pipeline.RejectSink.
func (s *Sink) RejectStream(ctx context.Context, info pipeline.StepInfo, itemCount int, cause error) error {
	env := s.envelope(info, ScopeStream, cause)
	env.ItemCount = itemCount
	return s.publish(ctx, info, env)
}

func (s *Sink) envelope(info pipeline.StepInfo, scope Scope, cause error) Envelope {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	code, msg := CodeRejected, "rejected"
	if cause != nil {
		msg = cause.Error()
		var pe *pipeline.Error
		if errors.As(cause, &pe) {
			code, msg, _ = pipeline.Classify(cause)
		}
	}
	return Envelope{
		TenantID: info.TenantID, ExecutionID: info.ExecutionID, PipelineID: info.PipelineID,
		StepIndex: info.StepIndex, StepName: info.StepName, Scope: scope, Attempt: info.Attempt,
		TransitionKey: info.TransitionKey, ErrorCode: code, ErrorMessage: msg, RejectedAt: now().UTC(),
	}
}

func (s *Sink) publish(ctx context.Context, info pipeline.StepInfo, env Envelope) error {
	err := s.Publisher.Publish(ctx, env)
	if err == nil {
		return nil
	}
	if s.Policy == FailPipeline {
		return pipeline.Retryable(CodePublishFailed, fmt.Errorf("publish %s reject of step %s: %w", env.Scope, env.StepName, err))
	}
	log := s.Logger
	if log == nil {
		log = info.Logger
	}
	if log == nil {
		log = slog.Default()
	}
	log.LogAttrs(ctx, slog.LevelError, EventPublishFailed, slog.String("event", EventPublishFailed),
		slog.String("execution_id", env.ExecutionID), slog.String("step", env.StepName),
		slog.String("scope", string(env.Scope)), slog.String("fingerprint", env.Fingerprint),
		slog.String("transition_key", env.TransitionKey), slog.String("error", err.Error()),
		slog.String("decision", "continue"))
	return nil
}

// EventPublishFailed is the log event of a failed publish under Continue.
const EventPublishFailed = "reject_publish_failed"

// RejectItem reports item as rejected by the running step and returns nil
// (go on) or a step error to return (policy FailPipeline). The item is
// serialized as the step's output would be: a payload.Payload or []byte
// as is, anything else as JSON; its fingerprint is the SHA-256 of those
// bytes. Without a sink in info (info.Rejects nil) the envelope is logged.
func RejectItem(ctx context.Context, info pipeline.StepInfo, item any, cause error) error {
	var data []byte
	switch v := item.(type) {
	case payload.Payload:
		data = v.Data
	case []byte:
		data = v
	default:
		b, err := json.Marshal(item)
		if err != nil {
			return pipeline.NonRetryable("item_reject_encode", fmt.Errorf("encode rejected item: %w", err))
		}
		data = b
	}
	return sinkOf(info).RejectItem(ctx, info, data, cause)
}

// RejectStream reports the step's whole stream of itemCount items as
// rejected, as RejectItem.
func RejectStream(ctx context.Context, info pipeline.StepInfo, itemCount int, cause error) error {
	return sinkOf(info).RejectStream(ctx, info, itemCount, cause)
}

func sinkOf(info pipeline.StepInfo) pipeline.RejectSink {
	if info.Rejects != nil {
		return info.Rejects
	}
	log := info.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sink{Publisher: NewLog(log)}
}

// Log is the log provider: each envelope is one log event
// (EventPublished) at warn level. It is only as durable as the log.
type Log struct{ log *slog.Logger }

// EventPublished is the log event of an envelope of the log provider.
const EventPublished = "item_rejected"

// NewLog returns a Log publisher writing to log.
func NewLog(log *slog.Logger) *Log { return &Log{log: log} }

// Publish implements Publisher.
func (l *Log) Publish(ctx context.Context, env Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	attrs := []slog.Attr{
		slog.String("event", EventPublished),
		slog.String("tenant", env.TenantID), slog.String("execution_id", env.ExecutionID),
		slog.String("pipeline", env.PipelineID), slog.Int("step_index", env.StepIndex), slog.String("step", env.StepName),
		slog.String("scope", string(env.Scope)), slog.Int("attempt", env.Attempt),
		slog.String("transition_key", env.TransitionKey),
		slog.String("error_code", env.ErrorCode), slog.String("error_message", env.ErrorMessage),
		slog.String("fingerprint", env.Fingerprint), slog.Int("item_count", env.ItemCount),
		slog.Time("rejected_at", env.RejectedAt),
	}
	if env.Payload != nil {
		// Only with include-payload, which the operator chose.
		attrs = append(attrs, slog.Any("payload", env.Payload))
	}
	l.log.LogAttrs(ctx, slog.LevelWarn, EventPublished, attrs...)
	return nil
}

// Memory is the memory provider: envelopes kept in the process, for
// tests and local runs. Safe for concurrent use.
type Memory struct {
	mu   sync.Mutex
	envs []Envelope
	// Err, when set, fails every Publish (to test publish-failure
	// policies); failLeft more fail with failErr.
	err      error
	failLeft int
	failErr  error
}

// NewMemory returns an empty Memory publisher.
func NewMemory() *Memory { return &Memory{} }

// Publish implements Publisher.
func (m *Memory) Publish(ctx context.Context, env Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	if m.failLeft > 0 {
		m.failLeft--
		return m.failErr
	}
	env.Payload = slices.Clone(env.Payload)
	m.envs = append(m.envs, env)
	return nil
}

// FailWith makes every later Publish fail with err (nil: succeed again).
func (m *Memory) FailWith(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

// FailTimes makes the next n Publish calls fail with err and the ones
// after them succeed: a sink that is down for a number of calls, however
// long they take.
func (m *Memory) FailTimes(n int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failLeft, m.failErr = n, err
}

// Envelopes returns what was published so far, in order.
func (m *Memory) Envelopes() []Envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.envs)
}

// Reject publishes item to the Item Reject Sink, as RejectItem, and
// returns the error that ends the step's execution as a rejected item
// (pipeline.RejectedError): FAILED with code item_rejected and reason
// rejected, no dead letter. It is how one item of a per-item flow (a map's
// child) leaves the flow: its parent counts it as rejected, tolerated.
// When the publish fails under FAIL_PIPELINE, that retryable error is
// returned instead: the step is retried and rejects the item again.
//
//	if p.Amount <= 0 {
//		return Out{}, reject.Reject(ctx, info, p, errors.New("amount must be positive"))
//	}
func Reject(ctx context.Context, info pipeline.StepInfo, item any, cause error) error {
	if err := RejectItem(ctx, info, item, cause); err != nil {
		return err
	}
	return pipeline.Rejected(cause)
}
