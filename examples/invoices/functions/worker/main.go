// Command worker is the worker Lambda function of the invoices service:
// the SQS work queue -> one step per record, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.Worker, invoices.Registry()) }
