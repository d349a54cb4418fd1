package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// Fault injection, for chaos tests only (keys faults.*, all 0 by
// default: package testkeys reads them). Every injected fault is logged at warn level as event
// "fault_injected" with "fault" naming it: dynamo_throttle, dynamo_500,
// dispatch_duplicate, dispatch_drop, commit_before_write,
// commit_after_write or dlq_publish.
const (
	// FaultDynamoThrottle: a DynamoDB attempt failed with an injected
	// ProvisionedThroughputExceededException (HTTP 400).
	FaultDynamoThrottle = "dynamo_throttle"
	// FaultDynamo500: a DynamoDB attempt failed with an injected
	// InternalServerError (HTTP 500).
	FaultDynamo500 = "dynamo_500"
	// FaultDispatchDuplicate: a work item was sent twice.
	FaultDispatchDuplicate = "dispatch_duplicate"
	// FaultDispatchDrop: a work item was not sent at all.
	FaultDispatchDrop = "dispatch_drop"
	// FaultCommitBeforeWrite: a step's commit failed as unavailable
	// before it was written.
	FaultCommitBeforeWrite = "commit_before_write"
	// FaultCommitAfterWrite: a step's commit was written and then
	// reported as unavailable (its outcome unknown to the runtime).
	FaultCommitAfterWrite = "commit_after_write"
	// FaultDLQPublish: a dead-letter publish failed (a DLQ outage).
	FaultDLQPublish = "dlq_publish"
)

// FaultyStore wraps a store.Store for chaos tests: a share CommitRate of
// the leased commits (Update under a lease: a step's outcome) fail with
// store.ErrUnavailable, half before the write and half after it landed,
// so that the runtime must retry some and resolve others by reading the
// row back. Test only: see testkeys.Faults.CommitErrorRate.
type FaultyStore struct {
	store.Store
	// CommitRate is the probability, 0..1.
	CommitRate float64
	// Logger receives the fault_injected events (nil: discarded).
	Logger *slog.Logger
}

// Update implements store.Store.
func (f *FaultyStore) Update(ctx context.Context, g store.Guard, next store.Execution) (store.Execution, error) {
	if g.LeaseOwner == "" || rand.Float64() >= f.CommitRate {
		return f.Store.Update(ctx, g, next)
	}
	fault := FaultCommitBeforeWrite
	if rand.IntN(2) == 0 {
		fault = FaultCommitAfterWrite
	}
	logFault(ctx, f.Logger, fault, slog.String("execution_id", g.Key.ExecutionID), slog.String("tenant", g.Key.TenantID))
	if fault == FaultCommitAfterWrite {
		if _, err := f.Store.Update(ctx, g, next); err != nil {
			return store.Execution{}, err
		}
	}
	return store.Execution{}, fmt.Errorf("injected %s: %w", fault, store.ErrUnavailable)
}

// FaultyDLQ wraps a deadletter.Publisher for chaos tests: every publish
// fails until OutageUntil (a shared wall-clock time), and a share Rate of
// them after it. Test only: see testkeys.Faults.DLQErrorRate and
// DLQOutageUntil.
type FaultyDLQ struct {
	Inner deadletter.Publisher
	// Rate is the probability, 0..1, of a failed publish after the outage.
	Rate float64
	// OutageUntil ends the outage (zero: none).
	OutageUntil time.Time
	// Logger receives the fault_injected events (nil: discarded).
	Logger *slog.Logger
}

// Publish implements deadletter.Publisher.
func (f *FaultyDLQ) Publish(ctx context.Context, env deadletter.Envelope) error {
	if time.Now().Before(f.OutageUntil) || rand.Float64() < f.Rate {
		logFault(ctx, f.Logger, FaultDLQPublish, slog.String("execution_id", env.ExecutionID), slog.String("tenant", env.TenantID))
		return errors.New("injected fault: the DLQ is unavailable")
	}
	return f.Inner.Publish(ctx, env)
}

// logFault logs one injected fault.
func logFault(ctx context.Context, log *slog.Logger, fault string, attrs ...slog.Attr) {
	if log == nil {
		return
	}
	log.LogAttrs(ctx, slog.LevelWarn, "fault_injected", append([]slog.Attr{slog.String("event", "fault_injected"), slog.String("fault", fault)}, attrs...)...)
}

// OffsetClock is the system clock shifted by a fixed offset: a worker
// whose clock is skewed (chaos tests: faults.clock-offset-ms).
type OffsetClock time.Duration

// Now implements clock.Clock.
func (o OffsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }

// DynamoFaults returns SDK middleware that fails rate (0..1) of the
// DynamoDB request attempts before they are sent, half with a throttling
// error (ProvisionedThroughputExceededException, HTTP 400) and half with
// an InternalServerError (HTTP 500), shaped like the errors the SDK
// deserializes from real responses. It sits in the Finalize step after
// the retry middleware, so each attempt is judged on its own and the
// SDK's retryer backs off and retries injected faults exactly as it does
// real ones; only a call whose every attempt failed reaches the caller.
// Other services' calls pass untouched. Test only: see
// testkeys.Faults.DynamoErrorRate.
func DynamoFaults(rate float64, log *slog.Logger) func(*middleware.Stack) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var seq atomic.Int64
	return func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("qasyncFaultInjection",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if rate <= 0 || middleware.GetServiceID(ctx) != "DynamoDB" || rand.Float64() >= rate {
					return next.HandleFinalize(ctx, in)
				}
				op := middleware.GetOperationName(ctx)
				id := "qasync-fault-" + strconv.FormatInt(seq.Add(1), 10)
				fault, status := FaultDynamoThrottle, http.StatusBadRequest
				var apiErr error = &types.ProvisionedThroughputExceededException{Message: aws.String("injected fault (" + id + ")")}
				if rand.IntN(2) == 0 {
					fault, status = FaultDynamo500, http.StatusInternalServerError
					apiErr = &types.InternalServerError{Message: aws.String("injected fault (" + id + ")")}
				}
				log.LogAttrs(ctx, slog.LevelWarn, "fault_injected", slog.String("event", "fault_injected"),
					slog.String("fault", fault), slog.String("operation", op))
				resp := &smithyhttp.Response{Response: &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody}}
				return middleware.FinalizeOutput{}, middleware.Metadata{}, &awshttp.ResponseError{
					ResponseError: &smithyhttp.ResponseError{Response: resp, Err: apiErr}, RequestID: id,
				}
			}), middleware.After)
	}
}

// FaultyDispatcher wraps a dispatch.Dispatcher for chaos tests: each
// message is dropped (not sent, yet reported as accepted, as if the
// queue lost it) with probability DropRate, or else sent twice with
// probability DuplicateRate. The runtime must recover from both: a
// duplicate is refused by the OCC claim, a drop is found by the sweeper.
// Test only: see testkeys.Faults.DispatchDropRate.
type FaultyDispatcher struct {
	// Inner is the real dispatcher.
	Inner dispatch.Dispatcher
	// DuplicateRate and DropRate are probabilities, 0..1.
	DuplicateRate, DropRate float64
	// Logger receives the fault_injected events (nil: discarded).
	Logger *slog.Logger
}

var _ dispatch.Dispatcher = (*FaultyDispatcher)(nil)

// Dispatch implements dispatch.Dispatcher.
func (f *FaultyDispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	log := f.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := make([]dispatch.Message, 0, len(msgs))
	for _, m := range msgs {
		fault := ""
		switch r := rand.Float64(); {
		case r < f.DropRate:
			fault = FaultDispatchDrop
		case r < f.DropRate+f.DuplicateRate:
			fault = FaultDispatchDuplicate
			out = append(out, m, m)
		default:
			out = append(out, m)
		}
		if fault != "" {
			log.LogAttrs(ctx, slog.LevelWarn, "fault_injected", slog.String("event", "fault_injected"),
				slog.String("fault", fault), slog.String("execution_id", m.Item.ExecutionID),
				slog.String("tenant", m.Item.TenantID))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return f.Inner.Dispatch(ctx, out...)
}

// faultClock is the process's clock: the system clock, shifted by
// faults.clock-offset-ms when set (logging every configured fault once,
// as event test_faults_enabled).
func faultClock(f testkeys.Faults, log *slog.Logger) clock.Clock {
	if !f.Any() {
		return clock.System{}
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "test_faults_enabled", slog.String("event", "test_faults_enabled"),
		slog.Float64("dynamo_error_rate", f.DynamoErrorRate),
		slog.Float64("dispatch_duplicate_rate", f.DispatchDuplicateRate),
		slog.Float64("dispatch_drop_rate", f.DispatchDropRate),
		slog.Float64("commit_error_rate", f.CommitErrorRate),
		slog.Float64("dlq_error_rate", f.DLQErrorRate),
		slog.Int64("dlq_outage_until_ms", f.DLQOutageUntil),
		slog.Int64("clock_offset_ms", f.ClockOffset.Milliseconds()))
	if f.ClockOffset != 0 {
		return OffsetClock(f.ClockOffset) // a skewed worker
	}
	return clock.System{}
}

// faultAWS adds DynamoFaults to the session's clients when
// faults.dynamo-error-rate is set.
func faultAWS(f testkeys.Faults, sess *awsclient.Session, log *slog.Logger) error {
	if f.DynamoErrorRate <= 0 {
		return nil
	}
	if sess == nil {
		return fmt.Errorf("%s: this process has no AWS clients to fail", config.FullKey("faults.dynamo-error-rate"))
	}
	sess.AddAPIOptions(DynamoFaults(f.DynamoErrorRate, log))
	return nil
}

// faultSeams wraps the runtime's dispatcher, store and dead-letter
// publisher in the faults f sets.
func faultSeams(f testkeys.Faults, log *slog.Logger, d engine.Deps) engine.Deps {
	if f.DispatchDuplicateRate > 0 || f.DispatchDropRate > 0 {
		d.Dispatcher = &FaultyDispatcher{Inner: d.Dispatcher, DuplicateRate: f.DispatchDuplicateRate, DropRate: f.DispatchDropRate, Logger: log}
	}
	if f.CommitErrorRate > 0 {
		d.Store = &FaultyStore{Store: d.Store, CommitRate: f.CommitErrorRate, Logger: log}
	}
	if f.DLQErrorRate > 0 || f.DLQOutageUntil > 0 {
		d.DeadLetter = &FaultyDLQ{Inner: d.DeadLetter, Rate: f.DLQErrorRate, OutageUntil: time.UnixMilli(f.DLQOutageUntil), Logger: log}
	}
	return d
}
