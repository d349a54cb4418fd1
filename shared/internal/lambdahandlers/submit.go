package lambdahandlers

import (
	"context"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/internal/apigw"
)

// Submit is the submit function's handler: API Gateway HTTP API events
// (payload format 2.0) served by h, the httpapi router (Env.HTTPHandler),
// through apigw.Handler. It serves every route of the router (submit,
// status, result, re-drive, health), so one function can back the whole
// API.
func Submit(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return apigw.Handler(h)
}
