// Command dlq is the dlq Lambda function of the invoices service:
// the DLQ and poison queues -> dead-letter records, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.DLQ, invoices.Registry()) }
