// Command submit is the submit Lambda function of the invoices service:
// the HTTP API (API Gateway) -> submit, status, result, redrive, for the invoices pipelines.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.Submit, invoices.Registry()) }
