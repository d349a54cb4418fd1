// Command worker is the worker Lambda function of the invoices service:
// the SQS work queue -> one step per record, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/worker"
)

func main() { lambdafn.Main(worker.Function, invoices.Registry()) }
