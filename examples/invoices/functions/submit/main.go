// Command submit is the submit Lambda function of the invoices service:
// the HTTP API (API Gateway) -> submit, status, result, redrive, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/submit"
)

func main() { lambdafn.Main(submit.Function, invoices.Registry()) }
