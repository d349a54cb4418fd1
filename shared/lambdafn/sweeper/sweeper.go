// Package sweeper is the sweeper Lambda function: on its EventBridge
// schedule, sweeps of the sweep index until drained or out of time, then
// the active bulk re-drive jobs. Its main:
//
//	func main() { lambdafn.Main(sweeper.Function, myapp.Registry()) }
//
// Its result is a JSON object of the invocation's counts: sweeps, due,
// redispatched, deadLettersPublished, awaitsTimedOut, cancelled,
// rescheduled, failed, more and redriveJobs.
package sweeper

import (
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/internal/role"
)

// Function is the sweeper function, for lambdafn.Main and lambdafn.Boot.
const Function lambdafn.Function = "sweeper"

func init() {
	role.Register(string(Function), role.Role{
		Handler: func(p *wiring.Process) (any, error) {
			return lambdahandlers.Sweeper(p.Runtime, lambdahandlers.DefaultSweepMargin, p.Logger), nil
		},
	})
}
