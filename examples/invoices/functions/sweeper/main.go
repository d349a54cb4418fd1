// Command sweeper is the sweeper Lambda function of the invoices service:
// the schedule -> re-dispatch due executions, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.Sweeper, invoices.Registry()) }
