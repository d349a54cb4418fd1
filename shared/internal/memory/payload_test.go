package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
)

func TestPayloadStoreExpiry(t *testing.T) {
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memory.NewPayloadStore(c)
	ctx := t.Context()
	p := payload.Part{PayloadID: "p", Name: "manifest", Data: []byte("old"), ExpiresAt: c.Now().Add(time.Minute)}
	if err := s.PutPart(ctx, p); err != nil {
		t.Fatal(err)
	}
	c.Advance(59 * time.Second)
	if _, err := s.GetPart(ctx, "p", "manifest"); err != nil {
		t.Fatalf("GetPart before expiry: %v", err)
	}
	p.Data = []byte("new")
	if err := s.PutPart(ctx, p); !errors.Is(err, payload.ErrConflict) {
		t.Fatalf("PutPart over a live part: error = %v, want ErrConflict", err)
	}
	c.Advance(time.Second)
	if _, err := s.GetPart(ctx, "p", "manifest"); !errors.Is(err, payload.ErrNotFound) {
		t.Fatalf("GetPart at expiry: error = %v, want ErrNotFound", err)
	}
	p.ExpiresAt = time.Time{}
	if err := s.PutPart(ctx, p); err != nil {
		t.Fatalf("PutPart over an expired part: %v", err)
	}
	c.Advance(1000 * time.Hour)
	if got, err := s.GetPart(ctx, "p", "manifest"); err != nil || string(got.Data) != "new" {
		t.Fatalf("GetPart of a never-expiring part = %q, %v", got.Data, err)
	}
}

func TestPayloadStoreCanceledContext(t *testing.T) {
	s := memory.NewPayloadStore(clock.System{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.PutPart(ctx, payload.Part{PayloadID: "p", Name: "manifest", Data: []byte("x")}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutPart error = %v, want context.Canceled", err)
	}
	if _, err := s.GetPart(ctx, "p", "manifest"); !errors.Is(err, context.Canceled) {
		t.Errorf("GetPart error = %v, want context.Canceled", err)
	}
}
