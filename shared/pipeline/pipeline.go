// Package pipeline defines pipelines of typed Go steps and the registry a
// binary serves them from.
//
// A pipeline is a named, ordered list of steps. A step is a Go function
// with typed input and output, (de)serialized as JSON by default; a step
// whose input or output type is payload.Payload receives or returns the raw
// payload (raw bytes, protobuf) untouched. Each step is one transition,
// committed on its own: after a crash only the step that was running runs
// again, starting from the previous step's committed output.
package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/payload"
)

// StepInfo is what a running step knows about its transition.
type StepInfo struct {
	ExecutionID string
	TenantID    string
	PipelineID  string
	StepName    string
	StepIndex   int
	// Attempt counts from 1 for each step.
	Attempt int
	// TransitionKey is executionId:stepIndex:attempt.
	TransitionKey string
	// FencingToken is the row version at claim: it grows with every claim,
	// so a downstream system can refuse writes from a stale worker.
	FencingToken int64
	// IdempotencyKey is stable across every attempt of this step of this
	// execution: pass it to downstream calls so a retry or a takeover does
	// not repeat a business effect.
	IdempotencyKey string
	// Logger carries execution_id, tenant, pipeline, step and attempt.
	Logger *slog.Logger
	// Effects is the effect log that command steps (package command)
	// record their side effects in; nil when the runtime has none.
	Effects effect.Log
	// ExpiresAt is when the execution expires (its TTL): records kept for
	// it, such as a command's effect record, expire with it.
	ExpiresAt time.Time
	// Rejects is the Item Reject Sink (package reject has the helpers
	// steps call: reject.RejectItem, reject.RejectStream); nil when the
	// runtime has none (the helpers then log the envelope).
	Rejects RejectSink
	// Objects is the object store that a pipeline's Output is published
	// to (the runtime's: file:// and s3://); nil when the runtime has
	// none.
	Objects ObjectStore
	// ResumeToken returns the resume token of an await this step starts
	// (package await: await.Token); nil when the runtime has no
	// resume-token secret configured.
	ResumeToken func(awaitID string) string
	// OutputBucket is the deployment's output bucket (config key
	// pipeline.orchestrator.output.bucket), the value of the {outputBucket}
	// placeholder of Output.To; empty when none is configured.
	OutputBucket string
}

// RejectSink takes the items (or whole streams) a step rejects and goes
// on without: the step-level recover-and-continue failure channel, apart
// from the execution-level dead-letter queue. Package reject implements
// it; steps call reject.RejectItem and reject.RejectStream.
type RejectSink interface {
	// RejectItem reports one rejected item (its serialized bytes). A
	// non-nil error is a step error to return (publish-failure policy
	// FAIL_PIPELINE); under CONTINUE a failed publish is logged and nil
	// is returned.
	RejectItem(ctx context.Context, info StepInfo, item []byte, cause error) error
	// RejectStream reports a rejected stream of itemCount items, as
	// RejectItem.
	RejectStream(ctx context.Context, info StepInfo, itemCount int, cause error) error
}

// ObjectStore writes and reads objects addressed by URI (file:///path,
// s3://bucket/key): the runtime's Terminal Object Publish, and a step
// reading the object its input names (StepInfo.Objects).
type ObjectStore interface {
	// Put writes the object; the same URI with the same bytes is
	// idempotent.
	Put(ctx context.Context, uri string, data []byte, contentType string) error
	// Get reads the object; a missing one is an error matching
	// fs.ErrNotExist (errors.Is).
	Get(ctx context.Context, uri string) ([]byte, error)
}

// StepFunc is the untyped form every step is reduced to.
type StepFunc func(ctx context.Context, info StepInfo, in payload.Payload) (payload.Payload, error)

// Step is one stage of a pipeline.
type Step struct {
	// Name is unique within its pipeline. Together with the order of the
	// steps it makes the pipeline's version (Pipeline.VersionID), and it
	// keys the step's idempotency key and command ids: renaming a step
	// makes a new definition.
	Name string
	// Retry overrides the runtime's retry policy for this step when set.
	Retry *RetryPolicy
	// AwaitTimeout is the longest an await step may keep the execution
	// parked (package await sets it from its Spec): the runtime refuses to
	// start when it exceeds the execution retention, which could not keep
	// the parked execution that long.
	AwaitTimeout time.Duration
	// Wake, when set, makes the step a durable sleep (Sleep, SleepUntil):
	// the runtime does not run Run but schedules the next step, with this
	// step's input, at the time Wake returns.
	Wake WakeFunc
	// SleepFor is a Sleep step's fixed duration (zero for SleepUntil): the
	// runtime refuses to start when it exceeds the execution retention.
	SleepFor time.Duration
	// Map, when set, makes the step a fan-out (Map, Child): the runtime
	// does not run Run but starts child executions and waits for them.
	Map *MapSpec
	// Run executes the step.
	Run StepFunc
	// CheckInput, when set, is called at submit when the step is its
	// pipeline's first: an input it refuses is answered with HTTP 400
	// (invalid-input, the error's message as the detail) and nothing is
	// stored, instead of an execution that dead-letters at once. NewStep
	// sets it to the step's own JSON decode; Map and Child to their
	// limits (MapElements). Its message must not quote the input.
	CheckInput func(in payload.Payload) error
	// Accepts lists the payload encodings the step's input may have; nil
	// means any. NewStep sets it to JSON when the input type is not
	// payload.Payload (the step decodes JSON), so that a submit of
	// another encoding to a pipeline starting with it is refused at once
	// (HTTP 415) instead of stored and dead-lettered by the step.
	Accepts []payload.Encoding

	inputType reflect.Type // I of NewStep and SleepUntil; see InputType
}

// InputType is the Go type the step decodes its JSON input into: the I of
// NewStep[I, O] and SleepUntil[I] (and of command.Step[I, O], built on
// NewStep). It is nil for a step that takes any input (I is
// payload.Payload, json.RawMessage or an interface type) and for steps
// built otherwise (Map, Child, Sleep, and steps assembled from a Step
// literal, such as await and remote steps). The HTTP API
// describes a pipeline's input with the JSON Schema of its first step's
// InputType.
func (s *Step) InputType() reflect.Type { return s.inputType }

// The kinds of step Kind reports.
const (
	// KindStep runs a function: NewStep, and the await, command and
	// remote steps.
	KindStep = "step"
	// KindSleep is a durable sleep (Sleep, SleepUntil).
	KindSleep = "sleep"
	// KindMap fans out to one child execution per element (Map).
	KindMap = "map"
	// KindChild starts one child execution and waits for it (Child).
	KindChild = "child"
)

// Kind says how the runtime runs the step: KindMap, KindChild, KindSleep
// or KindStep.
func (s *Step) Kind() string {
	switch {
	case s.Map != nil && s.Map.One:
		return KindChild
	case s.Map != nil:
		return KindMap
	case s.Wake != nil:
		return KindSleep
	}
	return KindStep
}

// typedInput is the InputType of a step whose input is an I.
func typedInput[I any]() reflect.Type {
	t := reflect.TypeFor[I]()
	if t == reflect.TypeFor[payload.Payload]() || t == reflect.TypeFor[json.RawMessage]() || t.Kind() == reflect.Interface {
		return nil
	}
	return t
}

// StepOption configures a step built by NewStep.
type StepOption func(*Step)

// WithRetry overrides the retry policy for one step.
func WithRetry(p RetryPolicy) StepOption {
	return func(s *Step) { s.Retry = &p }
}

// NewStep adapts a typed function into a Step. Input is decoded from JSON
// (a decode failure is a non-retryable "invalid_input" error) and output
// encoded to JSON, unless I or O is payload.Payload, which pass through.
func NewStep[I, O any](name string, fn func(ctx context.Context, info StepInfo, in I) (O, error), opts ...StepOption) Step {
	s := Step{Name: name, Run: func(ctx context.Context, info StepInfo, raw payload.Payload) (payload.Payload, error) {
		var in I
		if p, ok := any(&in).(*payload.Payload); ok {
			*p = raw
		} else if err := decodeInput(name, raw, &in); err != nil {
			return payload.Payload{}, err
		}
		out, err := fn(ctx, info, in)
		if err != nil {
			return payload.Payload{}, err
		}
		if p, ok := any(out).(payload.Payload); ok {
			return p, nil
		}
		return payload.JSON(out)
	}}
	if _, raw := any(*new(I)).(payload.Payload); !raw {
		s.Accepts = []payload.Encoding{payload.EncodingJSON}
		s.CheckInput = checkDecode[I](name)
	}
	s.inputType = typedInput[I]()
	for _, o := range opts {
		o(&s)
	}
	return s
}

// CodeInvalidInput is the non-retryable error code of an input a step
// cannot decode.
const CodeInvalidInput = "invalid_input"

// checkDecode is the CheckInput of a step that decodes its JSON input
// into an I.
func checkDecode[I any](name string) func(payload.Payload) error {
	return func(raw payload.Payload) error {
		var in I
		return decodeInput(name, raw, &in)
	}
}

// decodeInput decodes a JSON input into v, or returns the step's
// invalid_input error. The JSON decoder's messages name types, fields
// and offsets, never the input's values.
func decodeInput(step string, raw payload.Payload, v any) error {
	if err := raw.DecodeJSON(v); err != nil {
		return NonRetryable(CodeInvalidInput, fmt.Errorf("step %s: decode input: %w", step, err))
	}
	return nil
}

// Pipeline is a named, ordered list of steps.
//
// Every execution is bound at submit to the definition it was submitted
// for (VersionID: a fingerprint of Version and the ordered step names), and
// only a worker serving that very definition runs its steps. To change a
// pipeline's steps without stranding executions in flight, register the
// old definition with Draining set beside the new one until they finish.
type Pipeline struct {
	ID    string
	Steps []Step
	// Version is an optional label of this definition ("v2"), shown in
	// status and part of VersionID: change it to make a new definition
	// even when the step names stay the same (their meaning changed).
	Version string
	// Draining marks an older definition kept only to finish the
	// executions bound to it: new submissions use the pipeline's one
	// definition that is not draining.
	Draining bool
	// Output, when set, publishes the terminal output (the last step's
	// output) to an object before the execution is marked SUCCEEDED
	// (Terminal Object Publish).
	Output *Output
	// Concurrency, when set, limits how many of the pipeline's executions
	// run at once per key taken from their input (ConcurrencyKey).
	Concurrency *Concurrency
	// RateLimit, when set, limits how fast the pipeline's steps that call
	// a downstream start, per key, across all workers (RateLimitKey).
	RateLimit *RateLimit
	// Priority is the priority of the pipeline's executions submitted
	// without one: HighestPriority (1, most urgent) to LowestPriority (5);
	// 0 means DefaultPriority (3).
	Priority int

	versionID string // set by NewRegistry
}

// AcceptsEncoding reports whether the pipeline takes an input of encoding
// e: whether its first step accepts it (Step.Accepts).
func (p *Pipeline) AcceptsEncoding(e payload.Encoding) bool {
	if len(p.Steps) == 0 || p.Steps[0].Accepts == nil {
		return true
	}
	return slices.Contains(p.Steps[0].Accepts, e)
}

// VersionID identifies this definition of the pipeline: Version (when set)
// and the first 12 hex digits of a SHA-256 over Version and the ordered
// step names, e.g. "v2-3f9a1c0b2d4e" or "3f9a1c0b2d4e". Executions store
// it (pipeline_version) at submit.
func (p *Pipeline) VersionID() string {
	if p.versionID != "" {
		return p.versionID
	}
	h := sha256.New()
	for _, part := range append([]string{p.Version}, stepNames(p.Steps)...) {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	id := hex.EncodeToString(h.Sum(nil))[:12]
	if p.Version != "" {
		id = p.Version + "-" + id
	}
	return id
}

func stepNames(steps []Step) []string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Name
	}
	return names
}

// Output is a pipeline's Terminal Object Publish target. After the last
// step produced its output (whatever kind of step it is: an await step's
// output is its completion), the runtime writes the output bytes with its
// ObjectStore (StepInfo.Objects) to To, expanded for the execution, and
// only then commits SUCCEEDED. A failed write is a retryable step error
// (CodeOutputPublishFailed): the step retries and dead-letters like any
// other. A replay writes the same key again (the object always holds the
// output that is committed, since the write precedes each commit).
type Output struct {
	// To is the target URI template: file:///abs/dir/{executionId}.json
	// for local runs, s3://bucket/prefix/{tenant}/{pipelineId}/{executionId}.json
	// in AWS. It must contain {executionId}, so that each execution has
	// its own object; {tenant} and {pipelineId} are optional.
	// {outputBucket} is the deployment's output bucket (config key
	// pipeline.orchestrator.output.bucket, which the CDK stack sets with
	// its outputBucket setting): s3://{outputBucket}/results/{tenant}/{pipelineId}/{executionId}.json
	// works in every stage. A process whose registry has such a pipeline
	// refuses to start without the key (providers.Open); a runtime built
	// otherwise fails the publish retryably, naming the key.
	To string
}

// OutputBucketPlaceholder is the placeholder of Output.To replaced by the
// configured output bucket (StepInfo.OutputBucket).
const OutputBucketPlaceholder = "{outputBucket}"

// OutputBucketKey is the configuration key that sets the output bucket.
const OutputBucketKey = "pipeline.orchestrator.output.bucket"

// UsesOutputBucket reports whether To contains {outputBucket}.
func (o Output) UsesOutputBucket() bool { return strings.Contains(o.To, OutputBucketPlaceholder) }

// CodeOutputPublishFailed is the retryable error code of a failed
// Terminal Object Publish.
const CodeOutputPublishFailed = "output_publish_failed"

// Target expands To for the execution of info.
func (o Output) Target(info StepInfo) string {
	return strings.NewReplacer("{tenant}", info.TenantID, "{pipelineId}", info.PipelineID, "{executionId}", info.ExecutionID,
		OutputBucketPlaceholder, info.OutputBucket).Replace(o.To)
}

func (o Output) validate() error {
	if !strings.HasPrefix(o.To, "file:///") && !strings.HasPrefix(o.To, "s3://") {
		return fmt.Errorf("output.to %q: want file:///path or s3://bucket/key", o.To)
	}
	if !strings.Contains(o.To, "{executionId}") {
		return fmt.Errorf("output.to %q: must contain {executionId}", o.To)
	}
	return nil
}

// Publish writes out to the expanded target with info.Objects. Its
// errors are retryable step errors with code CodeOutputPublishFailed.
func (o Output) Publish(ctx context.Context, info StepInfo, out payload.Payload) error {
	if o.UsesOutputBucket() && info.OutputBucket == "" {
		return Retryable(CodeOutputPublishFailed,
			fmt.Errorf("publish output to %s: %s is not set (the {outputBucket} placeholder has no value)", o.To, OutputBucketKey))
	}
	target := o.Target(info)
	if info.Objects == nil {
		return Retryable(CodeOutputPublishFailed, fmt.Errorf("publish output to %s: the runtime has no object store", target))
	}
	if err := info.Objects.Put(ctx, target, out.Data, out.ContentType); err != nil {
		return Retryable(CodeOutputPublishFailed, fmt.Errorf("publish output to %s: %w", target, err))
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidID reports whether id is a well-formed pipeline id: 1-128 of
// letters, digits, '.', '_' and '-', starting with a letter or digit.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Validate checks the pipeline's id, steps, names and retry overrides.
func (p *Pipeline) Validate() error {
	if !ValidID(p.ID) {
		return fmt.Errorf("pipeline %q: invalid id", p.ID)
	}
	if len(p.Steps) == 0 {
		return fmt.Errorf("pipeline %s: no steps", p.ID)
	}
	if len(p.Steps) > MaxSteps {
		return fmt.Errorf("pipeline %s: %d steps, more than the %d a pipeline may have", p.ID, len(p.Steps), MaxSteps)
	}
	seen := map[string]bool{}
	for i, s := range p.Steps {
		switch {
		case s.Name == "":
			return fmt.Errorf("pipeline %s: step %d has no name", p.ID, i)
		case seen[s.Name]:
			return fmt.Errorf("pipeline %s: duplicate step name %q", p.ID, s.Name)
		case s.Run == nil:
			return fmt.Errorf("pipeline %s: step %s has no function", p.ID, s.Name)
		}
		if err := s.validateSleep(i == len(p.Steps)-1); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.ID, err)
		}
		if err := s.validateMap(); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.ID, err)
		}
		if s.Retry != nil {
			if err := s.Retry.Validate(); err != nil {
				return fmt.Errorf("pipeline %s: step %s: %w", p.ID, s.Name, err)
			}
		}
		seen[s.Name] = true
	}
	if p.Output != nil {
		if err := p.Output.validate(); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.ID, err)
		}
	}
	if p.Concurrency != nil {
		if err := p.Concurrency.validate(); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.ID, err)
		}
	}
	if p.RateLimit != nil {
		if err := p.RateLimit.validate(p.Steps); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.ID, err)
		}
	}
	if p.Priority != 0 {
		if err := CheckPriority(p.Priority); err != nil {
			return fmt.Errorf("pipeline %s: %w", p.ID, err)
		}
	}
	return nil
}

// Registry holds the pipelines a binary serves: for each id, the one
// definition new submissions use and any draining older ones. It is
// read-only after construction and safe for concurrent use.
type Registry struct {
	byID map[string]*versions
}

type versions struct {
	current *Pipeline
	byID    map[string]*Pipeline // VersionID -> definition
	order   []string             // VersionIDs, as registered
}

// MustRegistry is NewRegistry for a main or a package variable: it panics
// when a pipeline is invalid, which a test of the registry catches before
// any deployment (a Lambda main has nowhere better to report it).
func MustRegistry(ps ...Pipeline) *Registry {
	r, err := NewRegistry(ps...)
	if err != nil {
		panic("pipeline: " + err.Error())
	}
	return r
}

// NewRegistry validates and registers pipelines. Several definitions of
// one id may be registered (a migration): their VersionIDs must differ and
// exactly one must not be Draining. The caller's pipelines are copied.
func NewRegistry(ps ...Pipeline) (*Registry, error) {
	r := &Registry{byID: map[string]*versions{}}
	for i := range ps {
		p := ps[i]
		if err := p.Validate(); err != nil {
			return nil, err
		}
		p.Steps = append([]Step(nil), p.Steps...)
		p.versionID = ""
		p.versionID = p.VersionID()
		vs := r.byID[p.ID]
		if vs == nil {
			vs = &versions{byID: map[string]*Pipeline{}}
			r.byID[p.ID] = vs
		}
		if _, dup := vs.byID[p.versionID]; dup {
			return nil, fmt.Errorf("pipeline %s version %s registered twice", p.ID, p.versionID)
		}
		if !p.Draining {
			if vs.current != nil {
				return nil, fmt.Errorf("pipeline %s: versions %s and %s both take new submissions; mark the older one Draining", p.ID, vs.current.versionID, p.versionID)
			}
			vs.current = &p
		}
		vs.byID[p.versionID] = &p
		vs.order = append(vs.order, p.versionID)
	}
	for id, vs := range r.byID {
		if vs.current == nil {
			return nil, fmt.Errorf("pipeline %s: every registered version is Draining; one must take new submissions", id)
		}
	}
	if err := r.validateMaps(); err != nil {
		return nil, err
	}
	return r, nil
}

// Get returns the definition of id that new submissions use.
func (r *Registry) Get(id string) (*Pipeline, bool) {
	vs, ok := r.byID[id]
	if !ok {
		return nil, false
	}
	return vs.current, true
}

// Version returns the definition of id whose VersionID is version; an
// empty version (a row written before versions existed) means the current
// definition.
func (r *Registry) Version(id, version string) (*Pipeline, bool) {
	vs, ok := r.byID[id]
	if !ok {
		return nil, false
	}
	if version == "" {
		return vs.current, true
	}
	p, ok := vs.byID[version]
	return p, ok
}

// Versions lists the VersionIDs of id this registry serves, in
// registration order.
func (r *Registry) Versions(id string) []string {
	vs, ok := r.byID[id]
	if !ok {
		return nil
	}
	return append([]string(nil), vs.order...)
}

// IDs lists the registered pipeline ids, sorted.
func (r *Registry) IDs() []string {
	ids := make([]string, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// All returns every registered definition: each id's in registration
// order, ids sorted.
func (r *Registry) All() []*Pipeline {
	var all []*Pipeline
	for _, id := range r.IDs() {
		for _, v := range r.byID[id].order {
			all = append(all, r.byID[id].byID[v])
		}
	}
	return all
}

// Error is a step failure with a code and a retry decision. Plain errors
// returned by steps are retryable with code "step_failed".
type Error struct {
	// Code is a short machine-readable code, stored on the execution.
	Code string
	// Retryable false sends the execution to the DLQ at once.
	Retryable bool
	// Err is the cause; its message is stored (never put payload bytes in it).
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err == nil {
		return e.Code
	}
	return e.Code + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// NonRetryable marks err as a failure that retrying cannot fix.
func NonRetryable(code string, err error) error { return &Error{Code: code, Err: err} }

// Retryable gives err a code and keeps it retryable.
func Retryable(code string, err error) error { return &Error{Code: code, Retryable: true, Err: err} }

// HandBackError is returned by a step that did not start its work and
// asks the runtime to hand the step back for another worker (for example
// too little time is left in a Lambda invocation for a remote call to
// finish). The attempt is not used up; a hand-back that repeats counts
// toward the runtime's release limit and then fails the attempt with
// Code, so it always ends visibly.
type HandBackError struct {
	// Code names the reason (stored on the execution when the release
	// limit turns the hand-back into a failure).
	Code string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *HandBackError) Error() string { return e.Code + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *HandBackError) Unwrap() error { return e.Err }

// HandBack returns a HandBackError.
func HandBack(code string, err error) error { return &HandBackError{Code: code, Err: err} }

// AsHandBack reports whether err is (or wraps) a HandBackError.
func AsHandBack(err error) (*HandBackError, bool) {
	var h *HandBackError
	ok := errors.As(err, &h)
	return h, ok
}

// Limits of a pipeline and its steps, enforced when a registry is built
// (MaxSteps) and when a step's output is stored (MaxOutputBytes).
const (
	// MaxSteps is the most steps a pipeline may have.
	MaxSteps = 1000
	// MaxOutputBytes is the largest output a step may return (it is
	// stored in the payload store, in chunks when it does not fit the
	// row); a larger one fails the step with CodeOutputTooLarge.
	MaxOutputBytes = 32 << 20
	// CodeOutputTooLarge: the step's output is larger than MaxOutputBytes
	// (non-retryable).
	CodeOutputTooLarge = "output_too_large"
)

// Default error codes assigned by Classify.
const (
	CodeStepFailed = "step_failed"
	CodeStepPanic  = "step_panic"
)

// Classify returns the code, message and retry decision for a step error.
func Classify(err error) (code, message string, retryable bool) {
	if re, ok := AsRejected(err); ok {
		return CodeItemRejected, re.Err.Error(), false
	}
	var pe *Error
	if errors.As(err, &pe) {
		msg := pe.Code
		if pe.Err != nil {
			msg = pe.Err.Error()
		}
		return pe.Code, msg, pe.Retryable
	}
	return CodeStepFailed, err.Error(), true
}
