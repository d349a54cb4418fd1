// Package payload holds the bytes that flow through a pipeline (submitted
// input, step outputs, results) and the seam that stores large ones.
//
// A payload small enough for the execution row travels inline in its Ref.
// A larger one is written once to a Store as byte chunks of at most
// ChunkSize plus a manifest, chunks first and manifest last; the row then
// references the manifest. Part ids derive from the content digest and the
// slot (which execution field the payload fills), so a replayed transition
// rewrites identical items and never collides with different content.
// Reads verify chunk count, order, length and SHA-256.
package payload

import (
	"context"
	"errors"
	"time"
)

// Encoding names how Payload.Data is serialized.
type Encoding string

// Supported encodings.
const (
	// EncodingJSON is UTF-8 JSON; ContentType is application/json.
	EncodingJSON Encoding = "json"
	// EncodingRaw is opaque bytes with the caller's ContentType.
	EncodingRaw Encoding = "raw"
	// EncodingProtobuf is a binary protobuf message; Message holds its full name.
	EncodingProtobuf Encoding = "protobuf"
)

// Content types used by the built-in encodings.
const (
	ContentTypeJSON     = "application/json"
	ContentTypeProtobuf = "application/x-protobuf"
	ContentTypeOctet    = "application/octet-stream"
)

// ChunkSize is the largest chunk written to a Store: 256 KiB, well below
// DynamoDB's 400 KiB item limit.
const ChunkSize = 256 * 1024

// MaxInlineBudget is the largest inline budget allowed. An execution row
// carries two payload slots (input and result); with both at this size the
// row still leaves 16 KiB for its other attributes under DynamoDB's
// 400 KiB (409,600 byte) item limit.
const MaxInlineBudget = 192 * 1024

// DefaultInlineBudget is the default inline budget in bytes: small on
// purpose. DynamoDB bills every conditional write of a row by the whole
// item, one unit per started kilobyte, and a row's other attributes take
// about 450 bytes, so with its input and its latest step output each at
// most 256 bytes a row stays under 1 KB and every step costs one write
// unit. A larger payload is written once to the payload table and the row
// carries a reference of about 90 bytes.
const DefaultInlineBudget = 256

// Payload is a serialized value with its descriptor.
type Payload struct {
	// Encoding says how Data is serialized.
	Encoding Encoding `json:"encoding"`
	// ContentType is the media type served back to HTTP callers.
	ContentType string `json:"contentType"`
	// Message is the protobuf message full name (only for EncodingProtobuf).
	Message string `json:"_tpf_message,omitempty"`
	// Data is the serialized bytes. It never appears in logs.
	Data []byte `json:"-"`
}

// Ref is how an execution row points at a payload: either the bytes inline
// or the id of a manifest in a Store, always with length and digest.
type Ref struct {
	Encoding    Encoding `json:"encoding"`
	ContentType string   `json:"contentType"`
	// Message is the protobuf full name, stored as _tpf_message.
	Message string `json:"_tpf_message,omitempty"`
	// Length is the byte length of the serialized payload.
	Length int64 `json:"length"`
	// SHA256 is the lower-case hex SHA-256 of the serialized payload.
	SHA256 string `json:"sha256"`
	// Inline holds the bytes when the payload is stored in the row.
	Inline []byte `json:"inline,omitempty"`
	// ManifestID is the payload id of a payload stored in a Store: its
	// manifest and chunks, or, when Whole, its one part.
	ManifestID string `json:"manifestId,omitempty"`
	// Whole marks a stored payload of one part (PartWhole) that holds all
	// its bytes: no manifest, one write and one read. The Ref itself then
	// carries the descriptor, length and digest a manifest would.
	Whole bool `json:"whole,omitempty"`
}

// IsZero reports whether r references nothing.
func (r Ref) IsZero() bool { return r.SHA256 == "" && r.ManifestID == "" && r.Inline == nil }

// Part is one stored item: a chunk or a manifest.
type Part struct {
	// PayloadID is the partition key (payload_id).
	PayloadID string
	// Name is the sort key (payload_part): "manifest", "chunk#NNNNN" or
	// PartWhole.
	Name string
	// Data is the item's bytes.
	Data []byte
	// ExpiresAt is when the item may be deleted (zero: never). It is not
	// part of an item's identity: a replay with another expiry is identical.
	ExpiresAt time.Time
}

// Store is the seam for chunked payload storage. Implementations: in
// memory, DynamoDB. Every implementation passes the chunk store suite of
// package backendtest (Provider.Payloads).
type Store interface {
	// PutPart writes p if no item with its (PayloadID, Name) exists. An
	// existing item with identical Data is accepted (a replay); an existing
	// item with different Data returns ErrConflict.
	PutPart(ctx context.Context, p Part) error
	// GetPart reads an item. A missing or expired item returns ErrNotFound.
	GetPart(ctx context.Context, payloadID, name string) (Part, error)
	// ExtendPart moves a live item's expiry to until if that is later
	// (never earlier): the execution that references the payload lives
	// longer than planned at write time. A missing or expired item returns
	// ErrNotFound.
	ExtendPart(ctx context.Context, payloadID, name string, until time.Time) error
	// DeletePart removes an item (a missing one is no error): the parts of
	// a payload no execution came to reference.
	DeletePart(ctx context.Context, payloadID, name string) error
}

// Errors returned by Store implementations and by Read.
var (
	// ErrNotFound reports a missing part.
	ErrNotFound = errors.New("payload: part not found")
	// ErrConflict reports an existing part with different bytes.
	ErrConflict = errors.New("payload: part exists with different content")
	// ErrCorrupt reports a payload whose parts fail verification.
	ErrCorrupt = errors.New("payload: corrupt payload")
	// ErrInvalid reports a payload that cannot be stored at all (an
	// unknown or empty encoding, a protobuf payload without a message
	// name, one too large to chunk): writing it again cannot help.
	ErrInvalid = errors.New("payload: payload cannot be stored")
)
