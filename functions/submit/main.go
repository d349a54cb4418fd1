// Command submit is the submit Lambda function: API Gateway HTTP API
// (payload format 2.0) -> the httpapi router (lambdafn.Submit).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() {
	env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig))
	if err != nil {
		os.Exit(1) // Boot logged boot_failed
	}
	lambda.Start(lambdafn.Submit(env.HTTPHandler()))
}
