// Package dlq is the dlq Lambda function: batches of the dead-letter
// queue and of the work queue's poison queue become durable dead-letter
// records, alerts (event dead_letter_recorded) and metrics. Its main:
//
//	func main() { lambdafn.Main(dlq.Function, myapp.Registry()) }
//
// Boot fails with lambdafn.ErrNoRecorder on a backend that keeps no
// dead-letter records.
package dlq

import (
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/internal/role"
)

// Function is the dlq function, for lambdafn.Main and lambdafn.Boot.
const Function lambdafn.Function = "dlq"

func init() {
	role.Register(string(Function), role.Role{
		Handler: func(p *wiring.Process) (any, error) {
			if p.Seams.Recorder == nil {
				return nil, lambdafn.ErrNoRecorder
			}
			return lambdahandlers.DLQ(p.Runtime, p.Seams.Recorder, p.Metrics, p.Logger), nil
		},
	})
}
