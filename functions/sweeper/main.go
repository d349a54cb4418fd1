// Command sweeper is the sweeper Lambda function of this repository's example
// pipelines (lambdafn.Main does the work; a service of your own has a main
// just like this one with its own registry).
package main

import (
	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.Sweeper, nil, lambdafn.WithPipelines(pipelines.FromConfig)) }
