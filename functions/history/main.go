// Command history is the history Lambda function of this repository's
// example pipelines: the execution table's stream -> the executions'
// history (lambdafn.Main does the work; a service of your own has a main
// just like this one with its own registry).
package main

import (
	"github.com/qasync/qasync/pipelines"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.History, nil, lambdafn.WithPipelines(pipelines.FromConfig)) }
