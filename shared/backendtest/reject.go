package backendtest

// The item reject publisher suite (Provider.Rejects): published
// envelopes (item and stream scope, with and without payload) read back
// intact, a cancelled context refused.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/reject"
)

// rejectEnvelope is envelope i of the reject suite: even i an ITEM with payload, odd i a STREAM.
func rejectEnvelope(i int) reject.Envelope {
	env := reject.Envelope{
		TenantID: "tenant-a", ExecutionID: fmt.Sprintf("exec-%d", i), PipelineID: "shop.import",
		StepIndex: 1, StepName: "validate", Attempt: 2, TransitionKey: fmt.Sprintf("exec-%d:1:2", i),
		ErrorCode: "invalid_sku", ErrorMessage: "sku missing — ünïcode",
		RejectedAt: time.Date(2026, 11, 29, 10, 0, 0, 5_000_000, time.UTC),
	}
	if i%2 == 0 {
		item := []byte(fmt.Sprintf(`{"sku":"","line":%d}`, i))
		sum := sha256.Sum256(item)
		env.Scope, env.Fingerprint, env.Payload = reject.ScopeItem, hex.EncodeToString(sum[:]), item
	} else {
		env.Scope, env.ItemCount = reject.ScopeStream, 40+i
	}
	return env
}

// sameReject reports whether two envelopes are equal (times at millisecond
// precision).
func sameReject(a, b reject.Envelope) bool {
	if !a.RejectedAt.Truncate(time.Millisecond).Equal(b.RejectedAt.Truncate(time.Millisecond)) || !bytes.Equal(a.Payload, b.Payload) {
		return false
	}
	a.RejectedAt, b.RejectedAt, a.Payload, b.Payload = time.Time{}, time.Time{}, nil, nil
	return reflect.DeepEqual(a, b)
}

// runRejects runs the item reject publisher suite on publishers from f.
func runRejects(t *testing.T, f func(*testing.T) (reject.Publisher, ReadBack[reject.Envelope])) {
	t.Run("PublishedEnvelopesReadBackIntact", func(t *testing.T) {
		t.Parallel()
		pub, read := f(t)
		ctx := context.Background()
		want := map[string]reject.Envelope{}
		for i := range 4 {
			env := rejectEnvelope(i)
			if i == 2 {
				env.Payload = nil // include-payload off: fingerprint only
			}
			want[env.ExecutionID] = env
			if err := pub.Publish(ctx, env); err != nil {
				t.Fatalf("Publish: %v", err)
			}
		}
		got, err := read(ctx, len(want))
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("read back %d envelopes, want %d", len(got), len(want))
		}
		for _, g := range got {
			if w := want[g.ExecutionID]; !sameReject(g, w) {
				t.Errorf("envelope\n got  %+v\n want %+v", g, w)
			}
		}
	})
	t.Run("CancelledContextRefused", func(t *testing.T) {
		t.Parallel()
		pub, _ := f(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := pub.Publish(ctx, rejectEnvelope(9)); err == nil {
			t.Fatalf("Publish with a cancelled context succeeded")
		}
	})
}
