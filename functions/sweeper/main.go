// Command sweeper is the sweeper Lambda function: EventBridge schedule ->
// sweeps of the due-work index (lambdafn.Sweeper).
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
	lambda.Start(lambdafn.Sweeper(env.Set.Runtime, lambdafn.DefaultSweepMargin, env.Logger))
}
