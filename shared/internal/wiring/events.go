package wiring

import (
	"context"
	"log/slog"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/outbox"
)

// LoopLifecycleOutbox is the name of the loop that drains a store's
// outbox of lifecycle events to their sink.
const LoopLifecycleOutbox = "lifecycle_outbox"

// lifecycleEvents sets the process's lifecycle event sink from the
// configuration (when client is offered, or the sink is the log) and,
// when the state store keeps an outbox (embedded, memory), adds the loop
// that drains it. A process that sends no events while its store writes
// an outbox logs lifecycle_events_not_published.
func (p *Process) lifecycleEvents(ctx context.Context, client func(context.Context) (lifecycle.PutEventsAPI, error)) error {
	c, log := p.Config, p.Logger
	if !c.LifecycleEvents() {
		return nil
	}
	src, hasOutbox := p.Seams.State.(outbox.Source)
	if client == nil && c.EventsSink != "log" {
		if hasOutbox {
			log.LogAttrs(ctx, slog.LevelWarn, "lifecycle_events_not_published", slog.String("event", "lifecycle_events_not_published"),
				slog.String("bus", c.EventsBusName), slog.String("reason", "this process does not send lifecycle events (qasync serve and the history function do)"))
		}
		return nil
	}
	sink, types, err := lifecycle.Configured(ctx, c, client, log)
	if err != nil {
		return err
	}
	p.Events, p.EventTypes = sink, types
	if hasOutbox {
		d := outbox.NewDrainer(src, sink, outbox.DrainOptions{Logger: log})
		p.Seams.Loops = append(p.Seams.Loops, backend.Loop{Name: LoopLifecycleOutbox, Run: d.Run})
	}
	return nil
}
