// Package backend is what a qasync runtime runs on, as a value: a Backend
// opens the seams of one process (the state store, the payload chunk
// store, the effect log, the work dispatcher, dead letters, item rejects,
// the history) from the configuration, the way river hands its client a
// driver.
//
// The built-in providers (memory, embedded, DynamoDB + SQS) are Backends,
// picked by the state-provider key. server.WithBackend and
// lambdafn.WithBackend run a process on a Backend of your own instead;
// backendtest.Exercise checks each seam it opens against the contract the
// runtime relies on.
//
// Open gets the configuration, the clock and the logger the process runs
// with, and two hooks into the runtime (Env.Work, Env.DeadLetter) for the
// parts of a backend that deliver in the process. What a Backend leaves
// nil the runtime fills in (see Seams); State and Payloads are required.
package backend

import (
	"context"
	"errors"
	"log/slog"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// Backend opens the seams of one process. Open is called once per
// process, before the runtime exists; an error stops the process from
// starting (name the configuration key at fault, as the built-in
// providers do).
type Backend interface {
	Open(ctx context.Context, env Env) (*Seams, error)
}

// Func adapts a function to Backend.
type Func func(ctx context.Context, env Env) (*Seams, error)

// Open implements Backend.
func (f Func) Open(ctx context.Context, env Env) (*Seams, error) { return f(ctx, env) }

// Env is what a Backend opens its seams with.
type Env struct {
	// Config is the process's configuration: validated, with the
	// provider keys resolved (config.Config.ResolveProviders).
	Config config.Config
	// Clock is the time every seam keeps (expiry, record times).
	Clock clock.Clock
	// Logger is the process's logger (JSON, snake_case keys).
	Logger *slog.Logger
	// Work runs one work item: one transition of its execution (the
	// runtime's Process). A dispatcher that delivers in this process, or
	// a loop polling a queue, calls it with each item; it may be called
	// as soon as Open has returned (it waits until the runtime is ready)
	// and returns dispatch.RetryAfter for an item to deliver later.
	Work dispatch.Handler
	// DeadLetter records one message received from a dead-letter queue
	// (or from the work queue's poison queue) and confirms its
	// execution's DLQ status, as the dlq function does with each record.
	// A loop consuming such a queue calls it; on an error the message is
	// to be delivered again.
	DeadLetter func(ctx context.Context, m DeadLetterMessage) error
}

// DeadLetterMessage is one message of a dead-letter queue, for
// Env.DeadLetter.
type DeadLetterMessage struct {
	// ID is the queue's id of the message (a poison record's id derives
	// from it).
	ID string
	// Body is the message body: a deadletter.Envelope as JSON, or a work
	// item moved to the poison queue after too many receives.
	Body string
	// Receives is how often the queue delivered the message.
	Receives int
}

// Seams are what Open returns: one value per seam, each with the contract
// of its interface (and of the backendtest.Provider field of the same
// name).
type Seams struct {
	// State keeps the execution rows. Required. A state store that also
	// keeps bulk re-drive jobs (store.JobStore) serves them too.
	State store.Store
	// Payloads keeps payload chunks above the inline budget. Required.
	Payloads payload.Store
	// Effects is the effect log of command steps. Optional: without it,
	// command steps fail with code command_effect_log_missing.
	Effects effect.Log
	// Dispatcher sends work items. Optional: the default is a pool of
	// pipeline.orchestrator.worker-concurrency goroutines in this process
	// that calls Env.Work (not durable: queued items are lost with the
	// process, and the sweeper sends them again).
	Dispatcher dispatch.Dispatcher
	// DeadLetters publishes dead letters. Optional: the default logs each
	// (event dead_letter_published) and records it with Recorder, as the
	// dlq function would.
	DeadLetters deadletter.Publisher
	// Recorder keeps the dead-letter records (GET /v1/dead-letters lists
	// them when it is also a deadletter.Lister). Optional, but the dlq
	// function refuses to start without one.
	Recorder deadletter.Recorder
	// Rejects publishes the items steps reject. Optional: the default is
	// what pipeline.item-reject.provider names among the sinks any
	// process has (log, memory); a backend that serves another value of
	// that key returns its publisher here.
	Rejects reject.Publisher
	// History reads executions' histories (GET .../history). Optional.
	History history.Reader
	// Loops run beside the runtime in a long-running process (qasync
	// serve, server.Start) until their context ends: a poller feeding
	// Env.Work, a consumer of a dead-letter queue calling Env.DeadLetter,
	// a change-stream feed of History. The Lambda functions never run
	// them: their event sources do that work.
	Loops []Loop
	// Close releases what Open acquired, once the runtime has stopped
	// taking work and its loops have returned: in-flight deliveries may
	// finish until ctx ends. Optional.
	Close func(ctx context.Context) error
}

// Loop is one of a backend's loops.
type Loop struct {
	// Name says what the loop does, in snake_case (work_queue_poller,
	// dead_letter_consumer, ...): the logs name a loop that failed by it.
	Name string
	// Run runs the loop until ctx ends; an error before that is logged.
	Run func(ctx context.Context) error
}

// ErrMissingSeam is wrapped by the runtime's refusal of Seams without
// State or Payloads.
var ErrMissingSeam = errors.New("backend: a required seam is missing")
