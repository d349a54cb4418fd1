package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// backend is one store qasync ships, as the simulator runs it.
type backend interface {
	// providers returns the backends process p runs on (before its gates).
	providers(p *proc) (providers, error)
	// view reads the true state: the store's own clock, no faults.
	view() view
	// parts counts the stored payload parts that have not expired.
	parts() int
	// processCrashed is told that p died (embedded: the whole process).
	processCrashed(p *proc)
	// close releases what the backend holds.
	close()
	// woken is signalled when the backend's own queue gets work (nil:
	// the backend has none).
	woken() <-chan struct{}
	// nothingDue reports whether the sweep index holds no row due by by:
	// a sweep then would find nothing.
	nothingDue(by time.Time) bool
}

// dueIn asks a store's sweep index, fault-free, for a row due by by.
func dueIn(s store.Store, by time.Time) bool {
	page, err := s.Due(context.Background(), store.DueQuery{By: by, Limit: 1})
	return err == nil && len(page.Refs) == 0
}

// view is the simulator's fault-free look at the stores.
type view struct {
	state    store.Store
	payloads payload.Store
	recorder deadletter.Recorder
	history  history.Reader
}

func newBackend(w *world) (backend, error) {
	switch w.o.Store {
	case StoreMemory:
		return newMemoryBackend(w), nil
	case StoreEmbedded:
		return newEmbeddedBackend(w)
	case StoreDynamo:
		return newDynamoBackend(w)
	}
	return nil, fmt.Errorf("sim: unknown store %q", w.o.Store)
}

// memoryBackend is the memory providers, shared by every process as a
// durable store would be (their clock is the true time), with the work
// and dead-letter queues modelled on SQS.
type memoryBackend struct {
	w        *world
	state    *memory.StateStore
	payloads *memory.PayloadStore
	effects  *memory.Effects
	dead     *memory.DeadLetters
}

func newMemoryBackend(w *world) *memoryBackend {
	c := clock.System{}
	w.newQueues()
	b := &memoryBackend{w: w, state: memory.NewStateStore(c), payloads: memory.NewPayloadStore(c),
		effects: memory.NewEffects(c), dead: memory.NewDeadLetters(c)}
	b.state.EnableOutbox(simEventTypes)
	w.drainOutbox(func() outbox.Source { return b.state })
	return b
}

func (b *memoryBackend) providers(p *proc) (providers, error) {
	return providers{
		state: b.state, payloads: b.payloads, effects: b.effects,
		dispatcher: &queueDispatcher{w: b.w, q: b.w.work}, publisher: &queuePublisher{q: b.w.dlq},
		recorder: b.dead, lister: b.dead, history: b.state,
	}, nil
}

func (b *memoryBackend) view() view {
	return view{state: b.state, payloads: b.payloads, recorder: b.dead, history: b.state}
}

func (b *memoryBackend) parts() int                   { return b.payloads.LiveParts() }
func (b *memoryBackend) processCrashed(*proc)         {}
func (b *memoryBackend) close()                       {}
func (b *memoryBackend) woken() <-chan struct{}       { return nil }
func (b *memoryBackend) nothingDue(by time.Time) bool { return dueIn(b.state, by) }

// embeddedBackend is the embedded store: one process holds the data
// directory, with the work queue inside the store. A crash of the
// process closes the store and a new process opens it again (breaking
// the dead process's leases, as qasync serve does).
type embeddedBackend struct {
	w    *world
	db   *embedded.DB
	disp *embedded.Dispatcher
	gen  int
}

func newEmbeddedBackend(w *world) (*embeddedBackend, error) {
	w.cfg.procs = 1
	b := &embeddedBackend{w: w}
	w.drainOutbox(func() outbox.Source { return b.db.State(systemClock) })
	return b, b.open()
}

func (b *embeddedBackend) open() error {
	db, err := embedded.Open(b.w.o.Dir, embedded.Options{Clock: clock.System{}, NoControl: true, BreakLeases: true, NoSync: true,
		Events: simEventTypes})
	if err != nil {
		return err
	}
	b.db, b.gen = db, b.gen+1
	b.w.mu.Lock()
	b.w.reopenedAt = time.Now() // the leases of RUNNING rows are broken now
	b.w.mu.Unlock()
	return nil
}

func (b *embeddedBackend) providers(p *proc) (providers, error) {
	c := skewClock{p.skew}
	b.disp = b.db.NewDispatcher(func(ctx context.Context, item dispatch.WorkItem) error {
		if p.isCrashed() {
			return errCrashed
		}
		return p.rt.Process(ctx, item)
	}, embedded.DispatcherOptions{})
	dead := b.db.DeadLetters(c)
	return providers{
		state: b.db.State(c), payloads: b.db.Payloads(c), effects: b.db.Effects(c),
		dispatcher: b.disp, publisher: dead, recorder: dead, lister: dead, history: b.db.State(c),
	}, nil
}

func (b *embeddedBackend) view() view {
	c := clock.System{}
	return view{state: b.db.State(c), payloads: b.db.Payloads(c), recorder: b.db.DeadLetters(c), history: b.db.State(c)}
}

func (b *embeddedBackend) parts() int { return b.db.LiveParts() }

// processCrashed closes the dead process's store; the restart opens it.
func (b *embeddedBackend) processCrashed(*proc) {
	_ = b.db.Close()
	if err := b.open(); err != nil {
		b.w.violate(invSetup, "", "reopen the embedded store after a crash: %v", err)
	}
}

func (b *embeddedBackend) close() { _ = b.db.Close() }

func (b *embeddedBackend) nothingDue(by time.Time) bool { return dueIn(b.db.State(clock.System{}), by) }

func (b *embeddedBackend) woken() <-chan struct{} {
	if b.disp == nil {
		return nil
	}
	return b.disp.Woken()
}

var (
	_ effect.Log    = (*memory.Effects)(nil)
	_ payload.Store = (*memory.PayloadStore)(nil)
)
