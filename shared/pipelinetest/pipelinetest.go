// Package pipelinetest runs pipeline steps in tests, without a runtime: a
// step gets the StepInfo a worker would give it, with in-memory stand-ins
// for the runtime's effect log, Item Reject Sink and object store, and
// RunSteps feeds an input through every step in order, as one crash-free
// execution does. Steps run at least once in production; to test that a
// step tolerates a re-run, call it twice with the same Info.
package pipelinetest

import (
	"context"
	"fmt"
	"io/fs"
	"sync"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// Effects returns a fresh in-memory effect log, the one command steps
// (package command) record their side effects in.
func Effects() effect.Log { return memory.NewEffects(clock.System{}) }

// Objects is an in-memory object store (pipeline.ObjectStore): what a
// pipeline's Output publishes lands in it.
type Objects struct {
	mu   sync.Mutex
	objs map[string][]byte
}

// Put implements pipeline.ObjectStore.
func (o *Objects) Put(_ context.Context, uri string, data []byte, _ string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.objs == nil {
		o.objs = map[string][]byte{}
	}
	o.objs[uri] = append([]byte(nil), data...)
	return nil
}

// Get implements pipeline.ObjectStore: the object at uri, or an error
// matching fs.ErrNotExist.
func (o *Objects) Get(_ context.Context, uri string) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.objs[uri]
	if !ok {
		return nil, fmt.Errorf("pipelinetest: object %s: %w", uri, fs.ErrNotExist)
	}
	return append([]byte(nil), b...), nil
}

// Options describe the execution RunSteps and Info pretend to run.
type Options struct {
	// TenantID and ExecutionID default to "tenant" and "exec-1".
	TenantID, ExecutionID string
	// Attempts gives the attempt of step i (1 when absent).
	Attempts map[int]int
	// Effects defaults to a fresh Effects(); pass one to share it between
	// runs (a re-run then finds the first run's effect records).
	Effects effect.Log
	// Objects receives a pipeline's Output; nil: none is kept.
	Objects *Objects
}

func (o Options) defaults() Options {
	if o.TenantID == "" {
		o.TenantID = "tenant"
	}
	if o.ExecutionID == "" {
		o.ExecutionID = "exec-1"
	}
	if o.Effects == nil {
		o.Effects = Effects()
	}
	return o
}

// Info is the StepInfo a worker gives step i of p in the execution opts
// describes.
func Info(p pipeline.Pipeline, i int, opts Options) pipeline.StepInfo {
	opts = opts.defaults()
	attempt := max(opts.Attempts[i], 1)
	info := pipeline.StepInfo{
		ExecutionID: opts.ExecutionID, TenantID: opts.TenantID, PipelineID: p.ID,
		StepName: p.Steps[i].Name, StepIndex: i, Attempt: attempt,
		TransitionKey:  store.TransitionKey(opts.ExecutionID, i, attempt),
		IdempotencyKey: store.StepIdempotencyKey(opts.TenantID, opts.ExecutionID, p.Steps[i].Name),
		Effects:        opts.Effects,
	}
	if opts.Objects != nil {
		info.Objects = opts.Objects
	}
	return info
}

// RunSteps feeds in through every step of p in order, each once, and, when
// p has an Output, publishes the last output to opts.Objects; it returns
// the last step's output or the first error (naming the step).
func RunSteps(ctx context.Context, p pipeline.Pipeline, in payload.Payload, opts Options) (payload.Payload, error) {
	opts = opts.defaults()
	for i, s := range p.Steps {
		info := Info(p, i, opts)
		out, err := s.Run(ctx, info, in)
		if err != nil {
			return payload.Payload{}, fmt.Errorf("pipelinetest: %s step %s: %w", p.ID, s.Name, err)
		}
		in = out
	}
	if p.Output != nil {
		info := Info(p, len(p.Steps)-1, opts)
		if err := p.Output.Publish(ctx, info, in); err != nil {
			return payload.Payload{}, err
		}
	}
	return in, nil
}
