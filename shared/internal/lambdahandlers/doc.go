// Package lambdahandlers holds the handlers of the worker, sweeper, dlq
// and history Lambda functions, each a function of the event its source
// delivers (an SQS batch, an EventBridge schedule, a DynamoDB stream
// batch), testable by feeding it the event's JSON as the Lambda runtime
// does (the sample events in events/). The submit function's handler is
// the API Gateway adapter over the HTTP API (package apigw). The
// function packages under shared/lambdafn build each handler on the
// assembled process.
package lambdahandlers
