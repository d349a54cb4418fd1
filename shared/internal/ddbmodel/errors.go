package ddbmodel

import (
	"fmt"
	"net/http"
)

// Error is an error answer as DynamoDB sends it: its code (the __type
// after '#'), message and HTTP status, and for a refused condition the
// item as it was.
type Error struct {
	Code    string
	Message string
	// Status is the HTTP status: 400 for client errors, 500 for
	// InternalServerError.
	Status int
	// Item is the item a ConditionalCheckFailedException carries when the
	// request asked for ReturnValuesOnConditionCheckFailure=ALL_OLD.
	Item Item
	// CancellationReasons are a TransactionCanceledException's.
	CancellationReasons []CancellationReason
}

// CancellationReason is one item's reason in a TransactionCanceledException.
type CancellationReason struct {
	Code    string
	Message string `json:",omitempty"`
	Item    Item   `json:",omitempty"`
}

// Error implements error.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// body is the error's JSON body.
func (e *Error) body() any {
	return struct {
		Type                string               `json:"__type"`
		Message             string               `json:"message"`
		Item                Item                 `json:"Item,omitempty"`
		CancellationReasons []CancellationReason `json:"CancellationReasons,omitempty"`
	}{"com.amazonaws.dynamodb.v20120810#" + e.Code, e.Message, e.Item, e.CancellationReasons}
}

func clientError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Status: http.StatusBadRequest}
}

func validation(format string, args ...any) *Error {
	return clientError("ValidationException", format, args...)
}

func notFound(format string, args ...any) *Error {
	return clientError("ResourceNotFoundException", format, args...)
}

func tableNotFound() *Error {
	return notFound("Requested resource not found")
}

// Throttled is the error DynamoDB answers when a partition or the table
// is over its throughput: ProvisionedThroughputExceededException.
func Throttled() *Error {
	return clientError("ProvisionedThroughputExceededException",
		"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.")
}

// InternalServerError is DynamoDB's 500 answer.
func InternalServerError() *Error {
	return &Error{Code: "InternalServerError", Message: "Internal server error", Status: http.StatusInternalServerError}
}

func conditionFailed(old Item, returnOld bool) *Error {
	e := clientError("ConditionalCheckFailedException", "The conditional request failed")
	if returnOld && old != nil {
		e.Item = old
	}
	return e
}
