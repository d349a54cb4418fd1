package payload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// manifestName is the Part.Name of a chunked payload's manifest.
const manifestName = "manifest"

// PartWhole is the Part.Name of a payload stored as one part (Ref.Whole):
// every payload that fits one chunk.
const PartWhole = "whole"

// chunkName is the Part.Name of chunk i.
func chunkName(i int) string { return fmt.Sprintf("chunk#%05d", i) }

// manifest is the stored description of a chunked payload. It is written
// after all its chunks, so a readable manifest means a complete payload.
type manifest struct {
	Length      int64    `json:"length"`
	Chunks      int      `json:"chunks"`
	ChunkSize   int      `json:"chunkSize"`
	SHA256      string   `json:"sha256"`
	Encoding    Encoding `json:"encoding"`
	ContentType string   `json:"contentType"`
	Message     string   `json:"_tpf_message,omitempty"`
	ChunkSHA256 []string `json:"chunkSha256"`
}

// payloadID derives the id of a chunked payload from its slot, content
// digest and descriptor: the same payload in the same slot always maps to
// the same id, and anything else to another one.
func payloadID(slot, digest string, p Payload) string {
	key, _ := json.Marshal([]string{slot, digest, string(p.Encoding), p.ContentType, p.Message}) // cannot fail
	return Digest(key)[:32]
}

// Write stores p for the execution field named slot and returns its Ref.
// A payload of at most inlineBudget bytes is returned inline and nothing is
// written (a negative budget never inlines). A larger one that fits one
// chunk (ChunkSize) is written to s as one part (Ref.Whole: one write); a
// payload larger still as chunks of at most ChunkSize, then its manifest.
// Every part expires at expires (zero: never). Writing the same payload to
// the same slot again rewrites identical parts and returns an equal Ref.
func Write(ctx context.Context, s Store, p Payload, slot string, inlineBudget int, expires time.Time) (Ref, error) {
	if inlineBudget > MaxInlineBudget {
		return Ref{}, fmt.Errorf("payload: inline budget %d exceeds MaxInlineBudget %d", inlineBudget, MaxInlineBudget)
	}
	switch {
	case p.Encoding != EncodingJSON && p.Encoding != EncodingRaw && p.Encoding != EncodingProtobuf:
		return Ref{}, fmt.Errorf("%w: unknown encoding %q", ErrInvalid, p.Encoding)
	case p.Encoding == EncodingProtobuf && p.Message == "":
		return Ref{}, fmt.Errorf("%w: protobuf payload without a message name", ErrInvalid)
	}
	ref := Ref{
		Encoding:    p.Encoding,
		ContentType: p.ContentType,
		Message:     p.Message,
		Length:      int64(len(p.Data)),
		SHA256:      Digest(p.Data),
	}
	if len(p.Data) <= inlineBudget {
		ref.Inline = append([]byte{}, p.Data...) // non-nil even when empty
		return ref, nil
	}
	id := payloadID(slot, ref.SHA256, p)
	if len(p.Data) <= ChunkSize {
		if err := s.PutPart(ctx, Part{PayloadID: id, Name: PartWhole, Data: p.Data, ExpiresAt: expires}); err != nil {
			return Ref{}, fmt.Errorf("payload: write %s %s: %w", id, PartWhole, err)
		}
		ref.ManifestID, ref.Whole = id, true
		return ref, nil
	}

	m := manifest{
		Length:      ref.Length,
		ChunkSize:   ChunkSize,
		SHA256:      ref.SHA256,
		Encoding:    p.Encoding,
		ContentType: p.ContentType,
		Message:     p.Message,
		ChunkSHA256: []string{},
	}
	var chunks [][]byte
	for off := 0; off < len(p.Data); off += ChunkSize {
		end := min(off+ChunkSize, len(p.Data))
		chunks = append(chunks, p.Data[off:end:end])
		m.ChunkSHA256 = append(m.ChunkSHA256, Digest(p.Data[off:end]))
	}
	m.Chunks = len(chunks)
	mdata, err := json.Marshal(m)
	if err != nil {
		return Ref{}, fmt.Errorf("payload: encode manifest: %w", err)
	}
	if len(mdata) > ChunkSize {
		return Ref{}, fmt.Errorf("%w: %d-byte payload too large: its manifest exceeds %d bytes", ErrInvalid, ref.Length, ChunkSize)
	}

	for i, c := range chunks {
		if err := s.PutPart(ctx, Part{PayloadID: id, Name: chunkName(i), Data: c, ExpiresAt: expires}); err != nil {
			return Ref{}, fmt.Errorf("payload: write %s %s: %w", id, chunkName(i), err)
		}
	}
	if err := s.PutPart(ctx, Part{PayloadID: id, Name: manifestName, Data: mdata, ExpiresAt: expires}); err != nil {
		return Ref{}, fmt.Errorf("payload: write %s %s: %w", id, manifestName, err)
	}
	ref.ManifestID = id
	return ref, nil
}

// Read returns the payload r references, verifying its length and SHA-256
// and, when chunked, the manifest against r and every chunk's position,
// length and SHA-256. A failed check, or a chunk missing while its manifest
// exists, returns an error wrapping ErrCorrupt; a missing manifest (or
// whole part) returns one wrapping ErrNotFound.
func Read(ctx context.Context, s Store, r Ref) (Payload, error) {
	p := Payload{Encoding: r.Encoding, ContentType: r.ContentType, Message: r.Message}
	switch {
	case r.IsZero():
		return Payload{}, errors.New("payload: read of a zero Ref")
	case r.ManifestID == "":
		if int64(len(r.Inline)) != r.Length || Digest(r.Inline) != r.SHA256 {
			return Payload{}, corrupt("inline payload fails its length or SHA-256 check")
		}
		p.Data = bytes.Clone(r.Inline)
		return p, nil
	case r.Inline != nil:
		return Payload{}, corrupt("ref %s has both inline bytes and a manifest", r.ManifestID)
	case r.Whole:
		part, err := s.GetPart(ctx, r.ManifestID, PartWhole)
		if err != nil {
			return Payload{}, fmt.Errorf("payload: read %s %s: %w", r.ManifestID, PartWhole, err)
		}
		if int64(len(part.Data)) != r.Length || Digest(part.Data) != r.SHA256 {
			return Payload{}, corrupt("%s %s fails its length or SHA-256 check", r.ManifestID, PartWhole)
		}
		p.Data = part.Data
		return p, nil
	}
	data, err := readChunked(ctx, s, r)
	if err != nil {
		return Payload{}, err
	}
	p.Data = data
	return p, nil
}

// readChunked reads and verifies the manifest and chunks behind r.
func readChunked(ctx context.Context, s Store, r Ref) ([]byte, error) {
	id := r.ManifestID
	mp, err := s.GetPart(ctx, id, manifestName)
	if err != nil {
		return nil, fmt.Errorf("payload: read %s %s: %w", id, manifestName, err)
	}
	var m manifest
	if err := json.Unmarshal(mp.Data, &m); err != nil {
		return nil, corrupt("%s %s is not a valid manifest", id, manifestName)
	}
	switch {
	case m.Length != r.Length || m.SHA256 != r.SHA256:
		return nil, corrupt("%s manifest length or SHA-256 differs from the ref", id)
	case m.Encoding != r.Encoding || m.ContentType != r.ContentType || m.Message != r.Message:
		return nil, corrupt("%s manifest descriptor differs from the ref", id)
	case m.Length < 0 || m.ChunkSize <= 0 || m.ChunkSize > ChunkSize ||
		m.Chunks != len(m.ChunkSHA256) || int64(m.Chunks) != (m.Length+int64(m.ChunkSize)-1)/int64(m.ChunkSize):
		return nil, corrupt("%s manifest chunk layout is inconsistent", id)
	}

	data := make([]byte, 0, m.Length)
	for i, want := range m.ChunkSHA256 {
		name := chunkName(i)
		c, err := s.GetPart(ctx, id, name)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil, fmt.Errorf("payload: read %s %s: %w (%w)", id, name, ErrCorrupt, err)
		case err != nil:
			return nil, fmt.Errorf("payload: read %s %s: %w", id, name, err)
		}
		if int64(len(c.Data)) != min(int64(m.ChunkSize), m.Length-int64(len(data))) || Digest(c.Data) != want {
			return nil, corrupt("%s %s fails its length or SHA-256 check", id, name)
		}
		data = append(data, c.Data...)
	}
	if Digest(data) != r.SHA256 {
		return nil, corrupt("%s fails its SHA-256 check", id)
	}
	return data, nil
}

// parts lists the stored parts of r, the manifest last (none for an
// inline payload): a chunked payload's manifest is read for its count.
func parts(ctx context.Context, s Store, r Ref) ([]string, error) {
	switch {
	case r.ManifestID == "":
		return nil, nil
	case r.Whole:
		return []string{PartWhole}, nil
	}
	mp, err := s.GetPart(ctx, r.ManifestID, manifestName)
	if err != nil {
		return nil, fmt.Errorf("payload: read %s %s: %w", r.ManifestID, manifestName, err)
	}
	var m manifest
	if err := json.Unmarshal(mp.Data, &m); err != nil || m.Chunks < 0 {
		return nil, corrupt("%s %s is not a valid manifest", r.ManifestID, manifestName)
	}
	names := make([]string, 0, m.Chunks+1)
	for i := range m.Chunks {
		names = append(names, chunkName(i))
	}
	return append(names, manifestName), nil
}

// Extend keeps every stored part of r until at least until: an
// execution referencing the payload is kept longer than was planned when
// it was written. An inline payload stores nothing to extend. A part
// already gone returns an error wrapping ErrNotFound.
func Extend(ctx context.Context, s Store, r Ref, until time.Time) error {
	names, err := parts(ctx, s, r)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := s.ExtendPart(ctx, r.ManifestID, name, until); err != nil {
			return fmt.Errorf("payload: extend %s %s: %w", r.ManifestID, name, err)
		}
	}
	return nil
}

// Delete removes every stored part of r, the manifest first (so the
// payload is unreadable at once, never half there): the payload of a
// request that came to nothing. A payload already gone is no error.
func Delete(ctx context.Context, s Store, r Ref) error {
	names, err := parts(ctx, s, r)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if n := len(names); n > 1 {
		names = append([]string{names[n-1]}, names[:n-1]...)
	}
	for _, name := range names {
		if err := s.DeletePart(ctx, r.ManifestID, name); err != nil {
			return fmt.Errorf("payload: delete %s %s: %w", r.ManifestID, name, err)
		}
	}
	return nil
}

// corrupt returns an error wrapping ErrCorrupt. Callers never pass payload
// bytes, only ids, part names and counts.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}
