package ddbmodel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// encodeAnswer writes an operation's answer as encoding/json would, byte
// for byte, without its reflection and without checking again the JSON
// that Value.MarshalJSON wrote (json.Marshal validates and compacts every
// MarshalJSON's output: most of an answer's cost when it carries items).
// The shapes the item operations answer (maps of any, items, lists of
// items, strings, integers) are written here; anything else goes through
// json.Marshal.
func encodeAnswer(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case string:
		writeString(b, v)
	case int:
		b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(v), 10))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case Value:
		v.write(b)
	case Item:
		if v == nil {
			b.WriteString("null")
			return nil
		}
		writeItem(b, v)
	case []Item:
		if v == nil {
			b.WriteString("null")
			return nil
		}
		b.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encodeAnswer(b, item); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string][]Item:
		return encodeObject(b, v)
	case map[string]any:
		return encodeObject(b, v)
	case []any:
		if v == nil {
			b.WriteString("null")
			return nil
		}
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encodeAnswer(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		out, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(out)
	}
	return nil
}

// plainJSON reports whether encoding/json writes s as it is between
// quotes: printable ASCII without a quote, a backslash or one of the
// characters it escapes for HTML.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// writeString writes s as a JSON string, as encoding/json does.
func writeString(b *bytes.Buffer, s string) {
	if plainJSON(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	out, _ := json.Marshal(s) // a string always marshals
	b.Write(out)
}

// writeBase64 writes bytes as a JSON string in standard base64 (whose
// alphabet encoding/json writes as it is).
func writeBase64(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	b.Write(base64.StdEncoding.AppendEncode(b.AvailableBuffer(), []byte(s)))
	b.WriteByte('"')
}

// encodeObject writes m as a JSON object, its names sorted (as
// encoding/json does), or null for a nil map.
func encodeObject[V any](b *bytes.Buffer, m map[string]V) error {
	if m == nil {
		b.WriteString("null")
		return nil
	}
	b.WriteByte('{')
	for i, k := range sortedNames(m) {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, k)
		b.WriteByte(':')
		if err := encodeAnswer(b, m[k]); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}
