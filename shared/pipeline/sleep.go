package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// MinSleep is the shortest sleep a Sleep step may declare: shorter waits
// are below the runtime's wake-up precision and are better left out.
const MinSleep = time.Second

// CodeSleepBeyondRetention is the non-retryable error code of a
// SleepUntil step whose wake-up time lies further ahead than the execution
// retention (pipeline.orchestrator.execution-ttl-days).
const CodeSleepBeyondRetention = "sleep_beyond_retention"

// WakeFunc computes when a sleep step's execution wakes up, from the
// step's input and the time the step runs (now). A time at or before now
// wakes it at once. An error fails the step like any step error.
type WakeFunc func(ctx context.Context, info StepInfo, in payload.Payload, now time.Time) (time.Time, error)

// Sleep returns a durable sleep step: the execution waits d, holding no
// worker and no lease, and the next step then runs with this step's input
// (a sleep passes its input through unchanged). d is from MinSleep to the
// execution retention: a longer sleep is refused when the runtime starts.
//
// The wait costs one write (the step's commit, which schedules the next
// step at the wake-up time) and the next step's normal claim. The next
// step runs once, no earlier than the wake-up time less the runtime's
// clock-skew tolerance; it is usually on time to the second (the queue's
// delay and a not-due answer carry the wait), and at worst one sweep
// interval late (the sweeper finds it due if its work item was lost).
// A sleep cannot be a pipeline's last step: nothing would run after it.
func Sleep(name string, d time.Duration) Step {
	s := Step{Name: name, SleepFor: d}
	s.Wake = func(_ context.Context, _ StepInfo, _ payload.Payload, now time.Time) (time.Time, error) {
		return now.Add(d), nil
	}
	s.Run = passThrough
	return s
}

// SleepUntil returns a durable sleep step that waits until the time at
// returns for the step's input (a due date in the document, a time a
// previous step computed), as Sleep otherwise does. A time further ahead
// than the execution retention fails the step non-retryably with
// CodeSleepBeyondRetention (the execution dead-letters); a time already
// past wakes it at once. The input is decoded from JSON unless I is
// payload.Payload; a decode failure is a non-retryable invalid_input.
func SleepUntil[I any](name string, at func(in I) time.Time) Step {
	s := Step{Name: name, Run: passThrough}
	s.Wake = func(_ context.Context, _ StepInfo, raw payload.Payload, _ time.Time) (time.Time, error) {
		var in I
		if p, ok := any(&in).(*payload.Payload); ok {
			*p = raw
		} else if err := decodeInput(name, raw, &in); err != nil {
			return time.Time{}, err
		}
		return at(in), nil
	}
	if _, raw := any(*new(I)).(payload.Payload); !raw {
		s.Accepts = []payload.Encoding{payload.EncodingJSON}
		s.CheckInput = checkDecode[I](name)
	}
	s.inputType = typedInput[I]()
	return s
}

// passThrough is a sleep step's Run: a runtime that runs it as a plain
// step (none here does) passes the input on without waiting.
func passThrough(_ context.Context, _ StepInfo, in payload.Payload) (payload.Payload, error) {
	return in, nil
}

// IsSleep reports whether s is a durable sleep step (Sleep, SleepUntil).
func (s *Step) IsSleep() bool { return s.Wake != nil }

func (s *Step) validateSleep(last bool) error {
	switch {
	case !s.IsSleep():
		return nil
	case last:
		return fmt.Errorf("step %s: a sleep cannot be the last step (nothing would run after it)", s.Name)
	case s.SleepFor != 0 && s.SleepFor < MinSleep:
		return fmt.Errorf("step %s: sleep %s is shorter than %s", s.Name, s.SleepFor, MinSleep)
	}
	return nil
}
