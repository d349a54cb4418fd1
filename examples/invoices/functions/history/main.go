// Command history is the history Lambda function of the invoices service:
// the execution table's stream -> the executions' history.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/history"
)

func main() { lambdafn.Main(history.Function, invoices.Registry()) }
