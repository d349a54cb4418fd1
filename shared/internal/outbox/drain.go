package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Source is a store's outbox: the records its writes added in the same
// transaction as the rows, until they are acknowledged.
type Source interface {
	// Pending returns up to limit records, oldest first, each with its
	// Seq.
	Pending(ctx context.Context, limit int) ([]Event, error)
	// Ack deletes the records at seqs (acknowledged, or refused for good).
	Ack(ctx context.Context, seqs []uint64) error
}

// DrainOptions configure a Drainer.
type DrainOptions struct {
	// Batch is the most records a pass reads. Default 100.
	Batch int
	// Interval is how long Run rests after a pass that found nothing,
	// and the first wait after a failed one. Default 1s.
	Interval time.Duration
	// MaxBackoff bounds the wait after failed passes, which doubles from
	// Interval. Default 1m.
	MaxBackoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Drainer sends a store's outbox records to a sink and deletes each one
// only after the sink acknowledged it: a crash between the two sends it
// again (same ID). A record the sink refused for transient reasons stays
// and is sent again after a backoff; one it refused for good is logged as
// LogDeadLettered and deleted.
type Drainer struct {
	src  Source
	sink Sink
	opts DrainOptions
}

// NewDrainer returns a drainer of src into sink.
func NewDrainer(src Source, sink Sink, opts DrainOptions) *Drainer {
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.MaxBackoff < opts.Interval {
		opts.MaxBackoff = max(time.Minute, opts.Interval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Drainer{src: src, sink: sink, opts: opts}
}

// Drain makes one pass: it sends up to Batch pending records and deletes
// those acknowledged or refused for good. It returns how many it
// deleted, whether records remain behind them (a full batch), and an
// error when the read, the sink or the delete failed (records to send
// again stay).
func (d *Drainer) Drain(ctx context.Context) (done int, more bool, err error) {
	evs, err := d.src.Pending(ctx, d.opts.Batch)
	if err != nil || len(evs) == 0 {
		return 0, false, err
	}
	sendErr := d.sink.Send(ctx, evs)
	acked, retry, dead := Outcome(len(evs), sendErr)
	seqs := make([]uint64, 0, len(acked)+len(dead))
	for _, i := range acked {
		seqs = append(seqs, evs[i].Seq)
	}
	for _, f := range dead {
		DeadLetter(ctx, d.opts.Logger, evs[f.Index], f.Err)
		seqs = append(seqs, evs[f.Index].Seq)
	}
	if len(seqs) > 0 {
		if err := d.src.Ack(ctx, seqs); err != nil {
			return 0, false, fmt.Errorf("outbox: delete acknowledged records: %w", err)
		}
	}
	if len(retry) > 0 {
		return len(seqs), false, fmt.Errorf("outbox: %d of %d events not acknowledged: %w", len(retry), len(evs), sendErr)
	}
	return len(seqs), len(evs) == d.opts.Batch, nil
}

// LogDrainFailed is the log event of a failed pass (a warning; the
// records stay and are sent again).
const LogDrainFailed = "lifecycle_outbox_drain_failed"

// Run drains until ctx ends: at once again while passes find full
// batches, after Interval when one found less, and after a backoff that
// doubles from Interval up to MaxBackoff while passes fail (each logged
// as LogDrainFailed).
func (d *Drainer) Run(ctx context.Context) error {
	fails := 0
	for {
		_, more, err := d.Drain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := d.opts.Interval
		switch {
		case err != nil:
			d.opts.Logger.LogAttrs(ctx, slog.LevelWarn, LogDrainFailed, slog.String("event", LogDrainFailed),
				slog.Int("failed_passes", fails+1), slog.String("error", err.Error()))
			wait = min(d.opts.Interval<<min(fails, 16), d.opts.MaxBackoff)
			fails++
		case more:
			fails, wait = 0, 0
		default:
			fails = 0
		}
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
