package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/qasync/qasync/shared/payload"
)

// Limits of fan-out steps, enforced when a registry is built (and, for the
// number of elements, when the map step runs).
const (
	// MaxChildren is the most elements one map step may fan out to; a
	// longer input list fails the step with CodeMapTooLarge (a map of maps
	// goes further).
	MaxChildren = 10000
	// MaxInFlightLimit is the largest MapOptions.MaxInFlight.
	MaxInFlightLimit = 1000
	// DefaultMaxInFlight is the in-flight limit of a map whose
	// MapOptions.MaxInFlight is 0.
	DefaultMaxInFlight = 100
	// MaxNesting is how deep maps may nest: a child's child's child.
	MaxNesting = 3
	// MaxElementBytes is the largest element of a map's input list (each
	// element is a child's input), and the largest input of a Child step.
	MaxElementBytes = 256 << 10
)

// Error codes of fan-out steps.
const (
	// CodeMapTooLarge: the map step's input list holds more than
	// MaxChildren elements (non-retryable).
	CodeMapTooLarge = "map_too_many_children"
	// CodeChildrenFailed: more children failed than the map tolerates
	// (non-retryable; the execution dead-letters).
	CodeChildrenFailed = "children_failed"
	// CodeMapElementTooLarge: an element of the map's input (or a Child
	// step's input) is larger than MaxElementBytes (non-retryable).
	CodeMapElementTooLarge = "map_element_too_large"
	// CodeMapInputInvalid: a map step's input is not a JSON list
	// (non-retryable; the same code as any undecodable input).
	CodeMapInputInvalid = CodeInvalidInput
)

// MapElements splits a map step's input into its elements (a Child
// step's whole input is its one element) and checks the limits: at most
// MaxChildren elements, each at most MaxElementBytes. Its errors are
// non-retryable step errors with CodeMapInputInvalid, CodeMapTooLarge or
// CodeMapElementTooLarge. The runtime calls it when the map step runs,
// and at submit for a pipeline whose first step is a map (its
// CheckInput), so that an input over the limits is refused there (HTTP
// 400).
func (s *Step) MapElements(in payload.Payload) ([]json.RawMessage, error) {
	var elems []json.RawMessage
	if s.Map.One {
		elems = []json.RawMessage{json.RawMessage(in.Data)}
	} else if err := in.DecodeJSON(&elems); err != nil {
		return nil, NonRetryable(CodeMapInputInvalid, fmt.Errorf("step %s: a map's input must be a JSON list: %w", s.Name, err))
	}
	if len(elems) > MaxChildren {
		return nil, NonRetryable(CodeMapTooLarge,
			fmt.Errorf("step %s: %d elements, more than the %d children a map may have", s.Name, len(elems), MaxChildren))
	}
	for i, el := range elems {
		if len(el) > MaxElementBytes {
			return nil, NonRetryable(CodeMapElementTooLarge,
				fmt.Errorf("step %s: element %d is %d bytes, more than the %d a child's input may have", s.Name, i, len(el), MaxElementBytes))
		}
	}
	return elems, nil
}

// MapOptions configure a map step.
type MapOptions struct {
	// MaxInFlight bounds how many of the map's children run at once, 1 to
	// MaxInFlightLimit (0: DefaultMaxInFlight). The others wait PENDING;
	// each child that ends releases the next.
	MaxInFlight int
	// ToleratedFailures is how many children may fail (or be cancelled)
	// with the map step still succeeding.
	ToleratedFailures int
	// ToleratedFailurePercent is the same as a share of the children, 0 to
	// 100; the larger of the two tolerances applies.
	ToleratedFailurePercent float64
}

// MapSpec is what makes a step a fan-out (Map, Child).
type MapSpec struct {
	// Pipeline is the id of the pipeline every child runs (its current
	// definition when the children are created).
	Pipeline string
	// Options are the map's limits and tolerance.
	Options MapOptions
	// One marks Child: the step's whole input is the one child's input,
	// not a list.
	One bool
}

// InFlight is the map's effective in-flight limit.
func (m *MapSpec) InFlight() int {
	if m.Options.MaxInFlight == 0 {
		return DefaultMaxInFlight
	}
	return m.Options.MaxInFlight
}

// Tolerated is how many of total children may fail.
func (m *MapSpec) Tolerated(total int) int {
	byShare := int(m.Options.ToleratedFailurePercent * float64(total) / 100)
	return max(m.Options.ToleratedFailures, byShare)
}

// Map returns a fan-out step: its input is a JSON list, and each element
// runs as a child execution of the pipeline childPipeline (its own row,
// lease, steps, retries and history; its id derived from this
// execution's, this step's index and the element's index, so a re-run of
// the step creates no second child). At most o.MaxInFlight children run
// at once. The execution waits (WAITING_CHILDREN) until every child has
// ended; the step then succeeds with a MapResult (the next step's input:
// declare it as NewStep's input type), or fails with CodeChildrenFailed
// when more children failed than o tolerates.
func Map(name, childPipeline string, o MapOptions) Step {
	s := Step{Name: name, Map: &MapSpec{Pipeline: childPipeline, Options: o}, Run: noRun,
		Accepts: []payload.Encoding{payload.EncodingJSON}}
	s.CheckInput = checkElements(s)
	return s
}

// checkElements is a map step's CheckInput: its limits.
func checkElements(s Step) func(payload.Payload) error {
	return func(in payload.Payload) error {
		_, err := s.MapElements(in)
		return err
	}
}

// Child returns a step that starts one execution of childPipeline with
// this step's input and waits for it to end: a map of one. The next step
// gets a MapResult of one element (MapResult.Decode(ctx, 0, &v) reads the
// child's output); a child that failed fails the step with
// CodeChildrenFailed.
func Child(name, childPipeline string) Step {
	s := Step{Name: name, Map: &MapSpec{Pipeline: childPipeline, Options: MapOptions{MaxInFlight: 1}, One: true}, Run: noRun}
	s.CheckInput = checkElements(s)
	return s
}

// noRun is a map step's Run: the runtime fans out instead of running it.
func noRun(context.Context, StepInfo, payload.Payload) (payload.Payload, error) {
	return payload.Payload{}, NonRetryable("map_not_supported", errors.New("a map step runs only under the qasync runtime"))
}

// IsMap reports whether s is a fan-out step (Map, Child).
func (s *Step) IsMap() bool { return s.Map != nil }

// MapResult is a map step's output: the counts, and every element's
// outcome in input order.
type MapResult struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	// Failed counts children that ended FAILED or DLQ.
	Failed int `json:"failed"`
	// Cancelled counts children that ended CANCELLED.
	Cancelled int `json:"cancelled"`
	// Rejected counts children ended as rejected items (RejectedError):
	// tolerated, and not in Failed.
	Rejected int          `json:"rejected"`
	Elements []MapElement `json:"elements"`
}

// MapElement is one child's outcome.
type MapElement struct {
	Index       int    `json:"index"`
	ExecutionID string `json:"executionId"`
	// Status is the child's terminal status (SUCCEEDED, FAILED, DLQ,
	// CANCELLED).
	Status string `json:"status"`
	// ErrorCode and ErrorMessage are the child's last failure.
	ErrorCode    string `json:"errorCode,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	// Rejected marks a child ended as a rejected item (status FAILED,
	// error code CodeItemRejected).
	Rejected bool `json:"rejected,omitempty"`
	// Output references the child's result (a succeeded child's); read
	// it with MapResult.Output.
	Output *payload.Ref `json:"output,omitempty"`
}

// Output reads element i's output (its child's result) through the
// runtime's payload store, which the step's context carries. An element
// without an output (a child that failed) is an error.
func (r MapResult) Output(ctx context.Context, i int) (payload.Payload, error) {
	if i < 0 || i >= len(r.Elements) {
		return payload.Payload{}, fmt.Errorf("pipeline: map element %d of %d", i, len(r.Elements))
	}
	el := r.Elements[i]
	if el.Output == nil {
		return payload.Payload{}, fmt.Errorf("pipeline: map element %d (%s) has no output", i, el.Status)
	}
	s, _ := ctx.Value(payloadsKey{}).(payload.Store)
	return payload.Read(ctx, s, *el.Output)
}

// Decode reads element i's output as JSON into v.
func (r MapResult) Decode(ctx context.Context, i int, v any) error {
	p, err := r.Output(ctx, i)
	if err != nil {
		return err
	}
	return p.DecodeJSON(v)
}

type payloadsKey struct{}

// WithPayloads returns ctx carrying the payload store MapResult.Output
// reads through. A runtime calls it for every step it runs; a test of a
// join step calls it with its own store.
func WithPayloads(ctx context.Context, s payload.Store) context.Context {
	return context.WithValue(ctx, payloadsKey{}, s)
}

func (s *Step) validateMap() error {
	if !s.IsMap() {
		return nil
	}
	o := s.Map.Options
	switch {
	case s.Map.Pipeline == "":
		return fmt.Errorf("step %s: a map names no child pipeline", s.Name)
	case o.MaxInFlight < 0 || o.MaxInFlight > MaxInFlightLimit:
		return fmt.Errorf("step %s: MaxInFlight %d is outside 1..%d (0: %d)", s.Name, o.MaxInFlight, MaxInFlightLimit, DefaultMaxInFlight)
	case o.ToleratedFailures < 0:
		return fmt.Errorf("step %s: ToleratedFailures %d is negative", s.Name, o.ToleratedFailures)
	case o.ToleratedFailurePercent < 0 || o.ToleratedFailurePercent > 100:
		return fmt.Errorf("step %s: ToleratedFailurePercent %g is outside 0..100", s.Name, o.ToleratedFailurePercent)
	}
	return nil
}

// validateMaps checks the registry's fan-out steps: every child pipeline
// is registered, and no chain of maps nests deeper than MaxNesting (a
// cycle nests without end).
func (r *Registry) validateMaps() error {
	var depth func(id string, seen []string) error
	depth = func(id string, seen []string) error {
		if len(seen) > MaxNesting {
			return fmt.Errorf("pipeline %s: maps nest deeper than %d (%v)", seen[0], MaxNesting, append(seen, id))
		}
		vs, ok := r.byID[id]
		if !ok {
			return fmt.Errorf("pipeline %s: its map step's child pipeline %s is not registered", seen[len(seen)-1], id)
		}
		for _, vid := range vs.order {
			for _, s := range vs.byID[vid].Steps {
				if s.IsMap() {
					if err := depth(s.Map.Pipeline, append(seen[:len(seen):len(seen)], id)); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	for id := range r.byID {
		if err := depth(id, nil); err != nil {
			return err
		}
	}
	return nil
}

// CodeItemRejected is the error code of an execution ended by a
// RejectedError (its terminal reason is "rejected").
const CodeItemRejected = "item_rejected"

// RejectedError ends an execution as a rejected item rather than a
// failure: the runtime commits it FAILED with code CodeItemRejected and
// terminal reason "rejected", and publishes no dead-letter envelope (the
// item went to the Item Reject Sink: reject.Reject publishes it and
// returns this error). A map child that ends so counts as rejected:
// tolerated whatever MapOptions say, and apart from the failures in
// MapResult.
type RejectedError struct {
	// Err is the cause; its message is stored.
	Err error
}

// Error implements error.
func (e *RejectedError) Error() string { return CodeItemRejected + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *RejectedError) Unwrap() error { return e.Err }

// Rejected returns a RejectedError: the step's execution ends as a
// rejected item. Most steps use reject.Reject, which also publishes the
// item to the Item Reject Sink.
func Rejected(cause error) error {
	if cause == nil {
		cause = errors.New("item rejected")
	}
	return &RejectedError{Err: cause}
}

// AsRejected reports whether err is (or wraps) a RejectedError.
func AsRejected(err error) (*RejectedError, bool) {
	var r *RejectedError
	ok := errors.As(err, &r)
	return r, ok
}
