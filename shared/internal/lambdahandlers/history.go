package lambdahandlers

import (
	"context"
	"errors"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/internal/dynamo"
)

// StreamApplier is the history that a stream's batches feed:
// *dynamo.History implements it (one history page per execution per
// batch, idempotent under redelivery).
type StreamApplier interface {
	Apply(ctx context.Context, changes []dynamo.Change) error
}

// History is the history function's handler for batches of the execution
// table's stream (NEW_AND_OLD_IMAGES): the batch's records, in stream
// order, become history pages (StreamApplier.Apply).
//
// When some pages cannot be written, it reports the earliest record of an
// execution whose page failed as the batch's one item failure
// (ReportBatchItemFailures): Lambda keeps the records before it and
// retries from it; the records after it that were stored are stored again
// without doubling an event. The event is logged as history_batch_failed;
// the handler's error is always nil.
func History(h StreamApplier, log *slog.Logger) func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	if h == nil {
		panic("lambdahandlers: History: nil StreamApplier")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		changes := make([]dynamo.Change, len(ev.Records))
		for i, r := range ev.Records {
			changes[i] = dynamo.Change{Sequence: r.Change.SequenceNumber, Old: FromLambdaImage(r.Change.OldImage), New: FromLambdaImage(r.Change.NewImage)}
		}
		err := h.Apply(ctx, changes)
		var ae *dynamo.ApplyError
		switch {
		case err == nil:
			log.LogAttrs(ctx, slog.LevelDebug, "history_batch_applied", slog.String("event", "history_batch_applied"), slog.Int("records", len(changes)))
			return events.DynamoDBEventResponse{}, nil
		case errors.As(err, &ae) && ae.First >= 0 && ae.First < len(changes):
			log.LogAttrs(ctx, slog.LevelWarn, "history_batch_failed", slog.String("event", "history_batch_failed"),
				slog.Int("records", len(changes)), slog.String("retry_from", changes[ae.First].Sequence), slog.String("error", err.Error()))
			return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: changes[ae.First].Sequence}}}, nil
		}
		// Nothing says which record: retry the whole batch.
		log.LogAttrs(ctx, slog.LevelWarn, "history_batch_failed", slog.String("event", "history_batch_failed"),
			slog.Int("records", len(changes)), slog.String("error", err.Error()))
		var out events.DynamoDBEventResponse
		if len(changes) > 0 {
			out.BatchItemFailures = []events.DynamoDBBatchItemFailure{{ItemIdentifier: changes[0].Sequence}}
		}
		return out, nil
	}
}

// FromLambdaImage converts a stream image of a Lambda DynamoDB event to
// DynamoDB attribute values.
func FromLambdaImage(img map[string]events.DynamoDBAttributeValue) map[string]types.AttributeValue {
	if img == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(img))
	for k, v := range img {
		out[k] = fromLambda(v)
	}
	return out
}

func fromLambda(v events.DynamoDBAttributeValue) types.AttributeValue {
	switch v.DataType() {
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}
	case events.DataTypeBinary:
		return &types.AttributeValueMemberB{Value: v.Binary()}
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}
	case events.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}
	case events.DataTypeMap:
		return &types.AttributeValueMemberM{Value: FromLambdaImage(v.Map())}
	case events.DataTypeList:
		l := make([]types.AttributeValue, len(v.List()))
		for i, e := range v.List() {
			l[i] = fromLambda(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}

// ToLambdaImage converts DynamoDB attribute values to the image of a
// Lambda DynamoDB event (FromLambdaImage's inverse): what an event source
// mapping puts in a stream record's Keys, NewImage and OldImage (the
// local harness builds its events with it, after dynamo.FromStreamImage).
func ToLambdaImage(img map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if img == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(img))
	for k, v := range img {
		out[k] = toLambda(v)
	}
	return out
}

func toLambda(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value)
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value)
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(ToLambdaImage(v.Value))
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = toLambda(e)
		}
		return events.NewListAttribute(l)
	}
	return events.NewNullAttribute()
}
