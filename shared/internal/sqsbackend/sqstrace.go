// Trace context across the queue hop: a work item's W3C traceparent
// travels as a String message attribute, never in the body.

package sqsbackend

import (
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// AttrTraceParent is the String message attribute carrying a work item's
// W3C traceparent (dispatch.WorkItem.TraceParent); absent when tracing is
// off.
const AttrTraceParent = "traceparent"

// traceParent is the traceparent attribute of a received message.
func traceParent(attrs map[string]types.MessageAttributeValue) string {
	if v, ok := attrs[AttrTraceParent]; ok {
		return aws.ToString(v.StringValue)
	}
	return ""
}

// EventTraceParent is the traceparent attribute of a message of a Lambda
// SQS event ("" when it has none), for the worker function's decode.
func EventTraceParent(m events.SQSMessage) string {
	if v, ok := m.MessageAttributes[AttrTraceParent]; ok && v.StringValue != nil {
		return *v.StringValue
	}
	return ""
}
