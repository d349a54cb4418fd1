package payload_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// parts is the smallest payload.Store: a map (the runtime uses DynamoDB's
// payload table, or memory for local runs).
type parts map[string]payload.Part

func (m parts) PutPart(_ context.Context, p payload.Part) error {
	if old, ok := m[p.PayloadID+"/"+p.Name]; ok && !bytes.Equal(old.Data, p.Data) {
		return payload.ErrConflict
	}
	m[p.PayloadID+"/"+p.Name] = p
	return nil
}

func (m parts) GetPart(_ context.Context, id, name string) (payload.Part, error) {
	p, ok := m[id+"/"+name]
	if !ok {
		return payload.Part{}, payload.ErrNotFound
	}
	return p, nil
}

func (m parts) ExtendPart(_ context.Context, id, name string, until time.Time) error {
	p, ok := m[id+"/"+name]
	if !ok {
		return payload.ErrNotFound
	}
	if until.After(p.ExpiresAt) {
		p.ExpiresAt = until
		m[id+"/"+name] = p
	}
	return nil
}

func (m parts) DeletePart(_ context.Context, id, name string) error {
	delete(m, id+"/"+name)
	return nil
}

func ExampleWrite() {
	ctx := context.Background()
	store := parts{}
	expires := time.Now().Add(7 * 24 * time.Hour)

	// A small payload travels inline in its Ref; nothing is stored.
	small, err := payload.JSON(map[string]int{"answer": 42})
	if err != nil {
		panic(err)
	}
	smallRef, err := payload.Write(ctx, store, small, "input", payload.DefaultInlineBudget, expires)
	if err != nil {
		panic(err)
	}
	fmt.Println("small: inline", smallRef.ManifestID == "")

	// A large one is stored as chunks plus a manifest.
	large := payload.Raw("text/plain", bytes.Repeat([]byte("qasync "), 100_000))
	largeRef, err := payload.Write(ctx, store, large, "result", payload.DefaultInlineBudget, expires)
	if err != nil {
		panic(err)
	}
	fmt.Println("large: inline", largeRef.ManifestID == "", "length", largeRef.Length)

	// Read verifies lengths and digests on the way back.
	got, err := payload.Read(ctx, store, largeRef)
	if err != nil {
		panic(err)
	}
	fmt.Println("large read:", got.ContentType, bytes.Equal(got.Data, large.Data))

	got, err = payload.Read(ctx, store, smallRef)
	if err != nil {
		panic(err)
	}
	var v map[string]int
	if err := got.DecodeJSON(&v); err != nil {
		panic(err)
	}
	fmt.Println("small read:", v["answer"])
	// Output:
	// small: inline true
	// large: inline false length 700000
	// large read: text/plain true
	// small read: 42
}
