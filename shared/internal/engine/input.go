package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// ErrPayloadTooLarge: InputWithin was asked for an input larger than its
// bound; the returned row's Input.Length is the input's size.
var ErrPayloadTooLarge = errors.New("engine: payload larger than the bound asked for")

// Input returns an execution's input: the payload it was submitted with,
// read through the payload store (store.Execution.Input), in any status.
// An unknown execution, or another tenant's, returns store.ErrNotFound.
// The input can hold personal data: it is for the operator plane, which
// audit-logs every view.
func (r *Runtime) Input(ctx context.Context, key store.Key) (store.Execution, payload.Payload, error) {
	return r.InputWithin(ctx, key, 0)
}

// InputWithin is Input for an input of at most maxBytes (0 or less: any
// size). A larger one is not read: it returns the row and an error
// wrapping ErrPayloadTooLarge, the size being the row's Input.Length.
func (r *Runtime) InputWithin(ctx context.Context, key store.Key, maxBytes int64) (store.Execution, payload.Payload, error) {
	e, err := r.deps.Store.Get(ctx, key)
	if err != nil {
		return e, payload.Payload{}, err
	}
	if maxBytes > 0 && e.Input.Length > maxBytes {
		return e, payload.Payload{}, fmt.Errorf("%w: the input is %d bytes, the bound %d", ErrPayloadTooLarge, e.Input.Length, maxBytes)
	}
	p, err := payload.Read(ctx, r.deps.Payloads, e.Input)
	return e, p, err
}
