// Command worker is the worker Lambda function of this repository's example
// pipelines (lambdafn.Main does the work; a service of your own has a main
// just like this one with its own registry).
package main

import (
	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/worker"
)

func main() { lambdafn.Main(worker.Function, nil, lambdafn.WithPipelines(pipelines.FromConfig)) }
