// Package objectstoretest is the one conformance suite of objectstore
// stores: the factory returns a store and a base URI (file:///tmp/x,
// s3://bucket/prefix) under which the suite writes.
package objectstoretest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/qasync/qasync/shared/internal/objects"
)

// Factory returns a fresh store and the base URI, without a trailing
// slash.
type Factory func(t *testing.T) (objects.Store, string)

// Run runs the suite.
func Run(t *testing.T, f Factory) {
	ctx := context.Background()
	t.Run("PutThenGetRoundTrips", func(t *testing.T) {
		t.Parallel()
		s, base := f(t)
		uri := base + "/acme/shop.pay/exec-1.json"
		want := []byte(`{"orderId":"1001","status":"ünïcode"}`)
		if err := s.Put(ctx, uri, want, "application/json"); err != nil {
			t.Fatalf("Put: %v", err)
		}
		got, err := s.Get(ctx, uri)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Get = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("ReplayKeepsSameBytes", func(t *testing.T) {
		t.Parallel()
		s, base := f(t)
		uri := base + "/exec-2.json"
		data := []byte("same bytes")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := s.Put(ctx, uri, data, "text/plain"); err != nil {
					t.Errorf("Put: %v", err)
				}
			})
		}
		wg.Wait()
		if got, err := s.Get(ctx, uri); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get = %q, %v", got, err)
		}
	})
	t.Run("EmptyObject", func(t *testing.T) {
		t.Parallel()
		s, base := f(t)
		uri := base + "/empty"
		if err := s.Put(ctx, uri, nil, ""); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if got, err := s.Get(ctx, uri); err != nil || len(got) != 0 {
			t.Fatalf("Get = %q, %v", got, err)
		}
	})
	t.Run("MissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, base := f(t)
		if _, err := s.Get(ctx, base+"/missing"); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("Get missing: %v, want ErrNotFound", err)
		}
	})
	t.Run("CancelledContextRefused", func(t *testing.T) {
		t.Parallel()
		s, base := f(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(cctx, base+"/cancelled", []byte("x"), ""); err == nil {
			t.Fatal("Put with a cancelled context succeeded")
		}
	})
}
