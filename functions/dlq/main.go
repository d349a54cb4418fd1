// Command dlq is the dead-letter Lambda function: the DLQ and the work
// queue's poison queue -> dead-letter records, alerts and metrics
// (lambdafn.DLQ).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() {
	env, err := lambdafn.Boot(context.Background(), nil, lambdafn.WithPipelines(pipelines.FromConfig), lambdafn.RequireRecorder())
	if err != nil {
		os.Exit(1) // Boot logged boot_failed
	}
	lambda.Start(lambdafn.DLQ(env.Set.Runtime, env.Set.Recorder, env.Set.Metrics, env.Logger))
}
