package wiring_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/internal/testkeys"
	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsbackend"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/reject"
)

// openOptions are the knobs the tests turn on open's assembly.
type openOptions struct {
	api       []func(*middleware.Stack) error
	drain     time.Duration
	observers []engine.Observer
	objects   pipeline.ObjectStore
	faults    testkeys.Faults
	logger    *slog.Logger
}

// option adjusts open.
type option func(*openOptions)

// withAPIOptions adds SDK middleware to every AWS client.
func withAPIOptions(fns ...func(*middleware.Stack) error) option {
	return func(o *openOptions) { o.api = append(o.api, fns...) }
}

// withDrainTimeout bounds the SQS poller's drain.
func withDrainTimeout(d time.Duration) option { return func(o *openOptions) { o.drain = d } }

// withObserver adds an observer of the runtime's events.
func withObserver(obs engine.Observer) option {
	return func(o *openOptions) { o.observers = append(o.observers, obs) }
}

// withFaults sets the test-only faults.
func withFaults(f testkeys.Faults) option { return func(o *openOptions) { o.faults = f } }

// withLogger replaces the logger open is given.
func withLogger(l *slog.Logger) option { return func(o *openOptions) { o.logger = l } }

// withObjects replaces the object store of pipelines' Output.
func withObjects(s pipeline.ObjectStore) option { return func(o *openOptions) { o.objects = s } }

// open assembles c as qasync serve does (server.Start's options): every
// built-in backend, the DynamoDB + SQS one with its serving loops, file
// and S3 objects, the await secret from its ARN, on an AWS session of
// its own.
func open(ctx context.Context, c config.Config, reg *pipeline.Registry, log *slog.Logger, opts ...option) (*wiring.Process, error) {
	o := openOptions{drain: 20 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger != nil {
		log = o.logger
	}
	sess := awsclient.NewSession(o.api...)
	objs := o.objects
	if objs == nil {
		objs = objects.Router{File: objects.File{}, S3: objects.S3{Connect: func(ctx context.Context) (*s3.Client, error) { return awsclient.S3(ctx, sess) }}}
	}
	return wiring.Assemble(ctx, c, reg, wiring.Options{
		Backends: map[string]backend.Backend{
			"embedded": embedded.Backend(), "memory": memory.Backend(),
			"dynamo": awsbackend.NewServing(sess, awsbackend.ServingOptions{DrainTimeout: o.drain}),
		},
		Logger: log, AWS: sess, Objects: objs, Observers: o.observers, Faults: o.faults, Lifecycle: wiring.LifecycleEvents(sess),
		Secrets: wiring.Secrets(func(ctx context.Context) (wiring.SecretGetter, error) { return awsclient.SecretsManager(ctx, sess) }),
	})
}

// rejectMemory is the process's memory reject sink
// (item-reject.provider memory).
func rejectMemory(p *wiring.Process) *reject.Memory { return p.Seams.Rejects.(*reject.Memory) }
