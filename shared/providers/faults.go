package providers

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/qasync/qasync/shared/dispatch"
)

// Fault injection, for chaos tests only (keys faults.*, all 0 by
// default). Every injected fault is logged at warn level as event
// "fault_injected" with "fault" naming it: dynamo_throttle, dynamo_500,
// dispatch_duplicate or dispatch_drop.
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
)

// DynamoFaults returns SDK middleware that fails rate (0..1) of the
// DynamoDB request attempts before they are sent, half with a throttling
// error (ProvisionedThroughputExceededException, HTTP 400) and half with
// an InternalServerError (HTTP 500), shaped like the errors the SDK
// deserializes from real responses. It sits in the Finalize step after
// the retry middleware, so each attempt is judged on its own and the
// SDK's retryer backs off and retries injected faults exactly as it does
// real ones; only a call whose every attempt failed reaches the caller.
// Other services' calls pass untouched. Test only: see
// config.Config.FaultDynamoErrorRate.
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
// Test only: see config.Config.FaultDispatchDropRate.
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
