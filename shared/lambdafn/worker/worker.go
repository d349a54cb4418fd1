// Package worker is the worker Lambda function: batches of the SQS work
// queue, one transition per record, reporting partial batch failures. Its
// main:
//
//	func main() { lambdafn.Main(worker.Function, myapp.Registry()) }
//
// It links the steps' object store (file:// and s3:// outputs) and no
// HTTP API, console or embedded store.
package worker

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/lambdahandlers"
	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/internal/role"
)

// Function is the worker function, for lambdafn.Main and lambdafn.Boot.
const Function lambdafn.Function = "worker"

// queue is a dispatcher whose messages the worker function receives as
// SQS records: a deferred record goes back through it as a fresh message
// (never counting towards the poison queue), or stays invisible until it
// is due (DeferFrom, in the queue the record came from: the work queue or
// the urgent one) when the send fails.
type queue interface {
	DeferFrom(ctx context.Context, sourceARN, receiptHandle string, wait time.Duration) error
}

func init() {
	role.Register(string(Function), role.Role{
		Parts: func(o *wiring.Options, sess *awsclient.Session) {
			// The S3 client is built on the first s3:// output only.
			o.Objects = objects.Router{File: objects.File{}, S3: objects.S3{Connect: func(ctx context.Context) (*s3.Client, error) { return awsclient.S3(ctx, sess) }}}
			// Await steps sign their resume tokens.
			o.Secrets = wiring.Secrets(func(ctx context.Context) (wiring.SecretGetter, error) { return awsclient.SecretsManager(ctx, sess) })
		},
		Handler: func(p *wiring.Process) (any, error) {
			var opts []lambdahandlers.WorkerOption
			if q, ok := p.Seams.Dispatcher.(queue); ok {
				opts = append(opts, lambdahandlers.WithRequeue(p.Seams.Dispatcher), lambdahandlers.WithDeferrer(q.DeferFrom))
			}
			return lambdahandlers.Worker(p.Runtime, p.Config.Lease, p.Logger, opts...), nil
		},
	})
}
