package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
)

// JSON encodes v with encoding/json as an EncodingJSON payload.
func JSON(v any) (Payload, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Payload{}, jsonError(fmt.Sprintf("payload: encode %T as JSON", v), err)
	}
	return Payload{Encoding: EncodingJSON, ContentType: ContentTypeJSON, Data: b}, nil
}

// RawJSON wraps b, which must be valid JSON, as an EncodingJSON payload.
// b is copied.
func RawJSON(b []byte) (Payload, error) {
	if !json.Valid(b) {
		return Payload{}, errors.New("payload: RawJSON: bytes are not valid JSON")
	}
	return Payload{Encoding: EncodingJSON, ContentType: ContentTypeJSON, Data: bytes.Clone(b)}, nil
}

// Raw wraps opaque bytes as an EncodingRaw payload with contentType
// (ContentTypeOctet when empty). b is copied.
func Raw(contentType string, b []byte) Payload {
	if contentType == "" {
		contentType = ContentTypeOctet
	}
	return Payload{Encoding: EncodingRaw, ContentType: contentType, Data: bytes.Clone(b)}
}

// FromProto marshals m as an EncodingProtobuf payload whose Message is the
// full name of m's descriptor. Marshaling is deterministic, so the same
// message yields the same bytes and therefore the same payload id.
func FromProto(m proto.Message) (Payload, error) {
	if m == nil {
		return Payload{}, errors.New("payload: FromProto: nil message")
	}
	name := string(m.ProtoReflect().Descriptor().FullName())
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return Payload{}, fmt.Errorf("payload: encode %s: %w", name, err)
	}
	return Payload{Encoding: EncodingProtobuf, ContentType: ContentTypeProtobuf, Message: name, Data: b}, nil
}

// DecodeJSON unmarshals an EncodingJSON payload into v.
func (p Payload) DecodeJSON(v any) error {
	if p.Encoding != EncodingJSON {
		return fmt.Errorf("payload: cannot decode a %q payload as JSON", p.Encoding)
	}
	if err := json.Unmarshal(p.Data, v); err != nil {
		return jsonError(fmt.Sprintf("payload: decode JSON into %T", v), err)
	}
	return nil
}

// DecodeProto unmarshals an EncodingProtobuf payload into m. It refuses a
// payload whose Message is not the full name of m's descriptor.
func (p Payload) DecodeProto(m proto.Message) error {
	if m == nil {
		return errors.New("payload: DecodeProto: nil message")
	}
	want := string(m.ProtoReflect().Descriptor().FullName())
	if p.Encoding != EncodingProtobuf {
		return fmt.Errorf("payload: cannot decode a %q payload as protobuf %s", p.Encoding, want)
	}
	if p.Message != want {
		return fmt.Errorf("payload: payload holds protobuf %q, cannot decode it into %q", p.Message, want)
	}
	if err := proto.Unmarshal(p.Data, m); err != nil {
		return fmt.Errorf("payload: decode %s: %w", want, err)
	}
	return nil
}

// Digest returns the lower-case hex SHA-256 of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// redactedError shows a message written without payload bytes while keeping
// its cause reachable through errors.Is and errors.As. The cause's own text
// is withheld because it may quote the value (encoding/json does).
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }

// jsonError describes an encoding/json error after op without quoting any
// of the value being encoded or decoded.
func jsonError(op string, err error) error {
	var (
		syntax    *json.SyntaxError
		typ       *json.UnmarshalTypeError
		target    *json.InvalidUnmarshalError
		unsupport *json.UnsupportedTypeError
	)
	var why string
	switch {
	case errors.As(err, &syntax):
		why = fmt.Sprintf("invalid JSON at byte offset %d", syntax.Offset)
	case errors.As(err, &typ):
		kind, _, _ := strings.Cut(typ.Value, " ") // Value may be "number 42"
		why = fmt.Sprintf("JSON %s at byte offset %d does not fit Go type %s", kind, typ.Offset, typ.Type)
	case errors.As(err, &target):
		why = target.Error()
	case errors.As(err, &unsupport):
		why = unsupport.Error()
	default:
		why = fmt.Sprintf("%T (details withheld)", err)
	}
	return &redactedError{msg: op + ": " + why, cause: err}
}
