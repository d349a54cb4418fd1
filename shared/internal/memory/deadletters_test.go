package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/memory"
)

func TestDeadLettersExpiryFollowsClock(t *testing.T) {
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	d := memory.NewDeadLetters(c)
	ctx := t.Context()
	r := deadletter.Record{ID: "poison:m1", Kind: deadletter.KindPoison, MessageID: "m1", ReceiveCount: 5,
		RecordedAt: c.Now(), ExpiresAt: c.Now().Add(time.Minute)}
	if created, err := d.Put(ctx, r); err != nil || !created {
		t.Fatalf("Put: created = %v, error = %v", created, err)
	}
	c.Advance(59 * time.Second)
	if _, err := d.Get(ctx, r.ID); err != nil {
		t.Fatalf("Get before expiry: %v", err)
	}
	if created, err := d.Put(ctx, r); err != nil || created {
		t.Fatalf("Put over a live record: created = %v, error = %v", created, err)
	}
	c.Advance(time.Second)
	if _, err := d.Get(ctx, r.ID); !errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("Get at expiry: error = %v, want ErrNotFound", err)
	}
	r.ExpiresAt = time.Time{}
	if created, err := d.Put(ctx, r); err != nil || !created {
		t.Fatalf("Put after expiry: created = %v, error = %v", created, err)
	}
}

func TestDeadLettersCopiesEnvelope(t *testing.T) {
	d := memory.NewDeadLetters(nil)
	ctx := t.Context()
	env := &deadletter.Envelope{TenantID: "t", ExecutionID: "e", TransitionKey: "e:0:1", ErrorMessage: "boom"}
	if _, err := d.Put(ctx, deadletter.Record{ID: "e:0:1", Kind: deadletter.KindExecution, Envelope: env}); err != nil {
		t.Fatal(err)
	}
	env.ErrorMessage = "changed by the caller"
	got, err := d.Get(ctx, "e:0:1")
	if err != nil {
		t.Fatal(err)
	}
	got.Envelope.ErrorMessage = "changed by the reader"
	again, _ := d.Get(ctx, "e:0:1")
	if again.Envelope.ErrorMessage != "boom" {
		t.Fatalf("stored envelope changed to %q", again.Envelope.ErrorMessage)
	}
}
