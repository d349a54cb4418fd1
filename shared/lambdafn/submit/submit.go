// Package submit is the submit Lambda function: API Gateway HTTP API
// events (payload 2.0) served by the HTTP API and the web console (the
// handler qasync serve serves), through the API Gateway adapter. Its
// main:
//
//	func main() { lambdafn.Main(submit.Function, myapp.Registry()) }
//
// It links the HTTP API, the console and the adapter, and no queue
// consumer, poller or object store.
package submit

import (
	"context"

	"github.com/qasync/qasync/shared/internal/apigw"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/internal/role"
)

// Function is the submit function, for lambdafn.Main and lambdafn.Boot.
const Function lambdafn.Function = "submit"

func init() {
	role.Register(string(Function), role.Role{
		Parts: func(o *wiring.Options, sess *awsclient.Session) {
			o.HTTP = console.Site
			// The await completion route verifies resume tokens.
			o.Secrets = wiring.Secrets(func(ctx context.Context) (wiring.SecretGetter, error) { return awsclient.SecretsManager(ctx, sess) })
		},
		Handler: func(p *wiring.Process) (any, error) { return apigw.Handler(p.Handler), nil },
	})
}
