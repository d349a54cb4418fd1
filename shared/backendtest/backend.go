package backendtest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// ExerciseBackend runs, through Exercise, the suite of every seam b's
// Open returns: State, Payloads, Effects, Dispatcher, Recorder and
// History. Each case opens b afresh, with the configuration cfg returns
// for the case (a fresh data directory, table or queue where the Provider
// field asks for one) and the case's clock (a fake one where the field
// says so), runs the seams' loops until the case ends (a poller
// delivering the dispatcher's items, a feed of the history), then closes
// them. A Dispatcher case's Env.Work is its handler. The dead-letter
// publisher and the reject publisher are not exercised: what they publish
// goes where no seam reads it back (give Exercise a Provider with their
// ReadBack for that). An Open that fails, or returns no State or
// Payloads, fails the test.
func ExerciseBackend(t *testing.T, b backend.Backend, cfg func(t *testing.T) config.Config) {
	t.Helper()
	probe, stop := openBackend(t, b, cfg(t), clock.System{}, nil)
	stop()
	openCase := func(t *testing.T, clk clock.Clock, work dispatch.Handler) *backend.Seams {
		t.Helper()
		s, stop := openBackend(t, b, cfg(t), clk, work)
		t.Cleanup(stop)
		return s
	}
	p := Provider{
		State: func(t *testing.T, clk clock.Clock) store.Store {
			s := openCase(t, clk, nil)
			return s.State
		},
		Payloads: func(t *testing.T) payload.Store {
			s := openCase(t, clock.System{}, nil)
			return s.Payloads
		},
	}
	if probe.Effects != nil {
		p.Effects = func(t *testing.T, clk clock.Clock) effect.Log {
			s := openCase(t, clk, nil)
			return s.Effects
		}
	}
	if probe.Dispatcher != nil {
		p.Dispatcher = func(t *testing.T, h dispatch.Handler) dispatch.Dispatcher {
			s := openCase(t, clock.System{}, h)
			return s.Dispatcher
		}
	}
	if probe.Recorder != nil {
		p.Recorder = func(t *testing.T) deadletter.Recorder {
			s := openCase(t, clock.System{}, nil)
			return s.Recorder
		}
	}
	if probe.History != nil {
		p.History = func(t *testing.T, clk clock.Clock) (store.Store, history.Reader) {
			s := openCase(t, clk, nil)
			return s.State, s.History
		}
	}
	Exercise(t, p)
}

// errNoRuntime answers the hooks of a backend opened without a runtime.
var errNoRuntime = errors.New("backendtest: no runtime in this case")

// openBackend opens b and runs its loops; stop ends them and closes the
// seams (once).
func openBackend(t *testing.T, b backend.Backend, c config.Config, clk clock.Clock, work dispatch.Handler) (*backend.Seams, func()) {
	t.Helper()
	if work == nil {
		work = func(context.Context, dispatch.WorkItem) error { return errNoRuntime }
	}
	env := backend.Env{Config: c.ResolveProviders(), Clock: clk, Logger: slog.New(slog.DiscardHandler), Work: work,
		DeadLetter: func(context.Context, backend.DeadLetterMessage) error { return errNoRuntime }}
	s, err := b.Open(context.Background(), env)
	if err != nil {
		t.Fatalf("backendtest: Open: %v", err)
	}
	if s == nil || s.State == nil || s.Payloads == nil {
		t.Fatal("backendtest: Open returned no state or payload store (both are required)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range s.Loops {
		wg.Go(func() { _ = l.Run(ctx) })
	}
	var once sync.Once
	return s, func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if s.Close != nil {
				_ = s.Close(context.Background())
			}
		})
	}
}
