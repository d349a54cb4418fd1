// Command sweeper is the sweeper Lambda function of this repository's example
// pipelines (lambdafn.Main does the work; a service of your own has a main
// just like this one with its own registry).
package main

import (
	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/sweeper"
)

func main() { lambdafn.Main(sweeper.Function, nil, lambdafn.WithPipelines(pipelines.FromConfig)) }
