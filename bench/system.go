package main

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// System is one queue system under test. Every system runs the same
// workload: a 3-step pipeline (step1 -> step2 -> step3) where each step is
// durably checkpointed by the system's own standard and the next step is
// enqueued only once the previous one completed. A new peer is one file
// that implements System and calls register from init.
//
// The harness calls Start once, then Submit many times (possibly from
// several goroutines at once), then Close. A fresh System is built for
// each phase (burst, steady), so no phase sees another's rows.
type System interface {
	// Start opens a fresh store (files go under env.Dir) and starts
	// env.Workers concurrent workers. It returns once the system accepts
	// submissions. ctx bounds Start only and ends when Start returns.
	Start(ctx context.Context, env Env) error
	// Submit enqueues the first step of execution id with the input
	// Doc{ID: id}. It returns once the submission is recorded.
	Submit(ctx context.Context, id int) error
	// Close stops the workers and releases what Start created; ctx bounds
	// how long it may take.
	Close(ctx context.Context) error
}

// Env is what the harness hands to System.Start.
type Env struct {
	// Workers is how many steps may run at once (River's MaxWorkers).
	Workers int
	// Dir is a fresh directory for the system's files, removed afterwards.
	Dir string
	// Done must be called, from any goroutine, once the last step of an
	// execution is durably complete, with the document that step produced.
	// Calls after the first for the same id are ignored.
	Done func(Completion)
	// Logf reports a system's warnings (to the child's stderr, shown when
	// the run fails or with -v).
	Logf func(format string, args ...any)
}

// Completion is the end of one execution: its id and the document its last
// step produced (Path lists the steps that ran, in order).
type Completion struct {
	ID  int
	Doc Doc
}

// Doc is the small JSON document the pipeline passes from step to step:
// each step reads it, appends its name to Path and hands it on.
type Doc struct {
	ID   int      `json:"id"`
	Path []string `json:"path"`
}

// Payload returns the document itself (River's argument types embed Doc
// and reach it through this promoted method).
func (d Doc) Payload() Doc { return d }

// StepNames are the pipeline's steps, in order.
var StepNames = []string{"step1", "step2", "step3"}

// work is the step body shared by every system: append the step's name.
func work(d Doc, step string) Doc {
	d.Path = append(append([]string(nil), d.Path...), step)
	return d
}

// ServerCPU is implemented by a system whose work is partly done by a
// server process outside the benchmark's process (River's Postgres,
// Temporal's dev server): it returns that server's CPU time so far, and
// false when it cannot be measured (an external server).
type ServerCPU interface {
	ServerCPU() (time.Duration, bool)
}

// Spec registers a system.
type Spec struct {
	// Key names the system on the command line (-systems) and in JSON.
	Key string
	// Label is the system's row in the table.
	Label string
	// Settings describes its tuning in one line (printed under the table).
	Settings string
	// Baseline marks the system the ratios are computed against.
	Baseline bool
	// Order sorts the rows (smaller first).
	Order int
	// Prepare, when set, runs in the parent before the system's child
	// process: it may start a server and return environment variables
	// for the child and a cleanup that the parent always calls. A non-empty
	// skip reason skips the system (its row says why).
	Prepare func(ctx context.Context, logf func(string, ...any)) (env []string, cleanup func(), skip string, err error)
	// New builds a System in the child process.
	New func() (System, error)
}

var specs = map[string]Spec{}

// register adds a system; called from init in the system's file.
func register(s Spec) {
	if _, dup := specs[s.Key]; dup {
		panic(fmt.Sprintf("bench: system %q registered twice", s.Key))
	}
	specs[s.Key] = s
}

// sortedSpecs returns the registered systems in table order.
func sortedSpecs() []Spec {
	out := make([]Spec, 0, len(specs))
	for _, s := range specs {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Order != out[j].Order {
			return out[i].Order < out[j].Order
		}
		return out[i].Key < out[j].Key
	})
	return out
}
