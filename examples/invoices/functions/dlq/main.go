// Command dlq is the dlq Lambda function of the invoices service:
// the DLQ and poison queues -> dead-letter records, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/dlq"
)

func main() { lambdafn.Main(dlq.Function, invoices.Registry()) }
