// Package history is the history Lambda function: batches of the
// execution table's DynamoDB stream become the executions' history (pages
// of events in the history table). Its main:
//
//	func main() { lambdafn.Main(history.Function, myapp.Registry()) }
//
// Boot fails with lambdafn.ErrNoHistory on a backend whose history is not
// fed from that stream (state-provider other than dynamo).
package history

import (
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/dynamo"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/internal/role"
)

// Function is the history function, for lambdafn.Main and lambdafn.Boot.
const Function lambdafn.Function = "history"

func init() {
	role.Register(string(Function), role.Role{
		// The function publishes the lifecycle events of the batches it
		// reads, after their history (the commit is the outbox).
		Parts: func(o *wiring.Options, sess *awsclient.Session) { o.Lifecycle = wiring.LifecycleEvents(sess) },
		Handler: func(p *wiring.Process) (any, error) {
			h, ok := p.Seams.History.(lambdahandlers.StreamApplier)
			if !ok {
				return nil, lambdafn.ErrNoHistory
			}
			if p.Events != nil {
				h = dynamo.Then(h, dynamo.NewEventPublisher(p.Events, p.EventTypes, p.Logger))
			}
			return lambdahandlers.History(h, p.Logger), nil
		},
	})
}
