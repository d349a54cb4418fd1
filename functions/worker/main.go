// Command worker is the worker Lambda function: SQS work queue batches ->
// one transition per record (lambdafn.Worker), keeping the lease as the
// time margin before the deadline.
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
	lambda.Start(env.Worker())
}
