// Command sweeper is the sweeper Lambda function of the invoices service:
// the schedule -> re-dispatch due executions, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/sweeper"
)

func main() { lambdafn.Main(sweeper.Function, invoices.Registry()) }
