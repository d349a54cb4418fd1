package lifecycle

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/outbox"
)

// Configured returns the sink and the event types the configuration
// picks (config.LifecycleEvents): the process log with events.sink log,
// else a Sink on the bus of events.bus-name through the client client
// builds. It returns a nil sink when no event goes anywhere (no type
// opted into, or no bus).
func Configured(ctx context.Context, c config.Config, client func(context.Context) (PutEventsAPI, error), log *slog.Logger) (outbox.Sink, outbox.Types, error) {
	if !c.LifecycleEvents() {
		return nil, nil, nil
	}
	types, err := outbox.ParseTypes(c.EventsTypes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", config.FullKey("events.types"), err)
	}
	if c.EventsSink == "log" {
		return outbox.LogSink{Logger: log}, types, nil
	}
	if client == nil {
		return nil, nil, fmt.Errorf("%s: this process cannot reach EventBridge", config.FullKey("events.bus-name"))
	}
	eb, err := client(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: AWS configuration: %w", config.FullKey("events.bus-name"), err)
	}
	return NewSink(eb, c.EventsBusName), types, nil
}
