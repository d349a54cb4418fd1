package backendtest

// The object store suite (Provider.Objects): Put then Get round trips,
// concurrent replays of one Put, empty objects, missing objects, a
// cancelled context refused.

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"sync"
	"testing"

	"github.com/qasync/qasync/shared/pipeline"
)

// ObjectStore is the object store seam as the suite tests it: the
// pipeline.ObjectStore a step's Output is published with, plus Get to read
// an object back. To pass, Put must store the bytes at the URI so that Get
// returns them (an empty object included), repeated and concurrent Puts
// of the same bytes must leave those bytes, Put must refuse a cancelled
// context, and Get of a missing object must return an error matching
// fs.ErrNotExist (errors.Is).
type ObjectStore = pipeline.ObjectStore

// runObjects runs the object store suite on stores from f.
func runObjects(t *testing.T, f func(*testing.T) (ObjectStore, string)) {
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
		if _, err := s.Get(ctx, base+"/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Get missing: %v, want fs.ErrNotExist", err)
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
