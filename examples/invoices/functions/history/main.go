// Command history is the history Lambda function of the invoices service:
// the execution table's stream -> the executions' history.
package main

import (
	"github.com/qasync/qasync/examples/invoices"
	"github.com/qasync/qasync/shared/lambdafn"
)

func main() { lambdafn.Main(lambdafn.History, invoices.Registry()) }
